"""The plan file: a placement written for people and programs, and read back against a task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dreamshard.errors import DreamshardError
from dreamshard.files import read_json, write_json_atomic
from dreamshard.placement.tasks import Placement, PlacementTask, check_legal, device_memory

PLAN_FORMAT = "dreamshard-plan"


def plan_to_dict(task: PlacementTask, placement: Placement) -> dict[str, Any]:
    used = device_memory(task, placement)
    groups = placement.device_tables(task.num_devices)
    return {
        "format": PLAN_FORMAT,
        "version": 1,
        "method": placement.method,
        "candidate": placement.candidate,
        "task": task.name,
        "num_devices": task.num_devices,
        "memory_cap_bytes": task.memory_cap_bytes,
        "precision": task.precision,
        "placement": {t.name: int(d) for t, d in zip(task.tables, placement.devices)},
        "devices": [
            {
                "device": d,
                "tables": [task.tables[i].name for i in groups[d]],
                "memory_bytes": int(used[d]),
            }
            for d in range(task.num_devices)
        ],
    }


def write_plan(task: PlacementTask, placement: Placement, path: str | Path) -> None:
    write_json_atomic(path, plan_to_dict(task, placement))


def read_plan(path: str | Path) -> dict[str, Any]:
    data = read_json(path, "plan file")
    if not isinstance(data, dict) or not isinstance(data.get("placement"), dict):
        raise DreamshardError(f"{path} is not a plan: it has no 'placement' object")
    return data


def placement_from_plan(task: PlacementTask, plan: dict[str, Any]) -> Placement:
    """The plan's placement for `task`, refused unless it places exactly its tables legally."""
    mapping = plan["placement"]
    names = [t.name for t in task.tables]
    unknown = sorted(set(mapping) - set(names))
    if unknown:
        raise DreamshardError(f"the plan names unknown table {unknown[0]} ({len(unknown)} in all)")
    missing = [n for n in names if n not in mapping]
    if missing:
        raise DreamshardError(f"the plan misses table {missing[0]} ({len(missing)} in all)")
    devices = []
    for name in names:
        d = mapping[name]
        if not isinstance(d, int) or isinstance(d, bool):
            raise DreamshardError(f"the plan puts table {name} on {d!r}, not a device index")
        devices.append(d)
    placement = Placement(tuple(devices), method=str(plan.get("method", "")))
    check_legal(task, placement)
    return placement
