"""Measured refinement: a planner's best few candidates timed on a real backend before a long
training job; the planner's own pick stays unless another is cheaper beyond the noise.

The cost network's error on real kernels (10-20%) is larger than the differences between the
placements it chooses among, so a minute of measurement is cheap insurance. Every round
measures every candidate once, in a fresh order, and each candidate's cost is divided by the
pick's cost in the same round (paired, so drift common to a round cancels). The rule (`choose`):
a candidate replaces the pick only when the upper end of the 95% bootstrap interval of its
geometric-mean ratio to the pick (rounds resampled) is below 1. With 3 rounds that means cheaper
in every round; with more, cheaper beyond the spread of the rounds. Of those, the lowest ratio
wins. On the exact `simulated` backend this returns the cheapest candidate.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from dreamshard.costs.backends import describe_costs
from dreamshard.costs.types import CostBackend
from dreamshard.errors import DreamshardError, InfeasibleError
from dreamshard.evaluation.rounds import (
    bootstrap_interval,
    geometric_mean,
    measure_interleaved,
    paired_ratios,
)
from dreamshard.placement.constraints import sharding_problem
from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place
from dreamshard.placement.plan_file import MeasuredCandidateRecord, RefinementRecord
from dreamshard.placement.planner import PlanOptions, SeededPlanner
from dreamshard.placement.registry import method_names, registration
from dreamshard.placement.tasks import Placement, PlacementTask, placement_problem
from dreamshard.progress import Progress
from dreamshard.report import format_table

REFINE_SECONDS = 60.0  # the default time budget (`dreamshard place --refine-seconds`)
TOP = 4  # the cost network's best candidates that are measured; the heuristics join them
MIN_ROUNDS = 3  # fewer could not tell a real difference from a lucky round
MAX_ROUNDS = 100  # an exact backend learns nothing from more
RULE = (
    "a candidate replaces the planner's pick only when the upper end of the 95% bootstrap "
    "interval of its geometric-mean paired ratio to the pick (rounds resampled) is below 1; "
    "of those, the lowest ratio wins"
)


@dataclass(frozen=True)
class MeasuredCandidate:
    """One candidate and its overall cost in each round, compared with the pick's."""

    name: str  # "policy greedy", "heuristic lookup", or the method's name
    placement: Placement
    predicted_ms: float | None  # the cost network's prediction (learned methods only)
    costs_ms: tuple[float, ...]  # per round
    ratio: float  # geometric mean over rounds of cost / the pick's cost in the same round
    interval: tuple[float, float]  # 95% bootstrap interval of `ratio`

    @property
    def median_ms(self) -> float:
        return float(np.median(self.costs_ms))


@dataclass(frozen=True)
class Refinement:
    """What was measured and which candidate won; `placement` is the answer."""

    placement: Placement
    candidates: list[MeasuredCandidate]  # [0] is the planner's own pick
    winner: int
    reason: str
    backend: str
    costs_made: str
    seconds: float

    @property
    def rounds(self) -> int:
        return len(self.candidates[0].costs_ms)

    def record(self) -> RefinementRecord:
        """What the plan file keeps of it."""
        return RefinementRecord(
            backend=self.backend,
            costs_made=self.costs_made,
            rounds=self.rounds,
            seconds=round(self.seconds, 3),
            rule=RULE,
            winner=self.candidates[self.winner].name,
            reason=self.reason,
            candidates=[
                MeasuredCandidateRecord(
                    name=c.name,
                    method=c.placement.method,
                    predicted_ms=c.predicted_ms,
                    median_ms=c.median_ms,
                    ratio_to_pick=c.ratio,
                    interval=list(c.interval),
                    costs_ms=list(c.costs_ms),
                )
                for c in self.candidates
            ],
        )

    def summary(self) -> str:
        """The candidates as a table, and the verdict, for the terminal."""
        header = ["candidate", "predicted ms", "median ms", "vs pick", "95% interval", ""]
        rows = [
            [
                c.name,
                "-" if c.predicted_ms is None else c.predicted_ms,
                c.median_ms,
                f"{c.ratio:.3f}x",
                f"{c.interval[0]:.3f}-{c.interval[1]:.3f}",
                "pick" if i == 0 else ("won" if i == self.winner else ""),
            ]
            for i, c in enumerate(self.candidates)
        ]
        return "\n".join(
            [
                f"measured {len(rows)} candidates in {self.rounds} interleaved rounds "
                f"({self.seconds:.1f} s); costs: {self.costs_made}",
                format_table(header, rows),
                f"refined: {self.reason}",
            ]
        )


