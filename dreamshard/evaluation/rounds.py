"""Comparing placements fairly on a noisy machine: interleaved rounds and paired ratios.

Two measurements of the same placement taken minutes apart can differ by 10-15% on a shared
CPU (docs/measurement.md), so costs compare only within one run. Here every round
measures every placement once, in a fresh random order, and a placement is compared with a
reference through the ratio of their costs *within each round*; drift common to a round
cancels in the ratio. Also the statistics every report takes over such rounds: geometric
means, coefficients of variation, bootstrap intervals over tasks (and rounds), rank agreement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from dreamshard.costs.types import CostBackend, PlacementCost
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.progress import Progress


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


def measure_costs(
    backend: CostBackend,
    items: Sequence[tuple[PlacementTask, Placement]],
    rounds: int,
    seed: int = 0,
    on_round: Callable[[int], None] | None = None,
) -> list[list[PlacementCost]]:
    """Every item's full cost in every round, [round][item], as `measure_interleaved` takes
    them (with a progress line); `on_round(r)` runs after round r."""
    found: list[list] = [[None] * len(items) for _ in range(rounds)]
    progress = Progress(rounds * len(items), f"measuring {len(items)} placements")

    def keep(r: int, i: int, cost: PlacementCost) -> None:
        found[r][i] = cost
        progress.step(f"round {r + 1}: {cost.overall:.1f} ms")
        if on_round is not None and all(c is not None for c in found[r]):
            on_round(r)

    measure_interleaved(backend, items, rounds, seed, keep)
    progress.close()
    return found


def paired_ratios(costs: np.ndarray, reference: np.ndarray | int) -> np.ndarray:
    """Per-round ratio of each item's cost to a reference (an item index or a cost per round)."""
    ref = costs[:, reference] if isinstance(reference, (int, np.integer)) else reference
    return costs / np.asarray(ref)[:, None]


def geometric_mean(values: np.ndarray, axis: int = 0) -> np.ndarray:
    return np.exp(np.mean(np.log(values), axis=axis))


def cv(values: np.ndarray, axis: int = 0) -> np.ndarray:
    """Coefficient of variation along an axis."""
    return np.std(values, axis=axis) / np.mean(values, axis=axis)


def median_cv(costs: np.ndarray) -> float:
    """[round, item] costs: the median over items of their cost's CV over the rounds (NaN with
    one round): how much a placement's measurement varies in this run."""
    if costs.shape[0] < 2:
        return float("nan")
    return float(np.median(cv(costs)))


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Rank correlation of two costings of the same placements; NaN when it says nothing
    (fewer than 3 placements, or either costing constant)."""
    from scipy.stats import spearmanr  # only here: scipy is slow to import

    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(spearmanr(x, y).statistic)


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


def bootstrap_share(
    hits: np.ndarray, counts: np.ndarray, level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """A bootstrap interval of a share pooled over groups (`hits` of `counts` in each group;
    groups resampled with replacement, so pairs of one group move together)."""
    hits, counts = np.asarray(hits, dtype=np.float64), np.asarray(counts, dtype=np.float64)
    if hits.size < 2:
        value = float(hits.sum() / counts.sum()) if counts.sum() else float("nan")
        return value, value
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, hits.size, size=(resamples, hits.size))
    shares = hits[picks].sum(axis=1) / counts[picks].sum(axis=1)
    tail = (1 - level) / 2
    return float(np.quantile(shares, tail)), float(np.quantile(shares, 1 - tail))


def bootstrap_paired(
    logs: np.ndarray, level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float, int]:
    """The paired ratio of [round, task] log ratios (geometric mean over rounds, then over
    tasks), its bootstrap interval and the task count. Each resample draws tasks with
    replacement and, for each drawn task, its rounds with replacement: the interval holds both
    which tasks were drawn and the noise of the rounds. Tasks with a NaN (declined) are left out.
    """
    logs = logs[:, ~np.isnan(logs).any(axis=0)]
    rounds, tasks = logs.shape
    if not logs.size:
        return float("nan"), float("nan"), float("nan"), 0
    rng = np.random.default_rng(seed)
    picked_tasks = rng.integers(0, tasks, size=(resamples, tasks, 1))
    picked_rounds = rng.integers(0, rounds, size=(resamples, tasks, rounds))
    means = logs.T[picked_tasks, picked_rounds].mean(axis=(1, 2))
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(np.exp(logs.mean())), float(np.exp(low)), float(np.exp(high)), tasks
