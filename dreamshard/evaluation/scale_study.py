"""The scale study (the paper's RQ5, issue 27): hundreds of tables on 16-128 devices across hosts,
every plan judged twice.

Tasks (`study_task`): three table sets (`STUDY_SETS`): the test half of the `dlrm` pool (428
tables), the whole pool (856: it then holds the tables the dlrm suites train on), and 856 tables
of the `wide` family (`tables.synthetic`: rows 1e3-5e7, dims 8-256, pooling 1-200); each on a
device count, at fp16, under one of two memory settings: `loose` (`suites.capped_task`: whole-
table plans exist) or `binding` (1.2x the even share: a table larger than a device must split).
The devices sit on hosts of 8 (`TOPOLOGY`, nvlink inside a host, 400 Gb/s RDMA between).

Judges (`judge_plan`): the simulated backend on that topology (exact, one round) and a second
judge the caller passes: the benchmark passes TorchRec's own estimator
(`integrations.torchrec_judge`, `compute_device="cuda"`, a stage above this one), so that a win
that exists only under our model shows as such. The reference heuristics place the memory-forced
splits only (`memory_split_place`: whole tables where memory allows), as the issue's targets
name them.
"""

from __future__ import annotations

import fcntl
import json
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.errors import DreamshardError, InfeasibleError
from dreamshard.files import write_text_atomic
from dreamshard.placement.heuristics import greedy_place
from dreamshard.placement.splitting import memory_splits, split_place
from dreamshard.placement.suites import capped_task, parse_suite_name, split_pool
from dreamshard.placement.tasks import Placement, PlacementTask, check_legal
from dreamshard.tables.synthetic import generate_tables

STUDY_SETS = ("dlrm-428", "dlrm-856", "wide-856")
MEMORY_SETTINGS = ("loose", "binding")
BINDING_SLACK = 1.2  # the binding setting's cap over the even share
TOPOLOGY = "nvlink-rdma"  # hosts of 8


def study_tables(table_set: str, seed: int) -> list:
    """The tables of `table_set` for seed `seed` (the dlrm sets: pool seed)."""
    if table_set == "wide-856":
        return generate_tables("wide", 856, seed)
    spec = replace(parse_suite_name("dlrm-50x4"), pool_seed=seed)  # only its pool matters
    train, test = split_pool(spec)
    if table_set == "dlrm-428":
        return test
    if table_set == "dlrm-856":
        return train + test
    raise DreamshardError(f"unknown table set {table_set!r}; choose one of {', '.join(STUDY_SETS)}")


def study_task(table_set: str, seed: int, devices: int, memory: str) -> PlacementTask:
    """One task of the study: a table set's seed on `devices` devices under `memory`."""
    tables = study_tables(table_set, seed)
    name = f"{table_set}x{devices}/{memory}/seed {seed}"
    if memory == "loose":
        return capped_task(tables, devices, name)
    if memory != "binding":
        raise DreamshardError(f"unknown memory setting {memory!r}; choose loose or binding")
    even = sum(t.bytes() for t in tables) / devices
    return PlacementTask(tuple(tables), devices, int(BINDING_SLACK * even), name=name)


def memory_split_place(task: PlacementTask, key: str) -> Placement:
    """Heuristic `key` on the task's memory-forced splits only (whole tables where they fit)."""
    return split_place(task, memory_splits(task), lambda shards: greedy_place(shards, key), key)


