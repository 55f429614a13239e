"""Placement tasks (tables + devices + memory cap) and placements (a device per shard).

A placement may split tables (`Placement.splits`, column-wise or row-wise, `tables.shards`):
its devices then index the shards of its task's tables, the tables of `shard_task(task,
splits)`, in which each split table's shards stand where the table stood. A placement without
splits has one device per table, as in the paper.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from dreamshard.errors import DreamshardError
from dreamshard.placement.constraints import Constraints, bind
from dreamshard.report import format_bytes
from dreamshard.tables.shards import Split, split_table, validate_splits
from dreamshard.tables.table import (
    BYTES_PER_WEIGHT,
    OPTIMIZER_STATE_WORDS,
    Table,
    validate_table,
)

GIB = 2**30


@dataclass(frozen=True)
class PlacementTask:
    """Tables to place on `num_devices` devices of `memory_cap_bytes` each."""

    tables: tuple[Table, ...]
    num_devices: int
    memory_cap_bytes: int
    precision: str = "fp16"
    name: str = ""
    optimizer: str = "sgd"  # whose state counts in memory beside the weights
    constraints: Constraints | None = None  # what the user requires beyond memory

    def bytes_of(self, table: Table) -> int:
        """A table's bytes in this task: weights at its precision plus optimizer state."""
        return table.bytes(self.precision, self.optimizer)

    def table_bytes(self) -> np.ndarray:
        """Bytes of each table at the task's precision, with its optimizer's state (a copy;
        computed once per task, since planners ask for it often and 856 tables take a
        millisecond or two)."""
        sizes = self.__dict__.get("_table_bytes")
        if sizes is None:
            sizes = np.array([self.bytes_of(t) for t in self.tables], dtype=np.int64)
            object.__setattr__(self, "_table_bytes", sizes)  # frozen: set past the guard
        return sizes.copy()

    def validate(self) -> None:
        """Raise DreamshardError for a task no planner should see."""
        if self.num_devices <= 0:
            raise DreamshardError(f"devices must be positive, got {self.num_devices}")
        if self.memory_cap_bytes <= 0:
            raise DreamshardError(
                f"memory per device must be positive, got {self.memory_cap_bytes}"
            )
        if self.precision not in BYTES_PER_WEIGHT:
            raise DreamshardError(
                f"unknown precision {self.precision!r}; choose one of {', '.join(BYTES_PER_WEIGHT)}"
            )
        if self.optimizer not in OPTIMIZER_STATE_WORDS:
            raise DreamshardError(
                f"unknown optimizer {self.optimizer!r}; choose one of "
                f"{', '.join(OPTIMIZER_STATE_WORDS)}"
            )
        if not self.tables:
            raise DreamshardError("the task has no tables")
        names = [t.name for t in self.tables]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise DreamshardError(f"table name {dup!r} appears twice; names must be unique")
        for table in self.tables:
            validate_table(table)


def shard_task(task: PlacementTask, splits: tuple[Split, ...]) -> PlacementTask:
    """The task whose tables are `task`'s with each split table replaced by its shards, in
    place (`task` itself when nothing is split, or when its tables are already these shards).
    Computed once per task and splits."""
    if not splits or any(t.shard is not None for t in task.tables):
        return task
    cache = task.__dict__.setdefault("_shard_tasks", {})
    key = tuple(sorted((s.table, s.kind, s.parts) for s in splits))
    if key not in cache:
        validate_splits(task.tables, splits)
        by_table = {s.table: s for s in splits}
        tables: list[Table] = []
        for table in task.tables:
            split = by_table.get(table.name)
            tables.extend(split_table(table, split.kind, split.parts) if split else (table,))
        cache[key] = replace(task, tables=tuple(tables))
    return cache[key]


