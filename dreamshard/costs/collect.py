"""Collecting measurements: placements of a suite's training tasks, measured and appended.

The list of placements is a pure function of (suite, count, mix), so a re-run after a crash
walks the same list and skips every one whose measurement is already stored.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from dreamshard.costs.dataset import CostDataset, measurement_key
from dreamshard.costs.types import CostBackend, PlacementCost
from dreamshard.errors import DreamshardError, InfeasibleError
from dreamshard.placement.heuristics import HEURISTIC_KEYS, PLANNERS
from dreamshard.placement.suites import Suite
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.progress import Progress

MIXES = {
    "random": ("random",),
    "heuristic": tuple(HEURISTIC_KEYS),
    "mixed": ("random", *HEURISTIC_KEYS),
}


@dataclass(frozen=True)
class Job:
    task: PlacementTask
    placement: Placement
    round: int = 0


def collection_jobs(suite: Suite, count: int, mix: str = "mixed") -> Iterator[Job]:
    """`count` placements: task i % T, the mix's planners cycling across tasks, random seeds i.

    Placement i goes to task i % T with planner (i + i // T) % M: the first T placements
    already cycle through every planner of the mix, and each later pass over the tasks shifts
    the cycle by one, so every task meets every planner in turn.
    """
    if mix not in MIXES:
        raise DreamshardError(f"unknown mix {mix!r}; choose one of {', '.join(MIXES)}")
    methods = MIXES[mix]
    tasks = suite.train_tasks
    for i in range(count):
        task = tasks[i % len(tasks)]
        method = methods[(i + i // len(tasks)) % len(methods)]
        try:
            yield Job(task, PLANNERS[method](task, i))
        except InfeasibleError:
            continue


@dataclass
class CollectSummary:
    measured: int = 0
    skipped: int = 0
    errors: int = 0


def measure_and_store(
    job: Job, backend: CostBackend, dataset: CostDataset, suite_name: str = ""
) -> tuple[PlacementCost, bool]:
    """The job's cost, from the dataset when stored, else measured and appended.

    Returns (cost, measured now). A failed measurement raises and stores nothing, so a caller
    that retries (a Prefect task) gets a clean second try.
    """
    config = backend.config()
    key = measurement_key(job.task, job.placement, config, job.round)
    stored = dataset.stored_cost(key)
    if stored is not None:
        return stored, False
    cost = backend.measure(job.task, job.placement)
    dataset.append(key, job.task, job.placement, cost, config, suite_name, job.round)
    return cost, True


def collect(
    jobs: list[Job], backend: CostBackend, dataset: CostDataset, suite_name: str = ""
) -> CollectSummary:
    """Measure every job not yet stored; a failed measurement becomes an error record."""
    config = backend.config()
    summary = CollectSummary()
    todo: dict[str, Job] = {}  # two planners may propose the same placement: measure it once
    for job in jobs:
        key = measurement_key(job.task, job.placement, config, job.round)
        if dataset.has(key):
            summary.skipped += 1
        else:
            todo.setdefault(key, job)
    progress = Progress(len(todo), f"measuring on {backend.name}")
    for key, job in todo.items():
        try:
            cost = backend.measure(job.task, job.placement)
        except DreamshardError as exc:
            # an error record gets its own key, so the next run measures this placement again
            error_key = f"{key}:error:{time.time_ns()}"
            dataset.append(
                error_key,
                job.task,
                job.placement,
                None,
                config,
                suite_name,
                job.round,
                error=str(exc),
            )
            summary.errors += 1
            progress.step(f"{job.task.name} {job.placement.method}: error: {exc}")
            continue
        dataset.append(key, job.task, job.placement, cost, config, suite_name, job.round)
        summary.measured += 1
        progress.step(f"{job.task.name} {job.placement.method}: {cost.overall:.2f} ms")
    progress.close()
    return summary
