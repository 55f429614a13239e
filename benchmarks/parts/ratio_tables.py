"""The figures and cells that reports print from paired ratios: a geometric mean with its range
or bootstrap interval, over the tasks a planner placed ([k/n] where it declined some).

A ratio here is already paired (`Evaluation.ratios`, `rounds.paired_ratios`); these only
summarise and format it, so every report states the same figure the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dreamshard.evaluation.results import Evaluation
from dreamshard.evaluation.rounds import bootstrap_interval, geometric_mean


def placed(ratios: Sequence[float] | np.ndarray) -> np.ndarray:
    """The ratios that are there (NaN or None: a declined plan)."""
    values = np.asarray([np.nan if x is None else x for x in ratios], dtype=float)
    return values[~np.isnan(values)]


def placed_mean(ratios: Sequence[float] | np.ndarray) -> float | None:
    """The geometric mean of the ratios that are there; None when there are none."""
    values = placed(ratios)
    return float(geometric_mean(values)) if values.size else None


def ratio_range(ratios: np.ndarray) -> dict:
    """A paired ratio's geometric mean (over rounds, or tasks) and its range."""
    return {
        "ratio": float(geometric_mean(ratios)),
        "min": float(np.min(ratios)),
        "max": float(np.max(ratios)),
    }


def summarise(ratios: np.ndarray) -> dict | None:
    """Geometric mean, min-max and count over the tasks a planner placed; None if none."""
    values = placed(ratios)
    if not values.size:
        return None
    found = ratio_range(values)
    return {"mean": found["ratio"], "min": found["min"], "max": found["max"], "tasks": values.size}


def range_cell(summary: dict | None, total: int) -> str:
    """`summarise`'s figures: "0.962 (0.91-1.02)", with " [k/n]" when placed on k of n tasks."""
    if summary is None:
        return "-"
    text = f"{summary['mean']:.3f} ({summary['min']:.2f}-{summary['max']:.2f})"
    return text + placed_note(summary["tasks"], total)


def interval_cell(ratios: Sequence[float] | np.ndarray) -> str:
    """The geometric mean over tasks and its bootstrap 95% interval over tasks, as
    "0.962 [0.930, 0.995]" (over the tasks placed; "-" when none)."""
    values = placed(ratios)
    if not values.size:
        return "-"
    low, high = bootstrap_interval(values)
    return f"{geometric_mean(values):.3f} [{low:.3f}, {high:.3f}]"


def number(value: float | None, digits: int = 3) -> str:
    """A figure to `digits` places, or "-" where there is none."""
    return "-" if value is None else f"{value:.{digits}f}"


def placed_note(k: int, n: int) -> str:
    """What follows a figure over the k of n tasks a planner placed: " [k/n]"; nothing when all."""
    return "" if k == n else f" [{k}/{n}]"


def reference_rows(
    evaluation: Evaluation, references: Sequence[str], planners: Sequence[str], cell=interval_cell
) -> list[list[str]]:
    """Per planner, its name and one cell per reference (one of `results.REFERENCES` or a
    planner's name) of its ratios over the tasks."""
    ratios = [evaluation.ratios(reference) for reference in references]
    return [
        [name, *(cell(r[:, evaluation.planners.index(name)]) for r in ratios)] for name in planners
    ]


def paired_change(values: Sequence[float], base: Sequence[float], ratio: bool) -> dict:
    """Figures over repeats (seeds) and their change against a base paired by repeat: the
    geometric mean of the ratios (`ratio`), else the mean difference, with its range."""
    values, base = np.asarray(values, dtype=float), np.asarray(base, dtype=float)
    change = values / base if ratio else values - base
    return {
        "mean": float(values.mean()),
        "min": float(values.min()),
        "max": float(values.max()),
        "change": float(geometric_mean(change)) if ratio else float(change.mean()),
        "change_min": float(change.min()),
        "change_max": float(change.max()),
    }
