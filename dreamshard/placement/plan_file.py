"""The plan file: a placement written for people and programs, and read back against a task
(checked by a pydantic model, `PlanFile`)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dreamshard.errors import DreamshardError
from dreamshard.files import read_json, validate, write_json_atomic
from dreamshard.placement.tasks import (
    Placement,
    PlacementTask,
    device_memory,
    placement_problem,
    placement_task,
    shard_task,
)
from dreamshard.tables.shards import SPLIT_KINDS, Split
from dreamshard.tables.table import BYTES_PER_WEIGHT, OPTIMIZER_STATE_WORDS

PLAN_FORMAT = "dreamshard-plan"
PLAN_VERSION = 2  # 2 carries shards (splits); version 1 (tables only) still reads


def plan_to_dict(task: PlacementTask, placement: Placement) -> dict[str, Any]:
    """The plan (version 2): `splits` lists the split tables, `placement` maps each shard (a
    whole table, `name[c0:c1]` or `name[r0:r1]`) to its device."""
    task = placement_task(task, placement)
    used = device_memory(task, placement)
    groups = placement.device_tables(task.num_devices)
    return {
        "format": PLAN_FORMAT,
        "version": PLAN_VERSION,
        "method": placement.method,
        "candidate": placement.candidate,
        "task": task.name,
        "num_devices": task.num_devices,
        "memory_cap_bytes": task.memory_cap_bytes,
        "precision": task.precision,
        "optimizer": task.optimizer,
        "splits": [asdict(s) for s in placement.splits],
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


class MeasuredCandidateRecord(BaseModel):
    """One candidate a refinement measured (`evaluation.refine`)."""

    model_config = ConfigDict(strict=True)

    name: str
    method: str
    predicted_ms: float | None = None  # the cost network's prediction (learned methods only)
    median_ms: float
    ratio_to_pick: float  # geometric mean over rounds of its cost / the pick's, paired
    interval: list[float]  # 95% bootstrap interval of that ratio
    costs_ms: list[float]  # overall cost in each round


class RefinementRecord(BaseModel):
    """What `--refine` measured: candidates (the planner's pick first), rounds, the winner."""

    model_config = ConfigDict(strict=True)

    backend: str
    costs_made: str = ""
    rounds: int = Field(ge=1)
    seconds: float
    rule: str = ""
    winner: str
    reason: str = ""
    candidates: list[MeasuredCandidateRecord]


def write_plan(
    task: PlacementTask,
    placement: Placement,
    path: str | Path,
    note: str | None = None,
    refinement: RefinementRecord | None = None,
    seed: int | None = None,
    hardware: dict | None = None,
) -> None:
    """The plan file; `note` (e.g. the task lies outside the model's training), the planner's
    `seed` (`dreamshard explain` re-runs its candidates from it), the task's constraints, the
    hardware file it was planned for (name and content hash) and what a measured refinement
    found go in too."""
    data = plan_to_dict(task, placement) | ({"note": note} if note else {})
    if hardware is not None:
        data["hardware"] = hardware
    if seed is not None:
        data["seed"] = seed
    if task.constraints:  # what the plan was made to hold, as a constraints file writes it
        data["constraints"] = task.constraints.as_dict()
    if refinement is not None:
        data["refinement"] = refinement.model_dump()
    write_json_atomic(path, data)


class DeviceRecord(BaseModel):
    model_config = ConfigDict(strict=True)

    device: int = Field(ge=0)
    tables: list[str]
    memory_bytes: int = Field(ge=0)


class SplitRecord(BaseModel):
    """One split table of a plan (`Split`)."""

    model_config = ConfigDict(strict=True)

    table: str
    kind: Literal[*SPLIT_KINDS]
    parts: int = Field(ge=2)


class HardwareRecord(BaseModel):
    """The hardware file a plan was made for: its name (with the corner, if any) and the
    sha256 of its content."""

    model_config = ConfigDict(strict=True)

    name: str
    sha256: str


class PlanFile(BaseModel):
    """A plan file as `plan_to_dict` writes it (other keys are ignored). JSON types are exact:
    a count written as "2" or 2.0 is refused, so is a device written as true."""

    model_config = ConfigDict(strict=True)

    format: Literal[PLAN_FORMAT]
    version: Literal[1, 2]
    method: str = ""
    candidate: str = ""
    note: str = ""
    task: str = ""
    num_devices: int = Field(gt=0)
    memory_cap_bytes: int = Field(gt=0)
    precision: Literal[*BYTES_PER_WEIGHT] = "fp16"
    optimizer: Literal[*OPTIMIZER_STATE_WORDS] = "sgd"  # its state counts in memory_bytes
    splits: list[SplitRecord] = []  # version 2
    placement: dict[str, Annotated[int, Field(ge=0)]]
    devices: list[DeviceRecord] = []
    refinement: RefinementRecord | None = None  # plans written with --refine (0.2)
    hardware: HardwareRecord | None = None  # the hardware file planned for (0.3)


def read_plan(path: str | Path) -> PlanFile:
    """A plan file, checked field by field (DreamshardError naming the file and the field)."""
    return validate(PlanFile, read_json(path, "plan file"), str(path))


def placement_from_plan(
    task: PlacementTask, plan: PlanFile | dict[str, Any], where: str = "the plan", check=True
) -> Placement:
    """The plan's placement for `task`, refused unless it places exactly its tables legally
    (`check=False`: its devices and memory are left to the caller, `dreamshard check`).

    `where` (the plan file's name) begins every error message.
    """
    if not isinstance(plan, PlanFile):
        plan = validate(PlanFile, plan, where)
    mapping = plan.placement
    splits = tuple(Split(s.table, s.kind, s.parts) for s in plan.splits)
    try:
        shards = shard_task(task, splits)
    except DreamshardError as exc:
        raise DreamshardError(f"{where}: splits: {exc}") from None
    names = [t.name for t in shards.tables]
    what = "shards of the table file's tables" if splits else "tables of the table file"
    unknown = sorted(set(mapping) - set(names))
    if unknown:
        raise DreamshardError(
            f"{where}: placement names unknown table {unknown[0]} ({len(unknown)} in all); "
            f"it must place exactly the {what}"
        )
    missing = [n for n in names if n not in mapping]
    if missing:
        raise DreamshardError(
            f"{where}: placement misses table {missing[0]} ({len(missing)} in all); "
            f"it must place exactly the {what}"
        )
    for name in names:
        if mapping[name] >= task.num_devices:
            raise DreamshardError(
                f"{where}: placement.{name} is device {mapping[name]}, "
                f"outside 0..{task.num_devices - 1} (num_devices {task.num_devices})"
            )
    placement = Placement(tuple(mapping[n] for n in names), method=plan.method, splits=splits)
    problem = placement_problem(task, placement) if check else None
    if problem:
        raise DreamshardError(f"{where}: illegal placement: {problem}")
    return placement
