"""Every planner on random tasks whose memory caps bind, and how the dreamshard planner names
its winner.

Caps are 1.02-1.15 x an even split, so the planners' key-greedy orders alone would overflow a
device (checked below): a plan is legal only because the planner respects memory.
"""

import numpy as np
import pytest
import torch

from benchmarks.parts.milp import solve_milp
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.errors import DreamshardError, InfeasibleError
from dreamshard.evaluation.results import candidate_kind
from dreamshard.learn.costnet import CostNet
from dreamshard.learn.model_file import DreamShardModel
from dreamshard.learn.policy import PlacementPolicy, fast_rollout
from dreamshard.learn.rnn import RnnPlacer
from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place, heuristic_keys
from dreamshard.placement.packing import (
    largest_first,
    least_load_dive,
    least_used_first,
    search_assignment,
)
from dreamshard.placement.plan_file import plan_to_dict
from dreamshard.placement.registry import method_names, place
from dreamshard.placement.tasks import PlacementTask, device_memory, is_legal
from dreamshard.planners import dreamshard_planner
from dreamshard.planners.dreamshard_planner import costnet_greedy, predicted_overall
from dreamshard.planners.search import dreamshard_search_place, search_analytic_place
from tests.conftest import random_tables

SEEDS = range(20)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def binding_task(seed: int, num_devices: int | None = None) -> PlacementTask:
    """8-30 tables of varied shape on 2-8 devices, each cap 1.02-1.15 x an even split."""
    rng = np.random.default_rng(seed)
    num_tables = int(rng.integers(8, 31))
    num_devices = num_devices or int(rng.integers(2, 9))
    tables = random_tables(rng, num_tables, (2_000, 300_000), [4, 8, 16, 32, 64, 128])
    slack = float(rng.uniform(1.02, 1.15))
    sizes = [t.bytes("fp16") for t in tables]
    cap = int(max(max(sizes), slack * sum(sizes) / num_devices))
    return PlacementTask(tables, num_devices, cap, "fp16", f"binding-{seed}")


def proven_feasible(task: PlacementTask) -> bool:
    """Whether a legal placement exists: an exhaustive packing search, not a planner."""
    devices, exhausted = search_assignment(task, largest_first(task), least_used_first, None, 10**7)
    assert devices is not None or exhausted, "the search ran out of nodes: use a smaller task"
    return devices is not None


def untrained_model(seed: int) -> DreamShardModel:
    torch.manual_seed(seed)
    return DreamShardModel(CostNet(), PlacementPolicy(table_aware=seed % 2 == 1))


@pytest.fixture(scope="module")
def tasks():
    out = [(binding_task(seed), seed) for seed in SEEDS]
    feasible = [proven_feasible(task) for task, _ in out]
    assert sum(feasible) >= 15, "too few feasible tasks: the checks below would test little"
    return [(task, seed, ok) for (task, seed), ok in zip(out, feasible)]


def test_the_caps_bind_the_key_greedy_would_overflow(tasks):
    overflowing = 0
    for task, _, _ in tasks:
        roomy = PlacementTask(task.tables, task.num_devices, 2**62, task.precision)
        for key in HEURISTIC_KEYS:
            keys = heuristic_keys(task, key)
            order = sorted(range(len(keys)), key=lambda i, k=keys: (-k[i], i))
            blind = least_load_dive(roomy, order, keys)  # the greedy as if memory were endless
            used = np.bincount(blind, weights=task.table_bytes(), minlength=task.num_devices)
            overflowing += bool(used.max() > task.memory_cap_bytes)
    assert overflowing >= len(tasks) * len(HEURISTIC_KEYS) // 2


def check(task, feasible, planner, *args, **kwargs) -> None:
    """`planner(task, *args, **kwargs)` gives a legal placement, or raises InfeasibleError only
    where no legal placement exists."""
    try:
        placement = planner(task, *args, **kwargs)
    except InfeasibleError:
        assert not feasible, f"gave up on {task.name}, which has a legal placement"
        return
    assert is_legal(task, placement), (task.name, device_memory(task, placement))


@pytest.mark.parametrize("method", method_names("baseline", "heuristic"))
def test_every_heuristic_is_legal_under_binding_caps(tasks, method):
    for task, seed, feasible in tasks:
        check(task, feasible, place, method, seed)


@pytest.mark.parametrize("samples", [0, 8])
def test_dreamshard_is_legal_under_binding_caps(tasks, samples):
    for task, seed, feasible in tasks:
        model = untrained_model(seed)
        check(task, feasible, place, "dreamshard", seed, model=model, samples=samples)


def test_dreamshard_search_is_legal_under_binding_caps(tasks):
    for task, seed, feasible in tasks[:10]:
        model = untrained_model(seed)
        check(task, feasible, dreamshard_search_place, model, 2, seed, max_rounds=3)


def test_search_analytic_is_legal_and_no_worse_than_its_start_under_binding_caps(tasks):
    backend = SimulatedBackend()
    for task, seed, feasible in tasks:
        check(task, feasible, search_analytic_place, seed, max_rounds=20)
        if feasible:
            found = search_analytic_place(task, seed, max_rounds=20)
            start = min(
                backend.measure(task, greedy_place(task, k)).overall for k in HEURISTIC_KEYS
            )
            assert backend.measure(task, found).overall <= start + 1e-9


def test_the_milp_is_legal_under_binding_caps(tasks):
    placed = 0
    for task, _, feasible in tasks:
        result = solve_milp(task, heuristic_keys(task, "size_lookup"), time_limit_s=0.5)
        if result.placement is None:
            assert result.status != "infeasible" or not feasible, task.name
            continue
        assert is_legal(task, result.placement), task.name
        placed += 1
    assert placed >= 5


