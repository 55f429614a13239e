"""The study contract: what a study declares, and the figures every report takes from its rows.

A study is one `Study` object in its own module under `benchmarks/`, the way a planner is one
`BasePlanner`: it declares its tasks (fixed by its options before anything runs), its arms (the
planners it compares, each with its own time limit), its judges (exact, one round; or measured,
in interleaved rounds), its figures (computed from the rows alone) and its targets. The runner
(`benchmarks/runner.py`) owns everything else: planning within each arm's limit and recording
what it declined, judging, the interleaved rounds, resuming, the report, the rows file and the
MLflow run.

A row is one task: for each arm its plan's seconds, what it declined, and each judge's costs
(one per round; NaN where the judge declined, with the reason), plus whatever the study's
`task_extra` adds. Figures read rows only, so the importer and a rerender need nothing else.
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from dreamshard.evaluation.rounds import bootstrap_interval, bootstrap_paired
from dreamshard.placement.tasks import Placement, PlacementTask


@dataclass(frozen=True)
class Arm:
    """One planner the study compares: `plan(task)` within `seconds` (None: no limit of the
    runner's own); a `DreamshardError` or `InfeasibleError`, or running past the limit, is
    recorded as the arm declining the task. `plan` may return `(placement, figures)`: the
    figures (a dict: its own timing, its peak memory, the candidate it measured) join the
    plan's record in the row."""

    name: str
    plan: Callable[[PlacementTask], Placement | tuple[Placement, dict]]
    seconds: float | None = None


@dataclass(frozen=True)
class Judge:
    """What a plan costs, in ms: `cost(task, placement)`. `rounds` 1 is an exact judge (judged
    once, as soon as the task is planned); more is a measured judge (every plan of every task
    measured once a round, in a fresh random order, the rounds after all planning). A
    `DreamshardError` from `cost` is the judge declining that plan. One judge under many
    settings (hardware corners) is one `Judge` per setting.

    A measured judge may instead measure all of a task's plans at once a round, `per_task(task,
    {arm: placement}) -> {arm: {name: ms}}` (one launch of a distributed job, its plans taking
    turns inside it), tasks in a fresh random order each round; one measurement may fill
    several figures, the names in `fills` (default the judge's own)."""

    name: str
    cost: Callable[[PlacementTask, Placement], float] | None = None
    rounds: int = 1
    per_task: Callable[[PlacementTask, dict[str, Placement]], dict[str, dict]] | None = None
    fills: tuple[str, ...] = ()

    def names(self) -> tuple[str, ...]:
        return self.fills or (self.name,)


@dataclass(frozen=True)
class Figure:
    """A number a report gives: its value, its 95% interval (the value twice where it has
    none) and how many tasks it covers."""

    value: float
    low: float
    high: float
    tasks: int

    def cell(self) -> str:
        if np.isnan(self.value):
            return "-"
        if self.low == self.high:
            return f"{self.value:.3f} ({self.tasks} tasks)"
        return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}] ({self.tasks} tasks)"


NO_FIGURE = Figure(float("nan"), float("nan"), float("nan"), 0)  # the rows give none


@dataclass(frozen=True)
class Target:
    """A figure's target: met when its interval's upper end is at most `at_most` and its lower
    end at least `at_least` (either may be None)."""

    figure: str
    at_most: float | None = None
    at_least: float | None = None

    def met(self, figure: Figure) -> bool:
        if figure is None or np.isnan(figure.value):
            return False
        low_ok = self.at_least is None or figure.low >= self.at_least
        return low_ok and (self.at_most is None or figure.high <= self.at_most)

    def wanted(self) -> str:
        bounds = []
        if self.at_least is not None:
            bounds.append(f">= {self.at_least:g}")
        if self.at_most is not None:
            bounds.append(f"<= {self.at_most:g}")
        return " and ".join(bounds)


