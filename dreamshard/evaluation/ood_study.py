"""The out-of-distribution study (issue 28): a model on table families it never saw, zero-shot,
judged on exact costs by the calibrated simulated backend.

For every task of `evaluation.ood_families` (fixed families and seeds): the four greedy
heuristics' whole-table plans, the best of them per task being the reference; the default
planner (`dreamshard`, whole tables, seed 0) with the model; and the model's accuracy on the
task: its per-device compute error and the Spearman correlation of its overall with the
judge's over the heuristics', random and the planner's placements (at least 8 a task).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.errors import InfeasibleError
from dreamshard.evaluation.ood_families import ood_tasks
from dreamshard.evaluation.rounds import (
    bootstrap_interval,
    bootstrap_share,
    geometric_mean,
    spearman,
)
from dreamshard.learn.model_file import resolve_model
from dreamshard.learn.shipped import gain_misses
from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place, random_place
from dreamshard.placement.registry import named_planner
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.planners.dreamshard_planner import (
    ensemble_scores,
    predicted_overall,
    ranked_candidates,
)

RANDOM_PLACEMENTS = 4
# the suites a confidence could be calibrated on instead of the family (`calibration_check`)
CALIBRATION_SUITES = (
    "cpu-50x4",
    "cpu-100x4",
    "cpu-100x8",
    "cpu-200x8",
    "dlrm-50x4",
    "dlrm-50x8",
    "dlrm-100x8",
    "dlrm-200x16",
)
SUITE_TASKS = 4
TARGET_WORST = 1.01  # the default planner never above this x the per-task best heuristic
TARGET_GEOMEAN = 0.93  # and at most this as a geometric mean


def study_placements(task: PlacementTask, planner: Callable) -> dict[str, Placement]:
    """What a task's accuracy is judged over: the heuristics', the planner's and random plans."""
    placements: dict[str, Placement] = {k: greedy_place(task, k) for k in HEURISTIC_KEYS}
    placements["dreamshard"] = planner(task, 0)
    for seed in range(RANDOM_PLACEMENTS):
        placements[f"random {seed}"] = random_place(task, seed)
    return placements


def study_task(task: PlacementTask, planner: Callable, model, judge: SimulatedBackend) -> dict:
    """One task: the heuristics' and the planner's costs under the judge, the model's accuracy
    over at least eight placements, and its confidence's misses (`gain_misses`) on the
    candidates the planner weighs and on those eight placements."""
    placements = study_placements(task, planner)
    true = {name: judge.measure(task, p) for name, p in placements.items()}
    predicted = {name: model.costnet.predict_ms(task, p) for name, p in placements.items()}
    errors = []
    for name in placements:
        devices, _ = predicted[name]
        for d, cost in enumerate(true[name].devices):
            real = cost.fwd_comp + cost.bwd_comp
            if real > 0:
                errors.append(abs(devices[d, 0] + devices[d, 2] - real) / real)
    costs = {name: cost.overall for name, cost in true.items()}
    best = min(costs[k] for k in HEURISTIC_KEYS)
    first = [predicted[name][1] for name in placements]
    return {
        "task": task.name,
        "costs": costs,
        "predicted": {name: overall for name, (_, overall) in predicted.items()},
        "best_heuristic": min(HEURISTIC_KEYS, key=costs.get),
        "ratio": costs["dreamshard"] / best,
        "device_mape": float(np.mean(errors)),
        "spearman": spearman(first, [costs[n] for n in placements]),
        "residuals": candidate_misses(task, model, judge),
        "placement_residuals": placement_misses(task, model, placements, costs, first),
    }


def candidate_misses(task: PlacementTask, model, judge: SimulatedBackend) -> list[float]:
    """`gain_misses` over every candidate the default planner weighs for `task` (seed 0, eight
    samples: the (task, candidate) pairs the confidence is about), the reference being the
    heuristic candidate the ensemble predicts cheapest. Empty without an ensemble."""
    if not model.ensemble:
        return []
    candidates = [placement for placement, _ in ranked_candidates(task, model)]
    first = predicted_overall(model, task, candidates)
    members = ensemble_scores(model, task, candidates, first)
    true = np.array([judge.measure(task, p).overall for p in candidates])
    heuristic = [p.candidate.startswith("heuristic ") for p in candidates]
    return gain_misses(members, true, heuristic)