def test_the_rnn_is_legal_on_its_device_count_under_binding_caps():
    torch.manual_seed(0)
    placer = RnnPlacer(num_devices=4)
    placer.eval()
    placed = 0
    for seed in SEEDS:
        task = binding_task(seed, num_devices=4)
        try:
            placement = place(task, "rnn", seed, model=placer)
        except InfeasibleError:  # its episodes may all run out of room; it then says so
            continue
        assert is_legal(task, placement), task.name
        placed += 1
    assert placed >= 10
    with pytest.raises(DreamshardError, match="trained for 4 devices"):
        place(binding_task(0, num_devices=3), "rnn", model=placer)


@pytest.mark.parametrize("reserve", [True, False])
def test_torchrec_plans_are_legal_or_declined_under_binding_caps(tasks, reserve):
    pytest.importorskip("torchrec")
    from dreamshard.integrations.torchrec_planner import torchrec_place

    planned = 0
    # with its own reservation (15% of a device and more) TorchRec declines caps this tight
    for task, _, _ in tasks if not reserve else tasks[:5]:
        try:
            placement = torchrec_place(task, reserve=reserve)
        except DreamshardError as exc:  # TorchRec may decline; it never overloads a device
            assert "torchrec's planner rejects this task" in str(exc)
            continue
        assert is_legal(task, placement), task.name
        planned += 1
    assert reserve or planned >= 4


# --- the dreamshard planner's winner ------------------------------------------------------------


def test_the_winner_is_the_cheapest_candidate_and_is_named_after_its_source(monkeypatch):
    """Without the final search (tested below), the winner is one of the candidates: the
    cheapest predicted, or the best heuristic's when nothing is predicted `HEURISTIC_MARGIN`
    cheaper than it."""
    monkeypatch.setattr(dreamshard_planner, "PLACE_SEARCH_ROUNDS", 0)
    kinds = set()
    samples = 4
    for seed in range(10):
        task = binding_task(seed)
        model = untrained_model(seed)
        try:
            winner = place(task, "dreamshard", seed, model=model, samples=samples, split="none")
        except InfeasibleError:
            continue
        episodes = fast_rollout(
            model.policy, task, model.costnet, 1, samples, torch.Generator().manual_seed(seed)
        )
        heuristics = {key: greedy_place(task, key) for key in HEURISTIC_KEYS}
        candidates = [episodes.placement(e, "") for e in range(1 + samples) if episodes.legal[e]]
        candidates += list(heuristics.values())
        own_greedy = costnet_greedy(task, model.costnet)
        candidates += [own_greedy] if own_greedy is not None else []
        [best, *others] = predicted_overall(model, task, [winner, *candidates])
        cheapest = min(others)
        best_heuristic = min(predicted_overall(model, task, list(heuristics.values())))
        margin = dreamshard_planner.HEURISTIC_MARGIN
        if winner.candidate.startswith("heuristic "):  # nothing beat it by the margin
            assert best <= best_heuristic + 1e-5 * abs(best)  # the best heuristic
            assert cheapest >= (1 - margin) * best * (1 - 1e-5)
        else:  # the cheapest, float rounding aside, and a margin below every heuristic
            assert best <= cheapest + 1e-5 * abs(cheapest)
            assert best < (1 - margin) * best_heuristic
        if winner.candidate.startswith("heuristic "):
            name = winner.candidate.removeprefix("heuristic ")
            assert winner.method == name  # reported as the heuristic, not as the policy
            assert winner.devices == heuristics[name].devices
            kinds.add("heuristic")
        elif winner.candidate == "costnet greedy":
            assert winner.method == "dreamshard" and winner.devices == own_greedy.devices
            kinds.add("costnet greedy")
        else:
            assert winner.method == "dreamshard"
            if winner.candidate == "policy greedy":
                episode = 0
            else:
                episode = int(winner.candidate.removeprefix("policy sample "))
            assert 0 <= episode <= samples and episodes.legal[episode]
            assert winner.devices == episodes.placement(episode, "").devices
            kinds.add("policy")
        plan = plan_to_dict(task, winner)
        assert plan["candidate"] == winner.candidate and plan["method"] == winner.method
    assert {"heuristic", "policy"} <= kinds, "both kinds of winner must occur to test both"


def test_the_final_search_only_improves_and_says_where_it_started():
    searched = 0
    for seed in range(6):
        task = binding_task(seed)
        model = untrained_model(seed)
        try:
            ranked = dreamshard_planner.ranked_candidates(task, model, 4, seed)
        except InfeasibleError:
            continue
        winner, cost = ranked[0]
        assert is_legal(task, winner)
        assert predicted_overall(model, task, [winner])[0] == pytest.approx(cost, rel=1e-5)
        margin = dreamshard_planner.HEURISTIC_MARGIN if winner.method in HEURISTIC_KEYS else 0
        assert all((1 - margin) * cost <= other + 1e-5 * abs(other) for _, other in ranked[1:])
        if "search steps" in winner.candidate:
            searched += 1
            source, steps = winner.candidate.rsplit(" + ", 1)
            start = next(c for c, _ in ranked if c.candidate == source)
            assert winner.method == "dreamshard" and int(steps.split()[0]) > 0
            assert winner.devices != start.devices
            # reports count it under its source, searched
            assert candidate_kind(winner.candidate) == f"{candidate_kind(start.candidate)} + search"
        else:
            assert "search" not in candidate_kind(winner.candidate)
    assert searched, "the search must improve some winner to test it"
