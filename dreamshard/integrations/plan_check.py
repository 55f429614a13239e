"""`dreamshard check`: what an existing plan is worth, ours or TorchRec's.

For a plan of a task (read from our plan JSON, from the JSON form of a TorchRec `ShardingPlan`
that `place --format torchrec` writes, or taken live from a `ShardingPlan` and its model with
`check_sharding_plan`) it reports:

- legality: each device within its memory cap, fixed shard layouts, the task's constraints
  (a plan file's own, as `place` recorded them);
- memory per device, as we count it (weights at the task's precision and the optimizer's state)
  and as TorchRec's planner counts it (its storage estimate of each shard: weights, optimizer
  state, and the input and pooled output buffers of a batch), where TorchRec is installed;
- the predicted cost: each device's forward, all-to-all and backward and the overall (the
  slowest device), by the calibrated analytic model (the simulated backend) or, with a model,
  by its cost network;
- how far dreamshard's own plan of the same tables would be from it: the same judge's
  predicted overall of the `dreamshard` planner's plan (the model given, else the shipped
  one) over the checked plan's.

Nothing is measured and nothing is re-planned but dreamshard's comparison plan.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from dreamshard.costs.hardware import Hardware
from dreamshard.costs.simulated import SimulatedBackend, analytic_judge
from dreamshard.errors import DreamshardError, IllegalPlanError
from dreamshard.files import read_json
from dreamshard.integrations.torchrec_export import TORCHREC_PLAN_FORMAT
from dreamshard.learn.model_file import resolve_model
from dreamshard.placement.constraints import sharding_problem
from dreamshard.placement.plan_file import PLAN_FORMAT, placement_from_plan
from dreamshard.placement.registry import place
from dreamshard.placement.tasks import (
    Placement,
    PlacementTask,
    device_memory,
    placement_problem,
    shard_view,
)
from dreamshard.planners.dreamshard_planner import predicted_overall


@dataclass
class DeviceCheck:
    device: int
    tables: int
    memory_bytes: int
    torchrec_memory_bytes: int | None
    fwd_comp_ms: float
    comm_ms: float  # the backward all-to-all as the judge models it
    bwd_comp_ms: float


@dataclass
class PlanCheck:
    """What `check_plan` found (module docstring)."""

    task: str
    method: str
    num_devices: int
    memory_cap_bytes: int
    problem: str | None  # None: legal
    judge: str
    overall_ms: float
    dreamshard_ms: float | None
    dreamshard_candidate: str
    devices: list[DeviceCheck] = field(default_factory=list)
    torchrec_note: str = ""

    @property
    def legal(self) -> bool:
        return self.problem is None

    @property
    def ratio(self) -> float | None:
        """dreamshard's predicted overall over the checked plan's (below 1: ours is faster)."""
        return None if self.dreamshard_ms is None else self.dreamshard_ms / self.overall_ms

    def as_dict(self) -> dict:
        return asdict(self) | {"legal": self.legal, "dreamshard_ratio": self.ratio}


def check_plan(
    task: PlacementTask,
    placement: Placement,
    model=None,
    compare: bool = True,
    hardware: Hardware | str | None = None,
) -> PlanCheck:
    """The report on `placement` of `task` (module docstring). `model`: a cost network's view
    instead of the analytic model's (anything `resolve_model` takes); `compare`: False skips
    dreamshard's plan of the same tables; `hardware`: the hardware file the analytic model
    prices for and dreamshard plans for (None: cpu)."""
    analytic = SimulatedBackend(hardware=hardware)
    problem = placement_problem(task, placement) or sharding_problem(
        task.constraints, placement.splits
    )
    roomy = replace(task, memory_cap_bytes=2**62, constraints=None)  # costs ignore the caps
    shards, flat = shard_view(roomy, placement)
    ours = device_memory(task, placement)
    if model is not None:
        model = resolve_model(model)
        judge = "the model's cost network"
        per_device, overall = model.costnet.predict_ms(shards, flat)
        terms = np.asarray(per_device)[:, :3]
    else:
        judge = analytic_judge(analytic)
        cost = analytic.measure(shards, flat)
        overall = cost.overall
        terms = np.array([[d.fwd_comp, d.bwd_comm, d.bwd_comp] for d in cost.devices])
    torchrec_memory, note = torchrec_memory_per_device(task, placement)
    count = tables_per_device(shards, flat)
    devices = [
        DeviceCheck(
            d,
            int(count[d]),
            int(ours[d]),
            None if torchrec_memory is None else int(torchrec_memory[d]),
            float(terms[d, 0]),
            float(terms[d, 1]),
            float(terms[d, 2]),
        )
        for d in range(task.num_devices)
    ]
    mine, candidate = None, ""
    if compare:
        try:
            found = place(
                task,
                "dreamshard",
                model=model if model is not None else "shipped",
                hardware=analytic.hardware,
            )
        except DreamshardError as exc:  # no legal plan under these caps: said, not raised
            candidate = f"none: {exc}"
        else:
            candidate = found.candidate
            if model is not None:
                mine = predicted_overall(model, task, [found])[0]
            else:
                mine = analytic.measure(*shard_view(roomy, found)).overall
    return PlanCheck(
        task.name,
        placement.method,
        task.num_devices,
        task.memory_cap_bytes,
        problem,
        judge,
        float(overall),
        None if mine is None else float(mine),
        candidate,
        devices,
        note,
    )


def tables_per_device(shards: PlacementTask, flat: Placement) -> np.ndarray:
    """How many tables have a shard on each device (`shard_view`'s shards and placement): a
    table split over devices counts once on each, its shards on one device once there."""
    names = [t.shard.of if t.shard is not None else t.name for t in shards.tables]
    held = {(int(d), name) for d, name in zip(flat.devices, names)}
    return np.bincount([d for d, _ in held], minlength=shards.num_devices)


def torchrec_memory_per_device(task, placement) -> tuple[np.ndarray | None, str]:
    """Each device's bytes as TorchRec's planner counts the shards on it, or (None, why not)."""
    # TorchRec names modules after tables, so a name with a dot (a model's path) is renamed
    names = {t.name: f"t{i}" for i, t in enumerate(task.tables)}
    tables = tuple(replace(t, name=names[t.name]) for t in task.tables)
    splits = tuple(replace(s, table=names[s.table]) for s in placement.splits)
    try:
        from dreamshard.integrations.torchrec_judge import torchrec_sharding_options

        roomy = replace(task, tables=tables, memory_cap_bytes=2**62, constraints=None)
        options = torchrec_sharding_options(roomy, replace(placement, splits=splits))
    except (ImportError, DreamshardError) as exc:
        return None, f"TorchRec's memory estimate: not available ({exc})"
    used = np.zeros(task.num_devices, dtype=np.int64)
    for option in options:
        for shard in option.shards:
            used[shard.rank] += int(shard.storage.hbm) + int(shard.storage.ddr)
    return used, ""


def read_any_plan(path: str | Path, task: PlacementTask, module_path: str, data=None) -> Placement:
    """A plan file's placement of `task`, our JSON or the JSON form of a TorchRec ShardingPlan
    (its collection at `module_path`), not checked for legality (`check_plan` reports it).
    `data`: the file's content where the caller has read it already."""
    data = read_json(path, "plan file") if data is None else data
    if isinstance(data, dict) and data.get("format") == PLAN_FORMAT:
        return placement_from_plan(task, data, str(path), check=False)
    from dreamshard.integrations.plan_reading import placement_from_sharding
    from dreamshard.integrations.torchrec_export import table_shardings

    try:
        shardings = table_shardings(data, module_path)
    except DreamshardError as exc:
        if isinstance(data, dict) and data.get("format") == TORCHREC_PLAN_FORMAT:
            raise DreamshardError(f"{path}: {exc}") from None
        raise DreamshardError(
            f"{path}: neither a dreamshard plan ('format': {PLAN_FORMAT!r}) nor a TorchRec plan "
            f"({exc})"
        ) from None
    try:
        return placement_from_sharding(task, shardings, data.get("method") or "torchrec")
    except IllegalPlanError:
        raise
    except DreamshardError as exc:
        raise DreamshardError(f"{path}: {exc}") from None


def check_sharding_plan(module, plan, topology=None, model=None, **planner_options) -> PlanCheck:
    """`check_plan` for a live TorchRec `ShardingPlan` of `module`: the task as
    `DreamShardPlanner` sees the model (its tables and statistics, `topology`'s devices and
    memory after the reservation; `planner_options` go to it), the plan's placement of it,
    read as `dreamshard check` reads a plan file (`plan_reading`): IllegalPlanError for a plan
    that breaks the task before it can be placed (a table missing, a rank outside the devices,
    shards past a table's edge, overlapping or leaving a gap), DreamshardError for one that does
    not map to ours."""
    from dreamshard.integrations.dmp_planner import DreamShardPlanner
    from dreamshard.integrations.plan_reading import placement_from_sharding

    planner = DreamShardPlanner(topology, **planner_options)
    tables = planner.tables(module)
    task = planner.task(module, tables=tables)
    entries = {}
    for table in tables:
        module_plan = plan.plan.get(table.module_path)
        if module_plan is None or table.config_name not in module_plan:
            raise IllegalPlanError(f"table {table.table.name} is missing from the plan")
        entries[table.table.name] = module_plan[table.config_name]
    return check_plan(task, placement_from_sharding(task, entries, "torchrec"), model)
