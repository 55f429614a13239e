"""Collecting measurements: placements of a suite's training tasks, measured and appended.

The list of placements is a pure function of (suite, count, mix), so a re-run after a crash
walks the same list and skips every one whose measurement is already stored. Each measurement
is made under the host's measurement lock, after reading the dataset again: two collectors on
one dataset take turns, and the second skips what the first stored while it waited.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace

from dreamshard.costs.dataset import CostDataset, hardware, measurement_key
from dreamshard.costs.fanout import Fanout, Measured, launches, measuring_setups
from dreamshard.costs.host_lock import measurement_lock
from dreamshard.costs.types import CostBackend, PlacementCost
from dreamshard.errors import DreamshardError, InfeasibleError
from dreamshard.placement.heuristics import HEURISTIC_KEYS
from dreamshard.placement.planner import SeededPlanner
from dreamshard.placement.registry import method_names, named_planner
from dreamshard.placement.splitting import balance_splits, memory_splits, row_variant, split_place
from dreamshard.placement.suites import Suite
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.progress import Progress
from dreamshard.tables.shards import Split, split_problem

# The registered planners each mix draws on, by kind.
MIXES = {
    "random": ("baseline",),
    "heuristic": ("heuristic",),
    "mixed": ("baseline", "heuristic"),
    "split": ("baseline", "heuristic"),  # the same planners, each placing split tables
}

# What the "split" mix cuts, attempt i taking SPLIT_SHAPES[i % 3]: the balance rule's column
# halvings, the same stopped at two shards a table, or its tables cut row-wise over all devices
# (the candidates `planners.split_choice` weighs, so the cost network is fitted on their kind).
SPLIT_SHAPES = ("columns", "halves", "rows")


@dataclass(frozen=True)
class Job:
    task: PlacementTask
    placement: Placement
    round: int = 0


def collection_jobs(
    suite: Suite, count: int, mix: str = "mixed", device_counts: Sequence[int] = ()
) -> Iterator[Job]:
    """`count` distinct placements of the suite's training tasks, heuristics and random mixed.

    Attempt i goes to task i % T with planner (i + i // T) % M and random seed i: the first T
    attempts already cycle through every planner of the mix, and each later pass over the
    tasks shifts the cycle by one, so every task meets every planner in turn. A placement that
    another planner already proposed for the same task is skipped (two heuristics often agree),
    so `count` placements are all worth measuring; at most 10 x `count` attempts are made.

    With `device_counts`, pass k over the tasks places them on device_counts[k % len] devices
    (the same total memory), so the data also holds the loads per device that tasks of other
    sizes bring (`on_devices`).

    The "split" mix places split tables (`split_proposal`): the planners' own `--split auto`
    candidates are measured whole tables otherwise, so a cost network would meet shards only
    at planning time.
    """
    if mix not in MIXES:
        raise DreamshardError(f"unknown mix {mix!r}; choose one of {', '.join(MIXES)}")
    methods = method_names(*MIXES[mix])
    planners = {method: named_planner(method) for method in methods}  # whole tables
    tasks = suite.train_tasks
    seen: set[tuple[str, tuple[int, ...]]] = set()
    # A heuristic places whole tables by its key alone (the seed unused), so each later pass
    # would place a task as the first did; tried once, its answer is a duplicate after that.
    # (Most of a 2,000-placement prior's time went on such repeats.)
    unseeded = set(method_names("heuristic")) if mix != "split" else set()
    tried: set[tuple] = set()
    for i in range(10 * count):
        if len(seen) == count:
            return
        task = tasks[i % len(tasks)]
        if device_counts:
            task = on_devices(task, device_counts[(i // len(tasks)) % len(device_counts)])
        method = methods[(i + i // len(tasks)) % len(methods)]
        if method in unseeded:
            attempt = (task.name, task.num_devices, task.memory_cap_bytes, method)
            if attempt in tried:
                continue
            tried.add(attempt)
        try:
            if mix == "split":
                shape = SPLIT_SHAPES[i % len(SPLIT_SHAPES)]
                placement = split_proposal(task, planners[method], method, shape, i)
            else:
                placement = planners[method](task, i)
        except InfeasibleError:
            continue
        identity = (task.name, placement.devices, placement.splits)
        if identity not in seen:
            seen.add(identity)
            yield Job(task, placement)


def split_proposal(
    task: PlacementTask, planner: SeededPlanner, method: str, shape: str, seed: int
) -> Placement:
    """`planner`'s placement (seeded by `seed`) of the task's tables split as `shape` says
    (`SPLIT_SHAPES`), by the balance rule under the key of `method`, the planner's name
    (random: a heuristic's key by the seed). Where the rule cuts nothing, the table of the
    largest key is halved, so every proposal holds shards."""
    keys = list(HEURISTIC_KEYS)
    key = HEURISTIC_KEYS[method if method in HEURISTIC_KEYS else keys[seed % len(keys)]]
    base = memory_splits(task)
    splits = balance_splits(task, key, base, 2 if shape == "halves" else None)
    if splits == base:
        cut = {s.table for s in base}
        free = [t for t in task.tables if t.name not in cut and not split_problem(t, "column", 2)]
        if not free:
            raise InfeasibleError(f"no table of {task.name} can be halved")
        hottest = max(free, key=lambda t: (key(t), t.name))
        splits = (*base, Split(hottest.name, "column", 2))
    if shape == "rows":
        splits = row_variant(task, splits, base)
    return split_place(task, splits, lambda shards: planner(shards, seed), method)


def on_devices(task: PlacementTask, num_devices: int) -> PlacementTask:
    """The task's tables on `num_devices` devices with the same total memory (and room for the
    largest table), named after it ("NAME/8dev"); the task itself for its own device count."""
    if num_devices == task.num_devices:
        return task
    cap = -(-task.memory_cap_bytes * task.num_devices // num_devices)  # ceiling
    cap = max(cap, int(task.table_bytes().max()))
    return replace(
        task, num_devices=num_devices, memory_cap_bytes=cap, name=f"{task.name}/{num_devices}dev"
    )


@dataclass
class CollectSummary:
    measured: int = 0
    skipped: int = 0
    errors: int = 0


def measure_and_store(
    job: Job,
    backend: CostBackend,
    dataset: CostDataset,
    suite_name: str = "",
    hold: Callable[[CostBackend], AbstractContextManager[None]] | None = None,
) -> tuple[PlacementCost, bool]:
    """The job's cost, from the dataset when stored, else measured and appended.

    Returns (cost, measured now). A failed measurement raises and stores nothing, so a caller
    that retries (a Prefect task) gets a clean second try. The measuring happens under
    `hold(backend)` (default: the host's measurement lock, for a backend that times kernels),
    and the dataset is read again under it, so two processes never measure the same job.
    """
    config = backend.config()
    key = measurement_key(job.task, job.placement, config, job.round, hardware())
    stored = dataset.stored_cost(key)
    if stored is not None:
        return stored, False
    with (hold or measurement_lock)(backend):
        stored = dataset.stored_cost(key)  # another process may have measured it while we waited
        if stored is not None:
            return stored, False
        cost = backend.measure(job.task, job.placement)
        dataset.append(key, job.task, job.placement, cost, config, suite_name, job.round)
    return cost, True


def collect(
    jobs: list[Job],
    backend: CostBackend,
    dataset: CostDataset,
    suite_name: str = "",
    fanout: Fanout | None = None,
) -> CollectSummary:
    """Measure every job not yet stored; a failed measurement becomes an error record.

    The lock is taken per measurement, not for the whole collection, so that a long collection
    does not shut other measurements out for hours; each one is still alone on the host.
    With `fanout` the jobs go to its Dask cluster (`costs.fanout.Fanout.measure`: each worker
    measures under its own host's lock and returns the record) and this process alone writes
    them, as they come back. A job counts as stored when it was measured by a measurer of
    this run (this machine, or one of the cluster's workers, with the backend settings it
    measures with); one stored from another machine only (a merged file) is measured again,
    and the two records coexist.
    """
    config = backend.config()
    setups = measuring_setups(fanout, backend) or [("", config)]
    summary = CollectSummary()
    todo: dict[str, Job] = {}  # two planners may propose the same placement: measure it once
    for job in jobs:
        keys = [measurement_key(job.task, job.placement, c, job.round, m) for m, c in setups]
        if any(dataset.has(key) for key in keys):
            summary.skipped += 1
        else:
            todo.setdefault(keys[0], job)
    progress = Progress(len(todo), f"measuring on {backend.name}")
    per_launch = getattr(backend, "plans_per_launch", 1)
    sink = _Sink(config, dataset, suite_name, summary, progress)  # what this process measures
    if fanout is not None:
        for measured in fanout.measure(todo.items()):
            _store_measured(measured, dataset, suite_name, summary, progress)
    elif per_launch > 1:  # a backend that measures many placements of a task in one launch
        for launch in launches(todo.items(), per_launch):
            with measurement_lock(backend):
                _measure_launch(launch, backend, sink)
    else:
        for key, job in todo.items():
            with measurement_lock(backend):
                _measure_one(key, job, backend, sink)
    progress.close()
    return summary


@dataclass
class _Sink:
    """Where `collect` stores what it measures in this process, counting and telling each."""

    config: dict
    dataset: CostDataset
    suite_name: str
    summary: CollectSummary
    progress: Progress

    def stored(self, key: str, job: Job) -> bool:
        """Whether another collector stored the job while this one waited (then counted)."""
        if not self.dataset.has(key):
            return False
        self.summary.skipped += 1
        self.progress.step(f"{job.task.name} {job.placement.method}: stored by another collector")
        return True

    def cost(self, key: str, job: Job, cost: PlacementCost) -> None:
        self.dataset.append(
            key, job.task, job.placement, cost, self.config, self.suite_name, job.round
        )
        self.summary.measured += 1
        self.progress.step(f"{job.task.name} {job.placement.method}: {cost.overall:.2f} ms")

    def error(self, key: str, job: Job, exc: Exception) -> None:
        """An error record under a key of its own, so the next run measures the job again."""
        self.dataset.append(
            f"{key}:error:{time.time_ns()}",
            job.task,
            job.placement,
            None,
            self.config,
            self.suite_name,
            job.round,
            error=str(exc),
        )
        self.summary.errors += 1
        self.progress.step(f"{job.task.name} {job.placement.method}: error: {exc}")


def _measure_launch(launch: list[tuple[str, Job]], backend: CostBackend, sink: _Sink) -> None:
    """Measure one task's placements in one launch (`backend.measure_batch`) and store each.
    A failed launch stores an error record for each of its placements (measured again next
    run), says why in one line, and the collection goes on."""
    left = [(key, job) for key, job in launch if not sink.stored(key, job)]
    if not left:
        return
    task = left[0][1].task
    try:
        costs = backend.measure_batch(task, [job.placement for _, job in left])
    except DreamshardError as exc:
        print(
            f"dreamshard: a launch of {len(left)} placements of {task.name} failed (they are "
            f"measured again next run): {exc}",
            file=sys.stderr,
        )
        for key, job in left:
            sink.error(key, job, exc)
        return
    for (key, job), cost in zip(left, costs, strict=True):
        sink.cost(key, job, cost)


def _store_measured(
    measured: Measured,
    dataset: CostDataset,
    suite_name: str,
    summary: CollectSummary,
    progress: Progress,
) -> None:
    """Append what a worker measured (`store_measured`), counted and told."""
    job = measured.job
    if not store_measured(measured, dataset, suite_name):
        summary.skipped += 1
        progress.step(f"{job.task.name} {job.placement.method}: stored by another collector")
        return
    if measured.cost is None:
        summary.errors += 1
    else:
        summary.measured += 1
    progress.step(measured.told())


def store_measured(measured: Measured, dataset: CostDataset, suite_name: str) -> bool:
    """Append what a worker measured (an error under a key of its own, so the next run tries
    the placement again); False when another collector stored it meanwhile. The key is made
    from the worker's backend settings and hardware, which are what it measured with."""
    job = measured.job
    key = measurement_key(job.task, job.placement, measured.config, job.round, measured.hardware)
    if dataset.has(key):
        return False
    if measured.cost is None:
        key = f"{key}:error:{time.time_ns()}"
    dataset.append(
        key,
        job.task,
        job.placement,
        measured.cost,
        measured.config,
        suite_name,
        job.round,
        error=measured.error,
        measured_on=measured.hardware,
    )
    return True


def _measure_one(key: str, job: Job, backend: CostBackend, sink: _Sink) -> None:
    """Measure and store one job, unless another collector stored it while this one waited."""
    if sink.stored(key, job):
        return
    try:
        cost = backend.measure(job.task, job.placement)
    except DreamshardError as exc:
        sink.error(key, job, exc)
        return
    sink.cost(key, job, cost)
