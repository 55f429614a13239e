"""How well a model knows a task it never saw: its per-device compute error and its ranking of
placements against an exact judge, and how often its ensemble's confidence covers the true gain
(the out-of-distribution study's per-task figures, `benchmarks/ood.py`)."""

from __future__ import annotations

import numpy as np

from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.evaluation.rounds import bootstrap_share, spearman
from dreamshard.learn.shipped import gain_misses
from dreamshard.placement.heuristics import HEURISTIC_KEYS, random_place
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.planners.dreamshard_planner import (
    ensemble_scores,
    predicted_overall,
    ranked_candidates,
)

RANDOM_PLACEMENTS = 4


def accuracy(task: PlacementTask, plans: dict[str, Placement], model, judge) -> dict:
    """The model's accuracy over the heuristics' and the planner's plans and random ones (at
    least eight a task): per-device compute MAPE, within-task Spearman of its overall with the
    judge's, and its confidence's misses (`gain_misses`) over the candidates the planner
    weighs and over these placements."""
    placements = dict(plans)
    for seed in range(RANDOM_PLACEMENTS):
        placements[f"random {seed}"] = random_place(task, seed)
    true = {name: judge.measure(task, p) for name, p in placements.items()}
    predicted = {name: model.costnet.predict_ms(task, p) for name, p in placements.items()}
    errors = []
    for name in placements:
        devices, _ = predicted[name]
        for d, cost in enumerate(true[name].devices):
            real = cost.fwd_comp + cost.bwd_comp
            if real > 0:
                errors.append(abs(devices[d, 0] + devices[d, 2] - real) / real)
    overall = {name: cost.overall for name, cost in true.items()}
    first = [predicted[name][1] for name in placements]
    return {
        "device_mape": float(np.mean(errors)),
        "spearman": spearman(first, [overall[n] for n in placements]),
        "residuals": candidate_misses(task, model, judge),
        "placement_residuals": placement_misses(task, model, placements, overall, first),
    }


def candidate_misses(task: PlacementTask, model, judge: SimulatedBackend) -> list[float]:
    """`gain_misses` over every candidate the default planner weighs for `task` (seed 0, eight
    samples), the reference being the heuristic candidate the ensemble predicts cheapest.
    Empty without an ensemble."""
    if not model.ensemble:
        return []
    candidates = [placement for placement, _ in ranked_candidates(task, model)]
    first = predicted_overall(model, task, candidates)
    members = ensemble_scores(model, task, candidates, first)
    true = np.array([judge.measure(task, p).overall for p in candidates])
    heuristic = [p.candidate.startswith("heuristic ") for p in candidates]
    return gain_misses(members, true, heuristic)


def placement_misses(task, model, placements: dict, costs: dict, first: list[float]) -> list:
    """`gain_misses` over the study's placements, the reference being the heuristic the
    ensemble predicts cheapest. Empty without an ensemble."""
    if not model.ensemble:
        return []
    members = ensemble_scores(model, task, list(placements.values()), first)
    true = np.array([costs[name] for name in placements])
    return gain_misses(members, true, [name in HEURISTIC_KEYS for name in placements])


def coverage(per_task: list[list[float]], z90: float | None) -> dict | None:
    """How many (task, pair) misses a nominal 90% interval (z90 spreads) covers: the share,
    the pairs, and a 95% interval of the share with tasks resampled, or None without pairs or
    calibration."""
    per_task = [np.asarray(misses) for misses in per_task if len(misses)]
    if not per_task or z90 is None:
        return None
    covered = np.array([(misses <= z90).sum() for misses in per_task])
    pairs = np.array([misses.size for misses in per_task])
    return {
        "share": float(covered.sum() / pairs.sum()),
        "pairs": int(pairs.sum()),
        "interval": list(bootstrap_share(covered, pairs)),
    }
