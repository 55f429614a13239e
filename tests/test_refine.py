"""Measured refinement (`dreamshard place --refine`): what it returns was measured and is legal;
the planner's pick stays unless another candidate is cheaper beyond the noise."""

import json

import numpy as np
import pytest
import torch

from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.evaluation.refine import choose, refine
from dreamshard.learn.costnet import CostNet
from dreamshard.learn.model_file import DreamShardModel, save_model
from dreamshard.learn.policy import PlacementPolicy
from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place
from dreamshard.placement.plan_file import placement_from_plan, read_plan
from dreamshard.placement.registry import place
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import PlacementTask, is_legal
from dreamshard.tables.sources import load_tables
from tests.conftest import error_line

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model() -> DreamShardModel:
    """An untrained model: refinement must hold whatever the cost network ranks first."""
    torch.manual_seed(0)
    return DreamShardModel(CostNet(), PlacementPolicy())


@pytest.fixture(scope="module")
def tables_file(tmp_path_factory):
    from dreamshard.tables.sources import save_tables
    from dreamshard.tables.synthetic import generate_tables

    path = tmp_path_factory.mktemp("tables") / "tables.json"
    source = {"kind": "synthetic", "profile": "cpu", "seed": 3}
    save_tables(generate_tables("cpu", 10, 3), path, source)
    return path


def test_refine_returns_the_cheapest_measured_candidate_and_it_is_legal(model):
    backend = SimulatedBackend()
    for task in make_suite(parse_suite_name("cpu-24x4", 1, 3)).test_tasks:
        result = refine(task, "dreamshard", backend, 5.0, model)
        found = {c.placement.devices: c for c in result.candidates}
        assert len(found) == len(result.candidates)  # distinct placements only
        pick = place(task, "dreamshard", model=model)
        assert result.candidates[0].placement.devices == pick.devices
        assert {greedy_place(task, k).devices for k in HEURISTIC_KEYS} <= set(found)
        assert is_legal(task, result.placement) and result.placement.devices in found
        # exact costs: the answer is the cheapest of what was measured, never dearer than the pick
        exact = backend.measure(task, result.placement).overall
        assert exact == min(c.median_ms for c in result.candidates)
        assert exact <= result.candidates[0].median_ms
        assert all(len(set(c.costs_ms)) == 1 for c in result.candidates)
        assert result.rounds == 3  # exact costs repeat: no round past the minimum
        won = result.candidates[result.winner].name
        if won.startswith("heuristic "):  # a heuristic's placement keeps its name
            assert result.placement.method == won.removeprefix("heuristic ")
        else:
            assert result.placement.method == "dreamshard_refined"


def test_the_pick_stays_unless_another_is_cheaper_beyond_the_noise():
    names = ["pick", "a", "b"]
    # a: cheaper in 2 of 3 rounds; b: 3% dearer on average, cheaper in one round
    mixed = np.array([[10.0, 9.5, 10.6], [10.0, 10.4, 9.9], [10.0, 9.7, 10.4]])
    kept = choose(mixed, names)
    assert kept.winner == 0 and "kept the planner's pick" in kept.reason
    assert kept.intervals[1][0] < 1.0 < kept.intervals[1][1]
    clear = mixed.copy()
    clear[:, 2] = [9.4, 9.6, 9.5]  # b cheaper in every round
    assert choose(clear, names).winner == 2
    # many rounds: 5% cheaper in 11 of 12 rounds, one round slightly dearer: beyond the noise
    rng = np.random.default_rng(1)
    pick = 10 * rng.uniform(0.9, 1.1, size=12)
    ratio = np.full(12, 0.95)
    ratio[4] = 1.01
    same = pick * rng.uniform(0.97, 1.03, size=12)  # equal cost, measured with noise
    costs = np.stack([pick, pick * ratio, same], axis=1)
    choice = choose(costs, names)
    assert choice.winner == 1 and choice.intervals[1][1] < 1.0
    assert choice.intervals[2][0] < 1.0 < choice.intervals[2][1]