@dataclass(frozen=True)
class Placement:
    """`devices[i]` is the device of shard i: of `task.tables[i]` when nothing is split, else of
    `shard_task(task, splits).tables[i]` (`placement_task`).

    `method` names the planner whose rule made it; `candidate` says, for a planner that picks
    among several placements (dreamshard), which one won ("policy sample 3", "heuristic lookup").
    """

    devices: tuple[int, ...]
    method: str = ""
    candidate: str = ""
    splits: tuple[Split, ...] = ()

    def device_tables(self, num_devices: int) -> list[list[int]]:
        """Indices of the tables on each device."""
        groups: list[list[int]] = [[] for _ in range(num_devices)]
        for i, d in enumerate(self.devices):
            groups[d].append(i)
        return groups


def placement_task(task: PlacementTask, placement: Placement) -> PlacementTask:
    """The task whose tables `placement.devices` index: `task`, or its shards."""
    return shard_task(task, placement.splits)


def shard_view(task: PlacementTask, placement: Placement) -> tuple[PlacementTask, Placement]:
    """The same plan seen table-wise: the task of the placement's shards and the placement of
    them with no splits left to apply (what backends, datasets and cost models take)."""
    if not placement.splits:
        return task, placement
    return placement_task(task, placement), replace(placement, splits=())


def device_memory(task: PlacementTask, placement: Placement) -> np.ndarray:
    """Bytes used on each device."""
    task = placement_task(task, placement)
    return np.bincount(
        np.asarray(placement.devices, dtype=np.int64),
        weights=task.table_bytes(),
        minlength=task.num_devices,
    ).astype(np.int64)


def placement_problem(task: PlacementTask, placement: Placement) -> str | None:
    """Why a placement is illegal for a task, or None when it is legal."""
    try:
        task = placement_task(task, placement)
    except DreamshardError as exc:
        return str(exc)
    if len(placement.devices) != len(task.tables):
        return f"the placement has {len(placement.devices)} devices for {len(task.tables)} tables"
    for table, d in zip(task.tables, placement.devices):
        if not 0 <= d < task.num_devices:
            return f"table {table.name} is on device {d}, outside 0..{task.num_devices - 1}"
    problem = _layout_problem(task, placement)
    if problem:
        return problem
    used = device_memory(task, placement)
    over = np.flatnonzero(used > task.memory_cap_bytes)
    if over.size:
        d = int(over[0])
        return (
            f"device {d} needs {format_bytes(used[d])}, over its cap of "
            f"{format_bytes(task.memory_cap_bytes)}"
        )
    try:
        bound = bind(task)
    except DreamshardError as exc:
        return str(exc)
    if bound is not None:
        names = [t.name for t in task.tables]
        return bound.problem(names, np.asarray(placement.devices, dtype=np.int64))
    return None


def _layout_problem(task: PlacementTask, placement: Placement) -> str | None:
    """Why the shards with a fixed layout are not in it: a data-parallel table's replicas, one
    on each device; a table-row-wise table's L shards, shard r on device r of one host of L."""
    held: dict[tuple[str, str], list[int]] = {}
    for table, d in zip(task.tables, placement.devices):
        if table.shard is not None and table.shard.kind in ("replica", "table_row"):
            held.setdefault((table.shard.kind, table.shard.of), []).append(int(d))
    for (kind, name), devices in held.items():
        d, size = task.num_devices, len(devices)
        if kind == "replica" and sorted(devices) != list(range(d)):
            return (
                f"data-parallel table {name} has replicas on devices {sorted(devices)}, not one "
                f"on each of the {d} devices"
            )
        if kind == "table_row" and (
            d % size or devices[0] % size or devices != list(range(devices[0], devices[0] + size))
        ):
            return (
                f"table-row-wise table {name} has its {size} shards on devices {devices}, not on "
                f"the {size} devices of one host in order (hosts of {size} among {d} devices)"
            )
    return None


def is_legal(task: PlacementTask, placement: Placement) -> bool:
    return placement_problem(task, placement) is None


def check_legal(task: PlacementTask, placement: Placement) -> None:
    problem = placement_problem(task, placement)
    if problem:
        raise DreamshardError(f"illegal placement: {problem}")
