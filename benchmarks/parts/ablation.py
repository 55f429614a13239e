"""What each part of the default planner buys (issue 28): its parts run alone on the same tasks.

Every row places whole tables (the paper's setting) and is judged by the caller's judge:

    heuristic NAME               the four greedy heuristics (the reference: the best per task)
    costnet greedy               each table where the cost network predicts the lowest overall
    costnet greedy + search      that, then the planner's local search on the cost network
    policy greedy / best of 8    the policy's argmax rollout, and the best of it and 8 sampled
                                 ones by the network's prediction; `untrained` and `trained`
                                 policies on the same fixed cost network
    default planner              `dreamshard` with 8 samples: all of the above, the heuristics'
                                 placements and the margin rule
    search_analytic              the local search on the analytic model (no learning at all)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch

from dreamshard.evaluation.results import Evaluation
from dreamshard.evaluation.rounds import bootstrap_paired, spearman
from dreamshard.learn.model_file import DreamShardModel
from dreamshard.learn.policy import fast_rollout
from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place
from dreamshard.placement.registry import place
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.planners.dreamshard_planner import (
    costnet_greedy,
    costnet_search,
    episode_candidates,
    predicted_overall,
)

SAMPLES = 8


def policy_rows(name: str, model: DreamShardModel) -> dict[str, Callable]:
    """The policy's greedy rollout and its best of greedy + `SAMPLES` sampled ones."""

    def greedy(task: PlacementTask) -> Placement:
        return place(task, "dreamshard", model=model, samples=0, split="none")

    def best_of(task: PlacementTask) -> Placement:
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            episodes = fast_rollout(model.policy, task, model.costnet, 1, SAMPLES, generator)
        found = episode_candidates(episodes)
        scores = predicted_overall(model, task, found)
        return found[int(np.argmin(scores))]

    return {f"{name} policy greedy": greedy, f"{name} policy best of {SAMPLES + 1}": best_of}


def ablation_rows(
    trained: DreamShardModel, untrained_policy, shipped: DreamShardModel | None = None
) -> dict[str, Callable]:
    """Every row's planner `task -> Placement`: the learned ones on `trained`'s cost network,
    the untrained rows with `untrained_policy` on that same network; with `shipped`, the
    default planner with it too (what training adds to the package's own model)."""
    untrained = replace(trained, policy=untrained_policy)

    def greedy(task: PlacementTask) -> Placement:
        with torch.no_grad():
            return costnet_greedy(task, trained.costnet)

    def greedy_search(task: PlacementTask) -> Placement:
        return costnet_search(task, trained.costnet, greedy(task))[0]

    rows: dict[str, Callable] = {
        f"heuristic {key}": (lambda task, key=key: greedy_place(task, key))
        for key in HEURISTIC_KEYS
    }
    rows["costnet greedy"] = greedy
    rows["costnet greedy + search"] = greedy_search
    rows |= policy_rows("untrained", untrained)
    rows |= policy_rows("trained", trained)
    rows["default planner"] = lambda task: place(
        task, "dreamshard", model=trained, samples=SAMPLES, split="none"
    )
    if shipped is not None:
        rows["default planner, shipped model"] = lambda task: place(
            task, "dreamshard", model=shipped, samples=SAMPLES, split="none"
        )
    rows["search_analytic"] = lambda task: place(task, "search_analytic", split="none")
    return rows


def run_ablation(tasks: list[PlacementTask], rows: dict[str, Callable], judge, log=print) -> dict:
    """[task][row] exact costs, and per row the ratios to the per-task best heuristic."""
    costs = []
    for task in tasks:
        costs.append({name: float(judge(task, planner(task))) for name, planner in rows.items()})
        best = min(costs[-1][f"heuristic {k}"] for k in HEURISTIC_KEYS)
        log(
            f"{task.name}: "
            + ", ".join(f"{n} {c / best:.3f}" for n, c in costs[-1].items() if "heuristic" not in n)
        )
    return {"tasks": [t.name for t in tasks], "costs": costs}


def ratios(costs: list[dict]) -> dict[str, np.ndarray]:
    """Per row, each task's cost over that task's best heuristic."""
    best = np.array([min(c[f"heuristic {k}"] for k in HEURISTIC_KEYS) for c in costs])
    return {name: np.array([c[name] for c in costs]) / best for name in costs[0]}


def measured_rows(rows: dict[str, Callable]) -> dict[str, Callable]:
    """The rows as `evaluation.evaluate` planners `(task, seed) -> Placement`, the heuristics
    under their registry names (so that `Evaluation` knows them as the reference)."""
    return {
        name.removeprefix("heuristic "): (lambda task, _seed, planner=planner: planner(task))
        for name, planner in rows.items()
    }


def measured_ratios(evaluation: Evaluation) -> dict[str, tuple[float, float, float, int]]:
    """Per row (heuristics named "heuristic KEY" again): its paired ratio to the per-task best
    heuristic over rounds and tasks, the bootstrap 95% interval (tasks and rounds resampled)
    and the task count (`rounds.bootstrap_paired`)."""
    heuristics = set(evaluation.heuristics)
    return {
        (f"heuristic {name}" if name in heuristics else name): bootstrap_paired(
            evaluation.log_ratios(name, "per_task_best_heuristic")
        )
        for name in evaluation.planners
    }


def measured_spearman(evaluation: Evaluation, model: DreamShardModel) -> np.ndarray:
    """Per task, the Spearman correlation of the model's predicted overall with the measured
    mean over the rounds, over the task's distinct placements (NaN below three)."""
    found = []
    for t, task in enumerate(evaluation.tasks):
        distinct = {}
        for j, placement in enumerate(evaluation.placements[t]):
            if placement is not None:
                distinct.setdefault((placement.devices, placement.splits), (j, placement))
        measured = [float(evaluation.costs[:, t, j].mean()) for j, _ in distinct.values()]
        predicted = [model.costnet.predict_ms(task, p)[1] for _, p in distinct.values()]
        found.append(spearman(predicted, measured) if len(distinct) >= 3 else float("nan"))
    return np.array(found)