def candidates_to_measure(
    task: PlacementTask,
    method: str,
    model=None,
    samples: int = 8,
    seed: int = 0,
    top: int = TOP,
    split: str = "auto",
    topology: str | None = None,
    reference: Placement | None = None,
) -> list[tuple[str, Placement, float | None]]:
    """(name, placement, predicted ms): the planner's pick first (`reference` before it where
    given: TorchRec's plan for `--refine dmp`), then its next `top - 1` candidates where it has
    more (`dreamshard`: by the cost network, on the shards it splits the task into under
    `split="auto"`), then each heuristic's whole-table placement; distinct only. Predicted by
    the planner's own cost model, where it has one, on `topology` (None: the planner's own)."""
    planner = registration(method).load()
    options = PlanOptions(seed, planner.load_model(model), samples, split, topology=topology)
    ranked = planner.candidates(task, options, top)
    heuristics = []
    for key in HEURISTIC_KEYS:
        try:
            heuristics.append(replace(greedy_place(task, key), candidate=f"heuristic {key}"))
        except InfeasibleError:  # its packing search gave up; the others still compete
            continue
    distinct: dict[tuple, Placement] = {}
    first = [reference] if reference is not None else []
    for placement in first + ranked + heuristics:  # the first of equal ones, legal ones only
        if placement_problem(task, placement) or sharding_problem(
            task.constraints, placement.splits
        ):
            continue  # a whole-table heuristic where --sharding cuts a table, say
        distinct.setdefault((placement.splits, placement.devices), placement)
    return [
        (p.candidate or p.method, p, planner.predict(task, p, options)) for p in distinct.values()
    ]


