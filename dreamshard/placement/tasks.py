"""Placement tasks (tables + devices + memory cap) and placements (a device per table)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dreamshard.errors import DreamshardError
from dreamshard.report import format_bytes
from dreamshard.tables.table import BYTES_PER_WEIGHT, Table, validate_table

GIB = 2**30


@dataclass(frozen=True)
class PlacementTask:
    """Tables to place on `num_devices` devices of `memory_cap_bytes` each."""

    tables: tuple[Table, ...]
    num_devices: int
    memory_cap_bytes: int
    precision: str = "fp16"
    name: str = ""

    def table_bytes(self) -> np.ndarray:
        """Bytes of each table at the task's precision (a copy; computed once per task, since
        planners ask for it often and 856 tables take a millisecond or two)."""
        sizes = self.__dict__.get("_table_bytes")
        if sizes is None:
            sizes = np.array([t.bytes(self.precision) for t in self.tables], dtype=np.int64)
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
        if not self.tables:
            raise DreamshardError("the task has no tables")
        names = [t.name for t in self.tables]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise DreamshardError(f"table name {dup!r} appears twice; names must be unique")
        for table in self.tables:
            validate_table(table)


@dataclass(frozen=True)
class Placement:
    """`devices[i]` is the device of `task.tables[i]`.

    `method` names the planner whose rule made it; `candidate` says, for a planner that picks
    among several placements (dreamshard), which one won ("policy sample 3", "heuristic lookup").
    """

    devices: tuple[int, ...]
    method: str = ""
    candidate: str = ""

    def device_tables(self, num_devices: int) -> list[list[int]]:
        """Indices of the tables on each device."""
        groups: list[list[int]] = [[] for _ in range(num_devices)]
        for i, d in enumerate(self.devices):
            groups[d].append(i)
        return groups


def device_memory(task: PlacementTask, placement: Placement) -> np.ndarray:
    """Bytes used on each device."""
    return np.bincount(
        np.asarray(placement.devices, dtype=np.int64),
        weights=task.table_bytes(),
        minlength=task.num_devices,
    ).astype(np.int64)


def placement_problem(task: PlacementTask, placement: Placement) -> str | None:
    """Why a placement is illegal for a task, or None when it is legal."""
    if len(placement.devices) != len(task.tables):
        return f"the placement has {len(placement.devices)} devices for {len(task.tables)} tables"
    for table, d in zip(task.tables, placement.devices):
        if not 0 <= d < task.num_devices:
            return f"table {table.name} is on device {d}, outside 0..{task.num_devices - 1}"
    used = device_memory(task, placement)
    over = np.flatnonzero(used > task.memory_cap_bytes)
    if over.size:
        d = int(over[0])
        return (
            f"device {d} needs {format_bytes(used[d])}, over its cap of "
            f"{format_bytes(task.memory_cap_bytes)}"
        )
    return None


def is_legal(task: PlacementTask, placement: Placement) -> bool:
    return placement_problem(task, placement) is None


def check_legal(task: PlacementTask, placement: Placement) -> None:
    problem = placement_problem(task, placement)
    if problem:
        raise DreamshardError(f"illegal placement: {problem}")