@dataclass
class Study:
    """A study's declaration; subclasses fill in the methods. `options` adds the study's own
    command-line options; `quick` (2 tasks, 2 rounds) is the runner's."""

    name: str
    title: str
    targets: tuple[Target, ...] = ()
    about: str = ""  # how the tasks, arms and judges were chosen, for the report's head
    models: dict = field(default_factory=dict)  # filled by `prepare`: name -> provenance

    def options(self, parser: argparse.ArgumentParser) -> None:
        """The study's own options (its tasks, its model, its limits)."""

    def prepare(self, args: argparse.Namespace) -> None:
        """Load (or make) what the arms need; record each model's provenance in `models`."""

    def tasks(self, args: argparse.Namespace) -> list[PlacementTask]:
        raise NotImplementedError

    def arms(self, args: argparse.Namespace) -> list[Arm]:
        raise NotImplementedError

    def judges(self, args: argparse.Namespace) -> list[Judge]:
        raise NotImplementedError

    def task_extra(self, task: PlacementTask, plans: dict[str, Placement]) -> dict:
        """Figures of one task beyond its plans' costs (a model's accuracy, say)."""
        return {}

    def figures(self, rows: list[dict]) -> dict[str, Figure]:
        raise NotImplementedError

    def details(self, rows: list[dict], figures: dict[str, Figure]) -> str:
        """The report's text after the targets (tables of its own); markdown."""
        return ""


# --- figures from rows ---------------------------------------------------------------------


def costs(rows: Sequence[dict], arm: str, judge: str) -> np.ndarray:
    """[round, task] costs of `arm` under `judge` (NaN where it declined or was not judged)."""
    per_task = []
    for row in rows:
        plan = row["plans"].get(arm) or {}
        per_task.append(plan.get("costs", {}).get(judge))
    width = max((len(c) for c in per_task if c), default=1)
    out = np.full((width, len(per_task)), np.nan)
    for t, found in enumerate(per_task):
        if found:
            out[: len(found), t] = [np.nan if c is None else c for c in found]
    return out


def best_of(rows: Sequence[dict], arms: Sequence[str], judge: str) -> np.ndarray:
    """[round, task]: per task, the cost of the arm cheapest on average over the rounds (the
    per-task best of `arms`, e.g. the best heuristic), NaN where none was judged."""
    stack = np.stack([costs(rows, arm, judge) for arm in arms])  # [arm, round, task]
    with warnings.catch_warnings():  # an arm declined: all NaN, and no mean
        warnings.simplefilter("ignore", RuntimeWarning)
        means = np.where(np.isnan(stack).all(axis=1), np.inf, np.nanmean(stack, axis=1))
    best = means.argmin(axis=0)
    out = stack[best, :, np.arange(stack.shape[2])].T
    out[:, np.isinf(means.min(axis=0))] = np.nan
    return out


def paired_logs(rows: Sequence[dict], arm: str, versus: str | Sequence[str], judge: str):
    """[round, task] log ratios of `arm` over `versus` (an arm, or the per-task best of
    several) under `judge`; NaN where either was declined or not judged."""
    bottom = costs(rows, versus, judge) if isinstance(versus, str) else best_of(rows, versus, judge)
    return np.log(costs(rows, arm, judge) / bottom)


def ratio_figure(rows: Sequence[dict], arm: str, versus: str | Sequence[str], judge: str) -> Figure:
    """`arm` over `versus` (an arm, or the per-task best of several) under `judge`: the
    geometric mean over tasks of the paired ratios (rounds averaged in logs), with a bootstrap
    95% interval over tasks (and, with several rounds, over each task's rounds). Tasks where
    either was declined or not judged are left out (the figure says how many it covers)."""
    logs = paired_logs(rows, arm, versus, judge)
    if logs.shape[0] == 1:
        ratios = np.exp(logs[0][~np.isnan(logs[0])])
        if not ratios.size:
            return NO_FIGURE
        low, high = bootstrap_interval(ratios)
        return Figure(float(np.exp(np.log(ratios).mean())), low, high, int(ratios.size))
    value, low, high, tasks = bootstrap_paired(logs)
    return Figure(value, low, high, tasks)


def worst_figure(rows: Sequence[dict], arm: str, versus, judge: str) -> Figure:
    """The largest per-task ratio of `arm` over `versus` (rounds averaged in logs)."""
    with warnings.catch_warnings():  # a task either declined: all NaN, and no mean
        warnings.simplefilter("ignore", RuntimeWarning)
        per_task = np.exp(np.nanmean(paired_logs(rows, arm, versus, judge), axis=0))
    per_task = per_task[~np.isnan(per_task)]
    if not per_task.size:
        return NO_FIGURE
    worst = float(per_task.max())
    return Figure(worst, worst, worst, int(per_task.size))


def mean_figure(values: Sequence[float]) -> Figure:
    """The mean of per-task values (NaNs left out), without an interval."""
    found = np.asarray([v for v in values if v is not None and not np.isnan(v)], dtype=float)
    if not found.size:
        return NO_FIGURE
    mean = float(found.mean())
    return Figure(mean, mean, mean, int(found.size))
