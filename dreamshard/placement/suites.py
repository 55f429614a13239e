"""Task suites as in the paper: a table pool split into disjoint train and test pools, and
N tasks of T tables sampled from each.

A suite is named `<profile>-<T>x<D>` (for example `dlrm-50x4`, `cpu-100x8`): T tables on D
devices, tables from the synthetic `profile`. All suites of one profile and pool seed share
the same pool split, so a policy trained on one suite's train tasks can be tested zero-shot
on another suite's test tasks with tables it never saw.

Memory caps bind: each task's cap per device is `slack * (total bytes / D)` with slack drawn
uniformly from MEMORY_SLACK (never below the largest table), so some tasks are tight and
greedy keys that ignore memory must give way.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dreamshard.errors import DreamshardError, InfeasibleError
from dreamshard.files import read_json, validate, write_json_atomic
from dreamshard.placement.heuristics import greedy_place
from dreamshard.placement.tasks import PlacementTask
from dreamshard.tables.sources import TableRecord, table_to_dict
from dreamshard.tables.synthetic import generate_tables, get_profile
from dreamshard.tables.table import BYTES_PER_WEIGHT, Table

POOL_SIZE = 856  # as many tables as the public data set
MEMORY_SLACK = (1.05, 1.5)
MIB = 2**20
SUITE_FORMAT = "dreamshard-suite"
PRECISION = {"dlrm": "fp16", "cpu": "fp32"}  # weights as each profile's hardware holds them


@dataclass(frozen=True)
class SuiteSpec:
    name: str
    profile: str
    num_tables: int
    num_devices: int
    num_train_tasks: int = 50
    num_test_tasks: int = 50
    pool_size: int = POOL_SIZE
    pool_seed: int = 0


@dataclass(frozen=True)
class Suite:
    spec: SuiteSpec
    train_tasks: tuple[PlacementTask, ...]
    test_tasks: tuple[PlacementTask, ...]


def parse_suite_name(name: str, num_train_tasks: int = 50, num_test_tasks: int = 50) -> SuiteSpec:
    match = re.fullmatch(r"(\w+)-(\d+)x(\d+)", name)
    if not match:
        raise DreamshardError(
            f"suite name {name!r} should look like <profile>-<tables>x<devices>, e.g. dlrm-50x4"
        )
    profile, tables, devices = match.group(1), int(match.group(2)), int(match.group(3))
    get_profile(profile)
    if tables <= 0 or devices <= 0:
        raise DreamshardError(f"suite {name}: tables and devices must be positive")
    if tables > POOL_SIZE // 2:
        raise DreamshardError(f"suite {name}: at most {POOL_SIZE // 2} tables (half the pool)")
    return SuiteSpec(name, profile, tables, devices, num_train_tasks, num_test_tasks)


def split_pool(spec: SuiteSpec) -> tuple[list[Table], list[Table]]:
    """The profile's pool, shuffled with the pool seed: first half train, second half test."""
    pool = generate_tables(spec.profile, spec.pool_size, spec.pool_seed)
    order = np.random.default_rng(spec.pool_seed).permutation(len(pool))
    half = len(pool) // 2
    return [pool[i] for i in order[:half]], [pool[i] for i in order[half:]]


def _sample_task(
    rng: np.random.Generator, pool: list[Table], spec: SuiteSpec, name: str
) -> PlacementTask:
    picks = rng.choice(len(pool), size=spec.num_tables, replace=False)
    tables = tuple(pool[i] for i in sorted(picks))
    precision = PRECISION[spec.profile]
    sizes = [t.bytes(precision) for t in tables]
    slack = rng.uniform(*MEMORY_SLACK)
    while True:
        cap = max(slack * sum(sizes) / spec.num_devices, max(sizes))
        cap = int(math.ceil(cap / MIB) * MIB)
        task = PlacementTask(tables, spec.num_devices, cap, precision, name)
        try:
            greedy_place(task, "size")
            return task
        except InfeasibleError:
            slack *= 1.05  # too tight for any packing found: loosen this task a little


def held_out(task_name: str) -> bool:
    """Whether a task is a suite's test task (its tables come from the held-out pool): its
    measurements are never fitted, so that evaluations on it stay honest."""
    return "/test/" in task_name


def make_suite(spec: SuiteSpec | str) -> Suite:
    """Build a suite from its spec (or name); the same spec always gives the same suite."""
    if isinstance(spec, str):
        spec = parse_suite_name(spec)
    train_pool, test_pool = split_pool(spec)
    rng = np.random.default_rng([spec.pool_seed, spec.num_tables, spec.num_devices])
    train = tuple(
        _sample_task(rng, train_pool, spec, f"{spec.name}/train/{i}")
        for i in range(spec.num_train_tasks)
    )
    test = tuple(
        _sample_task(rng, test_pool, spec, f"{spec.name}/test/{i}")
        for i in range(spec.num_test_tasks)
    )
    return Suite(spec, train, test)