@contextmanager
def within(seconds: float | None) -> Iterator[None]:
    """DreamshardError when the body runs past `seconds` (None: no limit; main thread only)."""
    if not seconds:
        yield
        return

    def expire(*_):
        raise DreamshardError(f"no plan in {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class PlanRecord:
    """One planner's plan of one task and what the two judges say of it (ms)."""

    seconds: float = float("nan")
    declined: str = ""
    simulated: float = float("nan")
    torchrec: float = float("nan")
    torchrec_declined: str = ""
    split: dict = field(default_factory=dict)  # split kind -> tables split so

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def judge_plan(
    task: PlacementTask,
    planner: Callable[[PlacementTask], Placement],
    backend: SimulatedBackend,
    seconds: float | None = None,
    second: Callable[[PlacementTask, Placement, str], float] | None = None,
) -> PlanRecord:
    """Plan `task` (within `seconds`), check it legal, and judge it by `backend` and by
    `second` (task, placement, topology) -> ms, whose refusal (DreamshardError) is recorded."""
    record = PlanRecord()
    start = time.perf_counter()
    try:
        with within(seconds):
            placement = planner(task)
    except (DreamshardError, InfeasibleError) as exc:
        record.declined = str(exc).splitlines()[0][:200]
        return record
    record.seconds = time.perf_counter() - start
    check_legal(task, placement)
    for split in placement.splits:
        record.split[split.kind] = record.split.get(split.kind, 0) + 1
    record.simulated = float(backend.overall_many(task, [placement])[0])
    if second is None:
        return record
    try:
        record.torchrec = second(task, placement, backend.topology)
    except DreamshardError as exc:
        record.torchrec_declined = str(exc).splitlines()[0][:200]
    return record


def row_key(row: dict) -> tuple:
    """A study row's task: (table set, seed, devices, memory)."""
    return (row["set"], int(row["seed"]), int(row["devices"]), row["memory"])


class StudyRows:
    """The rows of a study (one task's plans and judges each), kept in a JSON file so a study
    too long for one sitting goes on where it stopped: a rerun with the same `settings` (the
    model's fingerprint, the time limits) takes the tasks stored and plans only the rest. Rows
    made under other settings are kept in the file but never used. The file is rewritten
    whole, atomically, after each task: a crash loses at most the task in hand.

    Two sittings may share one file at once (say one per core, on different table sets): each
    reads the file again before it looks a task up, and adds its row under a lock to what the
    file holds then, so neither loses the other's rows; a task both planned is kept once."""

    def __init__(self, path: str | Path, settings: dict):
        self.path = Path(path)
        self.settings = settings
        self.all: list[dict] = []
        self._seen = None  # (mtime, size) of the file as last read
        self._load()

    def _load(self) -> None:
        """Read the file again when it changed since it was last read."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return
        if self._seen == (stat.st_mtime_ns, stat.st_size):
            return
        try:
            self.all = json.loads(self.path.read_text())["rows"]
        except (ValueError, KeyError, TypeError) as exc:
            raise DreamshardError(
                f"{self.path} is not a study's rows file ({exc}); move it away or pass "
                "another --rows"
            ) from None
        self._seen = (stat.st_mtime_ns, stat.st_size)

    def stored(self, key: tuple) -> dict | None:
        """The row of `key` made under these settings, or None."""
        self._load()
        for row in self.all:
            if row["settings"] == self.settings and row_key(row) == key:
                return row
        return None

    def add(self, row: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._load()
            if self.stored(row_key(row)) is None:
                self.all.append({**row, "settings": self.settings})
                self._write()

    def replace_plans(self, key: tuple, plans: dict, note: dict) -> dict:
        """The stored row of `key` with the records of `plans` (planner name -> record) put in
        place of its own, and `note` (which code made them, when) kept under `replanned` for
        each: a planner changed since the study ran is judged again on the same tasks without
        re-planning the rest. The updated row."""
        with open(self.path.with_name(self.path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._load()
            row = self.stored(key)
            if row is None:
                raise DreamshardError(f"no stored row of {key} to re-plan; plan it first")
            row["plans"].update(plans)
            row.setdefault("replanned", {}).update({name: note for name in plans})
            self._write()
            return row

    def _write(self) -> None:
        text = json.dumps({"rows": self.all}, indent=1, default=str) + "\n"
        write_text_atomic(self.path, text)
        stat = self.path.stat()  # what it wrote is what it holds: not read back
        self._seen = (stat.st_mtime_ns, stat.st_size)