def measure_rounds(
    backend: CostBackend,
    task: PlacementTask,
    placements: Sequence[Placement],
    seconds: float,
    seed: int = 0,
    min_rounds: int = MIN_ROUNDS,
    max_rounds: int = MAX_ROUNDS,
) -> np.ndarray:
    """[rounds, candidates] overall ms: rounds go on while another fits in `seconds`, at least
    `min_rounds`, at most `max_rounds`; a progress line on stderr."""
    items = [(task, p) for p in placements]
    names = [p.candidate or p.method for p in placements]
    progress = Progress(min_rounds * len(items), f"refining on {backend.name}")
    rows: list[np.ndarray] = []
    start = time.monotonic()

    def show(_round: int, item: int, cost) -> None:
        progress.step(f"round {len(rows) + 1}, {names[item]}: {cost.overall:.2f} ms")

    while len(rows) < max_rounds:
        elapsed = time.monotonic() - start
        if len(rows) >= min_rounds and elapsed * (len(rows) + 1) / len(rows) > seconds:
            break  # the next round would overrun the budget
        if len(rows) >= min_rounds and np.ptp(rows, axis=0).max() == 0:
            break  # every cost repeated exactly (the simulated backend): more rounds add nothing
        rows.append(measure_interleaved(backend, items, 1, seed + len(rows), show)[0])
        per_round = (time.monotonic() - start) / len(rows)
        planned = min(max_rounds, max(min_rounds, int(seconds // max(per_round, 1e-9))))
        progress.total = max(planned, len(rows)) * len(items)
    progress.close()
    return np.stack(rows)


@dataclass(frozen=True)
class Choice:
    """The verdict on [rounds, candidates] costs whose column 0 is the planner's pick."""

    winner: int
    reason: str
    ratios: list[float]  # per candidate: geometric mean of its paired ratio to the pick
    intervals: list[tuple[float, float]]  # per candidate: 95% bootstrap interval of it


def choose(costs: np.ndarray, names: Sequence[str], seed: int = 0) -> Choice:
    """The winner by the rule in this module's docstring, and why, in words."""
    paired = paired_ratios(costs, 0)
    ratios = [float(r) for r in geometric_mean(paired, axis=0)]
    intervals = [bootstrap_interval(paired[:, j], seed=seed) for j in range(len(names))]
    rounds = f"over {costs.shape[0]} rounds"
    beyond = [j for j in range(1, len(names)) if intervals[j][1] < 1.0]
    if beyond:
        j = min(beyond, key=ratios.__getitem__)
        lo, hi = intervals[j]
        reason = (
            f"{names[j]} measured {ratios[j]:.3f}x the planner's pick ({names[0]}), 95% "
            f"interval {lo:.3f}-{hi:.3f} {rounds}: cheaper beyond the noise"
        )
        return Choice(j, reason, ratios, intervals)
    if len(names) == 1:
        return Choice(0, "kept the planner's pick: no other candidate", ratios, intervals)
    j = min(range(1, len(names)), key=ratios.__getitem__)
    lo, hi = intervals[j]
    reason = (
        f"kept the planner's pick ({names[0]}): no candidate was cheaper beyond the noise "
        f"(closest: {names[j]} at {ratios[j]:.3f}x, 95% interval {lo:.3f}-{hi:.3f} {rounds})"
    )
    return Choice(0, reason, ratios, intervals)


def refine(
    task: PlacementTask,
    method: str,
    backend: CostBackend,
    seconds: float = REFINE_SECONDS,
    model=None,
    samples: int = 8,
    seed: int = 0,
    top: int = TOP,
    min_rounds: int = MIN_ROUNDS,
    max_rounds: int = MAX_ROUNDS,
    split: str = "auto",
    topology: str | None = None,
    reference: Placement | None = None,
) -> Refinement:
    """`method`'s placement of `task` refined by measurement on `backend` for about `seconds`.

    The answer is one of the measured candidates, so it is legal. Its `method` says it was
    refined (`dreamshard_refined`), except that a heuristic's placement or the `reference`
    (measured first, the one the others must beat beyond the noise) keeps its own name, so no
    report credits the planner with it.
    """
    if min_rounds < 2 or max_rounds < min_rounds:
        raise DreamshardError(f"refinement needs 2 <= min_rounds <= max_rounds, not {min_rounds}")
    began = time.monotonic()
    found = candidates_to_measure(
        task, method, model, samples, seed, top, split, topology, reference
    )
    names = [name for name, _, _ in found]
    costs = measure_rounds(
        backend, task, [p for _, p, _ in found], seconds, seed, min_rounds, max_rounds
    )
    choice = choose(costs, names, seed)
    candidates = [
        MeasuredCandidate(
            name,
            placement,
            predicted,
            tuple(costs[:, j].tolist()),
            choice.ratios[j],
            choice.intervals[j],
        )
        for j, (name, placement, predicted) in enumerate(found)
    ]
    winner = choice.winner
    chosen = candidates[winner].placement
    baseline = chosen.method in method_names("baseline", "heuristic")  # keeps its own name
    baseline = baseline or (reference is not None and chosen is reference)
    refined = chosen.method if baseline else f"{chosen.method}_refined"
    answer = Placement(
        chosen.devices,
        refined,
        f"{names[winner]}; measured on {backend.name}, {len(costs)} rounds",
        chosen.splits,
    )
    return Refinement(
        answer,
        candidates,
        winner,
        choice.reason,
        backend.name,
        describe_costs(backend.config()),
        time.monotonic() - began,
    )


def refined_planner(
    method: str,
    backend: CostBackend,
    seconds: float,
    model=None,
    samples: int = 8,
    split: str = "none",
) -> SeededPlanner:
    """`refine` as a planner `(task, seed) -> Placement`, for `evaluate` (the model loaded
    once, not once per task)."""
    model = registration(method).load().load_model(model)
    return lambda task, seed: (
        refine(task, method, backend, seconds, model, samples, seed, split=split).placement
    )