def _task_to_dict(task: PlacementTask) -> dict:
    return {
        "name": task.name,
        "num_devices": task.num_devices,
        "memory_cap_bytes": task.memory_cap_bytes,
        "precision": task.precision,
        "tables": [t.name for t in task.tables],
    }


def save_suite(suite: Suite, path: str | Path) -> None:
    tasks = suite.train_tasks + suite.test_tasks
    tables = {t.name: t for task in tasks for t in task.tables}
    write_json_atomic(
        path,
        {
            "format": SUITE_FORMAT,
            "version": 1,
            "spec": asdict(suite.spec),
            "tables": [table_to_dict(t) for t in tables.values()],
            "train": [_task_to_dict(t) for t in suite.train_tasks],
            "test": [_task_to_dict(t) for t in suite.test_tasks],
        },
    )


class SpecRecord(BaseModel):
    model_config = ConfigDict(strict=True)

    name: str
    profile: str
    num_tables: int = Field(gt=0)
    num_devices: int = Field(gt=0)
    num_train_tasks: int = Field(ge=0)
    num_test_tasks: int = Field(ge=0)
    pool_size: int = Field(gt=0)
    pool_seed: int


class TaskRecord(BaseModel):
    model_config = ConfigDict(strict=True)

    name: str
    num_devices: int = Field(gt=0)
    memory_cap_bytes: int = Field(gt=0)
    precision: Literal[*BYTES_PER_WEIGHT]
    tables: list[str] = Field(min_length=1)


class SuiteFile(BaseModel):
    """A suite file as `save_suite` writes it: tables once, tasks by table name."""

    format: Literal[SUITE_FORMAT]
    version: Literal[1]
    spec: SpecRecord
    tables: list[TableRecord]
    train: list[TaskRecord]
    test: list[TaskRecord]


def load_suite(path: str | Path) -> Suite:
    """A saved suite, checked field by field (DreamshardError naming the file and the field)."""
    data = read_json(path, "suite file")
    if not isinstance(data, dict) or data.get("format") != SUITE_FORMAT:
        raise DreamshardError(
            f"{path} is not a dreamshard suite file: its format must be {SUITE_FORMAT!r}"
        )
    suite = validate(SuiteFile, data, str(path))
    tables = {record.name: record.to_table() for record in suite.tables}

    def task(part: str, i: int, record: TaskRecord) -> PlacementTask:
        unknown = [n for n in record.tables if n not in tables]
        if unknown:
            raise DreamshardError(
                f"{path}: {part}.{i}.tables names table {unknown[0]!r}, not in the file's tables"
            )
        return PlacementTask(
            tuple(tables[n] for n in record.tables),
            record.num_devices,
            record.memory_cap_bytes,
            record.precision,
            record.name,
        )

    return Suite(
        SuiteSpec(**suite.spec.model_dump()),
        tuple(task("train", i, r) for i, r in enumerate(suite.train)),
        tuple(task("test", i, r) for i, r in enumerate(suite.test)),
    )


# Tasks at the paper's scale (hundreds of tables, 16-128 devices): every table of a pool, each
# device capped at SCALE_SLACK x the even share, or 1.02x the largest table where that is more
# (TorchRec counts a table's inputs and outputs too, and must fit it).
SCALE_SLACK = 1.3


def capped_task(
    tables: list[Table], num_devices: int, name: str, precision: str = "fp16"
) -> PlacementTask:
    """The tables on `num_devices` devices at `precision`, each capped as SCALE_SLACK says."""
    sizes = [t.bytes(precision) for t in tables]
    cap = int(max(1.02 * max(sizes), SCALE_SLACK * sum(sizes) / num_devices))
    return PlacementTask(tuple(tables), num_devices, cap, precision, name)


def pool_tasks(pool_seeds: list[int], device_counts: list[int]) -> list[PlacementTask]:
    """The dlrm test pool of each pool seed (428 tables no suite of that seed trains on) on
    each device count (`capped_task`)."""
    tasks = []
    for seed in pool_seeds:
        spec = replace(parse_suite_name("dlrm-50x4"), pool_seed=seed)  # only the pool matters
        _, test_pool = split_pool(spec)
        for d in device_counts:
            tasks.append(capped_task(test_pool, d, f"dlrm-{len(test_pool)}x{d}/pool {seed}"))
    return tasks


# The planning-speed tasks (the speed study, `benchmarks/speed.py`): the paper's scale and ten times
# it, as `dreamshard tables generate --profile dlrm --num-tables N --seed 7` writes the tables.
# (name, tables, devices, GiB per device.)
SPEED_TASKS = (("dlrm-856x128", 856, 128, 8.0), ("dlrm-10000x1024", 10_000, 1024, 16.0))


def speed_task(name: str) -> PlacementTask:
    """The planning-speed task `name` (`SPEED_TASKS`), at fp16."""
    _, tables, devices, gib = next(t for t in SPEED_TASKS if t[0] == name)
    cap = int(gib * 2**30)
    return PlacementTask(tuple(generate_tables("dlrm", tables, 7)), devices, cap, name=name)