def placement_misses(task, model, placements: dict, costs: dict, first: list[float]) -> list:
    """`gain_misses` over the study's placements (`study_placements`: the heuristics', the
    planner's and random ones), the reference being the heuristic the ensemble predicts
    cheapest; `first`: the model's own network's predicted overall of each. Empty without an
    ensemble."""
    if not model.ensemble:
        return []
    members = ensemble_scores(model, task, list(placements.values()), first)
    true = np.array([costs[name] for name in placements])
    return gain_misses(members, true, [name in HEURISTIC_KEYS for name in placements])


def study_tasks(tasks, planner: Callable, model, judge: SimulatedBackend, log=print):
    """`study_task` of each task, and the tasks left out because no whole-table placement of
    them exists (the heuristics prove it: there is nothing to compare), with the reason."""
    rows, skipped = [], []
    for task in tasks:
        try:
            row = study_task(task, planner, model, judge)
        except InfeasibleError as exc:
            skipped.append({"task": task.name, "reason": str(exc)})
            log(f"{task.name}: skipped ({exc})")
            continue
        rows.append(row)
        log(
            f"{row['task']}: dreamshard {row['ratio']:.3f}x {row['best_heuristic']}, "
            f"device MAPE {row['device_mape']:.1%}, Spearman {row['spearman']:.2f}"
        )
    return rows, skipped


def suite_residuals(model, judge: SimulatedBackend, log=print) -> list[float]:
    """`candidate_misses` on the held-out test tasks of the project's suites
    (`CALIBRATION_SUITES`, `SUITE_TASKS` each): tables of the data-set profile, the ones users
    place today. Their 90% quantile is what a confidence calibrated on them would be."""
    residuals = []
    for name in CALIBRATION_SUITES:
        for task in make_suite(parse_suite_name(name, 1, SUITE_TASKS)).test_tasks:
            residuals += candidate_misses(task, model, judge)
        log(f"{name}: gain residuals of {SUITE_TASKS} held-out tasks")
    return residuals


def run_study(model, seeds=range(12), log=print) -> dict:
    """Every task of every family: the rows, the tasks skipped (`study_tasks`), the summary
    the targets are judged on, and the calibration check (`calibration_check`)."""
    judge = SimulatedBackend()
    model = resolve_model(model)
    planner = named_planner("dreamshard", model=model)
    rows, skipped = study_tasks(ood_tasks(seeds=seeds), planner, model, judge, log)
    z90 = (model.metadata.get("confidence") or {}).get("z90")
    suites = suite_residuals(model, judge, log) if model.ensemble else []
    return {
        "rows": rows,
        "skipped": skipped,
        "summary": summarise(rows, z90),
        "calibration": calibration_check(rows, z90, suites),
    }


def summarise(rows: list[dict], z90: float | None) -> dict:
    """The targets' figures: the worst and the geometric mean of the ratios (with a bootstrap
    95% interval over tasks), the mean device MAPE and Spearman, overall and per family."""
    out = {}
    families = sorted({r["task"].split("/")[0] for r in rows})
    for name, subset in [("all", rows)] + [
        (f, [r for r in rows if r["task"].startswith(f + "/")]) for f in families
    ]:
        ratios = np.array([r["ratio"] for r in subset])
        low, high = bootstrap_interval(ratios)
        out[name] = {
            "tasks": len(subset),
            "geomean": float(geometric_mean(ratios)),
            "interval": [low, high],
            "worst": float(ratios.max()),
            "above_target": int((ratios > TARGET_WORST).sum()),
            "device_mape": float(np.mean([r["device_mape"] for r in subset])),
            "spearman": float(np.nanmean([r["spearman"] for r in subset])),
            "coverage": coverage([r["residuals"] for r in subset], z90),
            "placement_coverage": coverage([r["placement_residuals"] for r in subset], z90),
        }
    return out


def coverage(per_task: list[list[float]], z90: float | None) -> dict | None:
    """How many (task, pair) misses a nominal 90% interval (z90 spreads) covers: the share,
    the pairs, and a 95% interval of the share with tasks resampled (a task's pairs move
    together), or None without pairs or calibration."""
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


def calibration_check(rows: list[dict], z90: float | None, suites: list[float]) -> dict:
    """The coverage on these tasks at the model's z90 and at a z90 calibrated on the suites'
    residuals instead, and these tasks' own 90% quantile (what would have covered 90%)."""
    ood = [r["residuals"] for r in rows]
    if not any(ood) or not suites:
        return {}
    suites_z90 = float(np.quantile(suites, 0.9))
    return {
        "model_z90": z90,
        "coverage": coverage(ood, z90),
        "suites_z90": suites_z90,
        "suite_pairs": len(suites),
        "coverage_at_suites_z90": coverage(ood, suites_z90),
        "own_z90": float(np.quantile([x for misses in ood for x in misses], 0.9)),
    }
