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
from dreamshard.evaluation.ood_families import ood_tasks
from dreamshard.evaluation.rounds import bootstrap_interval, geometric_mean, spearman
from dreamshard.learn.model_file import resolve_model
from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place, random_place
from dreamshard.placement.registry import named_planner
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.planners.dreamshard_planner import ensemble_scores

RANDOM_PLACEMENTS = 4
TARGET_WORST = 1.01  # the default planner never above this x the per-task best heuristic
TARGET_GEOMEAN = 0.93  # and at most this as a geometric mean


def study_task(task: PlacementTask, planner: Callable, model, judge: SimulatedBackend) -> dict:
    """One task: the heuristics' and the planner's costs under the judge, and the model's
    accuracy over at least eight placements."""
    placements: dict[str, Placement] = {k: greedy_place(task, k) for k in HEURISTIC_KEYS}
    placements["dreamshard"] = planner(task, 0)
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
    costs = {name: cost.overall for name, cost in true.items()}
    best = min(costs[k] for k in HEURISTIC_KEYS)
    first = [predicted[name][1] for name in placements]
    covered = gain_coverage(task, model, placements, costs, first)
    return {
        "task": task.name,
        "costs": costs,
        "predicted": {name: overall for name, (_, overall) in predicted.items()},
        "best_heuristic": min(HEURISTIC_KEYS, key=costs.get),
        "ratio": costs["dreamshard"] / best,
        "device_mape": float(np.mean(errors)),
        "spearman": spearman(first, [costs[n] for n in placements]),
        "covered": covered,
    }


def gain_coverage(task, model, placements: dict, costs: dict, first: list[float]) -> list[bool]:
    """Whether each placement's true gain over the heuristic predicted cheapest lies inside
    the ensemble's 90% interval of its predicted gain (mean +- z90 spreads); empty for a
    model without an ensemble or calibration. `first`: the model's own network's predicted
    overall of each placement."""
    z90 = (model.metadata.get("confidence") or {}).get("z90")
    if not model.ensemble or z90 is None:
        return []
    names = list(placements)
    members = ensemble_scores(model, task, list(placements.values()), first)
    ref = min((names.index(k) for k in HEURISTIC_KEYS), key=lambda i: members[:, i].mean())
    covered = []
    for i, name in enumerate(names):
        if i == ref:
            continue
        gains = 1 - members[:, i] / members[:, ref]
        true = 1 - costs[name] / costs[names[ref]]
        covered.append(bool(abs(true - gains.mean()) <= z90 * gains.std(ddof=1)))
    return covered


def run_study(model, seeds=range(12), log=print) -> dict:
    """Every task of every family: the rows, and the summary the targets are judged on."""
    judge = SimulatedBackend()
    model = resolve_model(model)
    planner = named_planner("dreamshard", model=model)
    rows = []
    for task in ood_tasks(seeds=seeds):
        rows.append(study_task(task, planner, model, judge))
        row = rows[-1]
        log(
            f"{row['task']}: dreamshard {row['ratio']:.3f}x {row['best_heuristic']}, "
            f"device MAPE {row['device_mape']:.1%}, Spearman {row['spearman']:.2f}"
        )
    return {"rows": rows, "summary": summarise(rows)}


def summarise(rows: list[dict]) -> dict:
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
            "coverage": coverage([c for r in subset for c in r.get("covered", [])]),
        }
    return out


def coverage(covered: list[bool]) -> list[float] | None:
    """[share covered, pairs], or None without pairs."""
    return [float(np.mean(covered)), len(covered)] if covered else None
