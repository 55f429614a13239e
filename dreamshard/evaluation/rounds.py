"""Comparing placements fairly on a noisy machine: interleaved rounds and paired ratios.

Two measurements of the same placement taken minutes apart can differ by 10-15% on a shared
CPU (docs/measurement.md), so costs compare only within one run. Here every round
measures every placement once, in a fresh random order, and a placement is compared with a
reference through the ratio of their costs *within each round*; drift common to a round
cancels in the ratio.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from dreamshard.costs.types import CostBackend, PlacementCost
from dreamshard.placement.tasks import Placement, PlacementTask


def measure_interleaved(
    backend: CostBackend,
    items: Sequence[tuple[PlacementTask, Placement]],
    rounds: int,
    seed: int = 0,
    on_measure: Callable[[int, int, PlacementCost], None] | None = None,
) -> np.ndarray:
    """Overall costs, [rounds, items]: each round measures every item once, shuffled.

    `on_measure(round, item, cost)` sees every full breakdown as it comes.
    """
    rng = np.random.default_rng(seed)
    costs = np.zeros((rounds, len(items)))
    for r in range(rounds):
        for i in rng.permutation(len(items)):
            task, placement = items[i]
            cost = backend.measure(task, placement)
            costs[r, i] = cost.overall
            if on_measure:
                on_measure(r, int(i), cost)
    return costs


def paired_ratios(costs: np.ndarray, reference: np.ndarray | int) -> np.ndarray:
    """Per-round ratio of each item's cost to a reference (an item index or a cost per round)."""
    ref = costs[:, reference] if isinstance(reference, (int, np.integer)) else reference
    return costs / np.asarray(ref)[:, None]


def geometric_mean(values: np.ndarray, axis: int = 0) -> np.ndarray:
    return np.exp(np.mean(np.log(values), axis=axis))


def cv(values: np.ndarray, axis: int = 0) -> np.ndarray:
    """Coefficient of variation along an axis."""
    return np.std(values, axis=axis) / np.mean(values, axis=axis)


def bootstrap_interval(
    ratios: np.ndarray, level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """A bootstrap interval of the geometric mean of per-task ratios (tasks resampled)."""
    ratios = np.asarray(ratios, dtype=np.float64)
    ratios = ratios[~np.isnan(ratios)]
    if ratios.size < 2:
        value = float(geometric_mean(ratios)) if ratios.size else float("nan")
        return value, value
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, ratios.size, size=(resamples, ratios.size))
    means = np.exp(np.log(ratios)[picks].mean(axis=1))
    tail = (1 - level) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))
