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

from dreamshard.evaluation.rounds import spearman
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


def distinct_plans(task: PlacementTask, plans: dict[str, Placement], models: dict) -> dict:
    """A task's distinct plans: the arms that made each (`arms`) and, per model, its cost
    network's predicted overall of each (ms), for the networks' within-task Spearman."""
    groups: dict[tuple, list[str]] = {}
    for arm, placement in plans.items():
        groups.setdefault((placement.devices, placement.splits), []).append(arm)
    out: dict = {"arms": list(groups.values())}
    with torch.no_grad():
        for name, model in models.items():
            out[name] = [
                round(float(model.costnet.predict_ms(task, plans[arms[0]])[1]), 5)
                for arms in out["arms"]
            ]
    return out


def within_task_spearman(row: dict, model: str, judge: str) -> float:
    """The Spearman correlation, over one task's distinct plans, of `model`'s predicted overall
    with the judge's cost (the mean over the rounds and the arms that made it); NaN below
    three plans or when some plan was not judged."""
    found = row.get("distinct")
    if not found or model not in found:
        return float("nan")
    judged = []
    for arms in found["arms"]:
        each = [c for arm in arms for c in row["plans"][arm]["costs"].get(judge) or [None]]
        judged.append(float("nan") if None in each else float(np.mean(each)))
    if np.isnan(judged).any():
        return float("nan")
    return spearman(found[model], judged)