def test_place_refine_writes_what_it_measured(cli, model, tables_file, tmp_path):
    model_file, plan = tmp_path / "model.pt", tmp_path / "plan.json"
    save_model(model, model_file)
    args = ["place", "--tables", str(tables_file), "--devices", "3", "--mem-gb", "1"]
    args += ["--precision", "fp32", "--method", "dreamshard", "--model", str(model_file)]
    done = cli(*args, "--refine", "simulated", "--refine-seconds", "5", "--out", str(plan))
    assert done.returncode == 0, done.stderr
    assert "refining on simulated" in done.stderr and "refined: " in done.stdout
    saved = read_plan(plan)
    record = saved.refinement
    assert record.backend == "simulated" and record.rounds == 3 and len(record.candidates) >= 5
    assert record.candidates[0].predicted_ms is not None
    assert record.winner in {c.name for c in record.candidates}
    task = PlacementTask(tuple(load_tables(str(tables_file))), 3, 2**30, "fp32")
    placement = placement_from_plan(task, saved, str(plan))  # refused unless legal
    cost = SimulatedBackend().measure(task, placement).overall
    winner = next(c for c in record.candidates if c.name == record.winner)
    assert cost == pytest.approx(winner.median_ms, rel=1e-9)
    assert cost == min(c.median_ms for c in record.candidates)
    assert saved.method in {"dreamshard_refined", *HEURISTIC_KEYS}
    data = json.loads(plan.read_text())
    del data["refinement"]  # a plan from before --refine still reads
    old = tmp_path / "old-plan.json"
    old.write_text(json.dumps(data))
    assert read_plan(old).refinement is None


def test_refine_on_real_kernels_measures_a_heuristic_method_against_the_others(
    cli, tables_file, tmp_path
):
    plan = tmp_path / "plan.json"
    args = ["place", "--tables", str(tables_file), "--devices", "2", "--mem-gb", "1"]
    args += ["--precision", "fp32", "--method", "lookup", "--out", str(plan)]
    done = cli(*args, "--refine", "fbgemm", "--refine-seconds", "1")
    assert done.returncode == 0, done.stderr
    record = read_plan(plan).refinement
    assert record.backend == "fbgemm" and "measured" in record.costs_made
    assert record.rounds >= 3 and record.candidates[0].name == "lookup"
    assert {c.name for c in record.candidates[1:]} <= {f"heuristic {k}" for k in HEURISTIC_KEYS}
    for candidate in record.candidates:
        assert len(candidate.costs_ms) == record.rounds and min(candidate.costs_ms) > 0
    task = PlacementTask(tuple(load_tables(str(tables_file))), 2, 2**30, "fp32")
    assert is_legal(task, placement_from_plan(task, read_plan(plan), str(plan)))


def test_a_bad_refine_value_is_one_line_and_no_plan(cli, tables_file, tmp_path):
    plan = tmp_path / "plan.json"
    args = ["place", "--tables", str(tables_file), "--devices", "2", "--mem-gb", "1"]
    args += ["--out", str(plan)]
    for bad in (["--refine", "gpu"], ["--refine", "simulated", "--refine-seconds", "0"]):
        refused = cli(*args, *bad)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr
        [line] = refused.stderr.strip().splitlines()
        assert "--refine" in line
    alone = cli(*args, "--refine-seconds", "5")
    assert "--refine-seconds needs --refine" in error_line(alone)
    assert not plan.exists()


def test_a_reference_is_measured_first_and_keeps_its_own_name_when_it_wins(model):
    """`place --refine dmp`'s shape: TorchRec's plan (here a stand-in, `random`'s placement,
    the dearest) measured first; on exact costs the cheapest wins and is credited to whoever
    made it; the reference, when it is the cheapest, stays under its own name."""
    from dataclasses import replace

    backend = SimulatedBackend()
    task = make_suite(parse_suite_name("cpu-24x4", 1, 1)).test_tasks[0]
    dear = replace(place(task, "random", seed=1), candidate="reference")
    result = refine(task, "dreamshard", backend, 5.0, model, reference=dear)
    assert result.candidates[0].name == "reference"
    assert result.candidates[0].placement.devices == dear.devices
    assert result.winner != 0 and result.placement.method != "random"
    cheapest = min(result.candidates[1:], key=lambda c: c.median_ms)
    best = replace(cheapest.placement, candidate="reference", method="torchrec")
    kept = refine(task, "dreamshard", backend, 5.0, model, reference=best)
    assert kept.winner == 0 and kept.placement.method == "torchrec"
    assert kept.placement.devices == best.devices
