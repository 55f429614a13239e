"""Our plans as TorchRec `ShardingPlan`s, and the JSON form of those plans (`--format torchrec`).

Every table becomes one `ParameterSharding` with the fused kernel: a whole table table-wise on
the rank of its device, a split table column-wise or row-wise with one shard per shard of ours
(`ranks`: their devices in shard order; offsets [0, c0] sizes [rows, c1 - c0] for a column
shard, offsets [r0, 0] sizes [r1 - r0, dim] for a row shard, `table_row_wise` for a row split
over the devices of one host); a data-parallel table is
`data_parallel` with the dense kernel (TorchRec's only one for it) on every rank and no shards
(no sharding spec: a copy on every rank, as TorchRec writes it). The JSON form (docs/torchrec.md)
is written without torchrec installed; turning it into a `ShardingPlan` for
`DistributedModelParallel` needs it.

    {"format": "torchrec-sharding-plan", "version": 1, "method": ..., "task": ...,
     "num_devices": D,
     "plan": {MODULE_PATH: {TABLE: {"sharding_type": "table_wise", "compute_kernel": "fused",
                                    "ranks": [d],
                                    "shards": [{"offsets": [0, 0], "sizes": [rows, dim],
                                                "placement": "rank:d/cuda:d"}]}}}}

DMP trains a row-wise table only in TorchRec's own layout: one shard per rank, shard r on rank
r, blocks of ceil(rows / D) rows (it routes ids by those blocks, whatever the plan says), so a
row split in any other layout is refused here rather than exported to run wrongly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dreamshard.errors import DreamshardError
from dreamshard.files import read_json, write_json_atomic
from dreamshard.integrations.plan_reading import (
    ShardExtent,
    TableSharding,
    placement_from_sharding,
    shard_rank,
)
from dreamshard.integrations.torchrec_planner import (
    quiet_torchrec,
    require_torchrec,
    torchrec_request,
    torchrec_row_bounds,
)
from dreamshard.placement.tasks import Placement, PlacementTask, check_legal, placement_task
from dreamshard.tables.table import Table

TORCHREC_PLAN_FORMAT = "torchrec-sharding-plan"
DEFAULT_MODULE_PATH = "embedding_bags"  # where the EmbeddingBagCollection sits in the model
SHARDING_KEYS = ("sharding_type", "compute_kernel", "ranks", "shards")
SHARDING_TYPES = {
    None: "table_wise",
    "column": "column_wise",
    "row": "row_wise",
    "replica": "data_parallel",
    "table_row": "table_row_wise",
}
INDEXED_DEVICES = ("cuda", "mtia")  # devices named with a local index ("cuda:1"); cpu is not


def torchrec_plan_dict(
    task: PlacementTask,
    placement: Placement,
    module_path: str = DEFAULT_MODULE_PATH,
    gpus_per_host: int | None = None,
    compute_device: str = "cuda",
) -> dict[str, Any]:
    """The JSON form of our placement as a TorchRec plan (table-, column- and row-wise).

    Rank d is device d; its shards live on `cuda:{d % gpus_per_host}` (default: one host), or on
    `compute_device` itself when it has no local index (`rank:d/cpu` for DMP on a CPU).
    """
    check_legal(task, placement)
    per_host = gpus_per_host or task.num_devices
    kinds = {s.table: s.kind for s in placement.splits}
    grouped: dict[str, list[tuple[Table, int]]] = {}  # table -> its shards and their devices
    for shard, d in zip(placement_task(task, placement).tables, placement.devices):
        grouped.setdefault(shard.shard.of if shard.shard else shard.name, []).append((shard, d))
    tables = {}
    for name, shards in grouped.items():
        kind = kinds.get(name)
        if kind in ("row", "table_row"):
            check_row_layout(name, shards, task.num_devices, kind)
        if kind == "replica":  # replica r on rank r (legal placements put one on each)
            tables[name] = {
                "sharding_type": "data_parallel",
                "compute_kernel": "dense",
                "ranks": sorted(int(d) for _, d in shards),
                "shards": [],
            }
            continue
        tables[name] = {
            "sharding_type": SHARDING_TYPES[kind],
            "compute_kernel": "fused",
            "ranks": [int(d) for _, d in shards],
            "shards": [
                {
                    **shard_extent(shard),
                    "placement": shard_placement(int(d), compute_device, per_host),
                }
                for shard, d in shards
            ],
        }
    return plan_header(placement.method, task.name, task.num_devices, {module_path: tables})


def shard_extent(shard: Table) -> dict[str, list[int]]:
    """A shard's offsets and sizes in its table's weight [rows, dim]."""
    cut = shard.shard
    if cut is None:
        offsets = [0, 0]
    else:
        offsets = [cut.start, 0] if cut.kind in ("row", "table_row") else [0, cut.start]
    return {"offsets": offsets, "sizes": [shard.rows, shard.dim]}


def shard_placement(device: int, compute_device: str, per_host: int) -> str:
    """Where rank `device` keeps its shards: `rank:d/cuda:i` (i its index on its host), or
    `rank:d/cpu`."""
    if compute_device in INDEXED_DEVICES:
        return f"rank:{device}/{compute_device}:{device % per_host}"
    return f"rank:{device}/{compute_device}"


def check_row_layout(
    name: str, shards: list[tuple[Table, int]], num_devices: int, kind: str = "row"
) -> None:
    """DreamshardError unless a row split is in the layout DMP trains (module docstring): over
    all ranks, or (table-row-wise) over the ranks of one host, shard r on its r-th rank."""
    ranges = [(s.shard.start, s.shard.stop) for s, _ in shards]
    devices = [int(d) for _, d in shards]
    rows = shards[0][0].shard.extent
    over = len(shards) if kind == "table_row" else num_devices
    expected = torchrec_row_bounds(rows, over)
    first = devices[0] if kind == "table_row" else 0
    if ranges != expected or devices != list(range(first, first + over)):
        raise DreamshardError(
            f"table {name}: its row shards {', '.join(f'{a}:{b}' for a, b in ranges)} on devices "
            f"{devices} are not a layout TorchRec trains row-wise (one shard per rank in rank "
            f"order, rows {', '.join(f'{a}:{b}' for a, b in expected)}): DMP would not train it "
            "as planned, so the plan is not exported; more memory per device or more devices "
            "let it be split column-wise or kept whole"
        )


def plan_header(method: str, task_name: str, num_devices: int, plan: dict) -> dict[str, Any]:
    return {
        "format": TORCHREC_PLAN_FORMAT,
        "version": 1,
        "method": method,
        "task": task_name,
        "num_devices": num_devices,
        "plan": plan,
    }


def sharding_plan_from_dict(data: dict[str, Any]):
    """A TorchRec `ShardingPlan` from the JSON form (needs torchrec). An entry without shards
    (data-parallel: a copy on every rank) gets no sharding spec, as TorchRec writes it."""
    require_torchrec()
    from torch.distributed._shard.metadata import ShardMetadata
    from torch.distributed._shard.sharding_spec import EnumerableShardingSpec
    from torchrec.distributed.types import (
        EmbeddingModuleShardingPlan,
        ParameterSharding,
        ShardingPlan,
    )

    modules = {}
    for module_path, tables in check_plan_dict(data)["plan"].items():
        module_plan = EmbeddingModuleShardingPlan()
        for name, entry in tables.items():
            shards = [
                ShardMetadata(list(s["offsets"]), list(s["sizes"]), s["placement"])
                for s in entry["shards"]
            ]
            module_plan[name] = ParameterSharding(
                sharding_type=entry["sharding_type"],
                compute_kernel=entry["compute_kernel"],
                ranks=list(entry["ranks"]),
                sharding_spec=EnumerableShardingSpec(shards) if shards else None,
            )
        modules[module_path] = module_plan
    return ShardingPlan(modules)


def sharding_plan_to_dict(
    plan, method: str = "", task_name: str = "", num_devices: int = 0
) -> dict[str, Any]:
    """The JSON form of a TorchRec `ShardingPlan` (any sharding type; shards as listed)."""
    modules = {}
    for module_path, module_plan in plan.plan.items():
        modules[module_path] = {
            name: {
                "sharding_type": sharding.sharding_type,
                "compute_kernel": sharding.compute_kernel,
                "ranks": [int(r) for r in sharding.ranks or []],
                "shards": [
                    {
                        "offsets": [int(x) for x in shard.shard_offsets],
                        "sizes": [int(x) for x in shard.shard_sizes],
                        "placement": str(shard.placement),
                    }
                    for shard in (sharding.sharding_spec.shards if sharding.sharding_spec else [])
                ],
            }
            for name, sharding in module_plan.items()
        }
    return plan_header(method, task_name, num_devices, modules)


def sharding_plan(
    task: PlacementTask,
    placement: Placement,
    module_path: str = DEFAULT_MODULE_PATH,
    compute_device: str = "cuda",
):
    """Our placement as a TorchRec `ShardingPlan`, ready for `DistributedModelParallel`
    (`compute_device="cpu"` for DMP on CPUs)."""
    data = torchrec_plan_dict(task, placement, module_path, compute_device=compute_device)
    return sharding_plan_from_dict(data)


def placement_from_sharding_plan(
    task: PlacementTask, plan, module_path: str = DEFAULT_MODULE_PATH, method: str = ""
) -> Placement:
    """Our placement back from a `ShardingPlan`, checked legal for the task: table-wise tables
    whole, column-wise and row-wise ones as our splits (DreamshardError naming a table whose
    shards are not ones we cut)."""
    if module_path not in plan.plan:
        raise DreamshardError(
            f"the TorchRec plan has no module {module_path!r}; it has {sorted(plan.plan)}"
        )
    placement = placement_from_sharding(task, plan.plan[module_path], method)
    check_legal(task, placement)
    return placement


def write_torchrec_plan(
    task: PlacementTask,
    placement: Placement,
    path: str | Path,
    module_path: str = DEFAULT_MODULE_PATH,
    compute_device: str = "cuda",
    reference: dict | None = None,
) -> None:
    """The plan's JSON form; `reference`: the reference rule's verdict (which plan was kept,
    against which reference, and why), recorded beside the plan."""
    data = torchrec_plan_dict(task, placement, module_path, compute_device=compute_device)
    if reference is not None:
        data["reference"] = reference
    write_json_atomic(path, data)


def read_torchrec_plan(path: str | Path) -> dict[str, Any]:
    """The JSON form from a file, its layout checked."""
    data = read_json(path, "TorchRec plan file")
    try:
        return check_plan_dict(data)
    except DreamshardError as exc:
        raise DreamshardError(f"{path}: {exc}") from None


def check_plan_dict(data: Any) -> dict[str, Any]:
    """`data` itself when it has the layout above with its JSON types (counts and offsets
    integers, names strings), else DreamshardError naming what is off."""
    if not isinstance(data, dict) or data.get("format") != TORCHREC_PLAN_FORMAT:
        raise DreamshardError(f"not a TorchRec plan: 'format' is not {TORCHREC_PLAN_FORMAT!r}")
    devices = data.get("num_devices", 0)
    if not is_int(devices) or devices < 0:
        raise DreamshardError(f"'num_devices' is {devices!r}, not a device count")
    modules = data.get("plan")
    if not isinstance(modules, dict):
        raise DreamshardError("the TorchRec plan has no 'plan' object")
    for module_path, tables in modules.items():
        if not isinstance(tables, dict):
            raise DreamshardError(f"module {module_path!r} is not an object of tables")
        for name, entry in tables.items():
            missing = [k for k in SHARDING_KEYS if not isinstance(entry, dict) or k not in entry]
            if missing:
                raise DreamshardError(f"table {name!r} has no {missing[0]!r}")
            check_entry_types(name, entry)
    return data


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_entry_types(name: str, entry: dict) -> None:
    """DreamshardError naming the first field of a table's entry with the wrong JSON type."""
    for key in ("sharding_type", "compute_kernel"):
        if not isinstance(entry[key], str):
            raise DreamshardError(f"table {name!r}: {key} {entry[key]!r} is not a string")
    ranks = entry["ranks"]
    if not isinstance(ranks, list) or not all(is_int(r) for r in ranks):
        raise DreamshardError(f"table {name!r}: ranks {ranks!r} is not a list of integers")
    if not isinstance(entry["shards"], list):
        raise DreamshardError(f"table {name!r}: shards {entry['shards']!r} is not a list")
    for shard in entry["shards"]:
        if not isinstance(shard, dict) or not {"offsets", "sizes", "placement"} <= set(shard):
            raise DreamshardError(
                f"table {name!r} has a shard without offsets, sizes and placement"
            )
        for key in ("offsets", "sizes"):
            pair = shard[key]
            if not isinstance(pair, list) or len(pair) != 2 or not all(is_int(x) for x in pair):
                raise DreamshardError(
                    f"table {name!r}: a shard's {key} {pair!r} is not two integers (rows, columns)"
                )
        if not isinstance(shard["placement"], str):
            raise DreamshardError(
                f"table {name!r}: a shard's placement {shard['placement']!r} is not a string"
            )


def table_shardings(data: dict[str, Any], module_path: str) -> dict[str, TableSharding]:
    """The JSON form's tables of the collection at `module_path`, as `TableSharding`s for
    `plan_reading.placement_from_sharding` (no torchrec needed); DreamshardError for a layout
    or a placement that is off, or a module the plan does not have."""
    modules = check_plan_dict(data)["plan"]
    if module_path not in modules:
        raise DreamshardError(
            f"the TorchRec plan has no module {module_path!r}; it has {sorted(modules)} "
            "(--module-path)"
        )
    return {
        name: TableSharding(
            entry["sharding_type"],
            tuple(entry["ranks"]),
            tuple(
                ShardExtent(
                    tuple(shard["offsets"]),
                    tuple(shard["sizes"]),
                    shard_rank(name, shard["placement"]),
                )
                for shard in entry["shards"]
            ),
        )
        for name, entry in modules[module_path].items()
    }


def torchrec_default_plan(task: PlacementTask, device: str, module_path: str) -> dict:
    """TorchRec's plan with its defaults, in its JSON form, for a collection at `module_path`.

    Its own topology for the device kind we train on (its default memory, not our cap), its
    storage reservation, every sharding type and kernel it offers; only the pooling factors
    (statistics, not constraints) and the per-rank batch come from the task.
    """
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import (
        EmbeddingShardingPlanner,
        ParameterConstraints,
        Topology,
    )

    request = torchrec_request(task)
    constraints = {
        t.name: ParameterConstraints(pooling_factors=[t.pooling_factor]) for t in task.tables
    }
    with quiet_torchrec():
        topology = Topology(world_size=task.num_devices, compute_device=device)
        planner = EmbeddingShardingPlanner(
            topology=topology, batch_size=request.batch_size, constraints=constraints
        )
        plan = planner.plan(request.module, [EmbeddingBagCollectionSharder()])
    data = sharding_plan_to_dict(plan, "torchrec_default", task.name, task.num_devices)
    data["plan"] = {module_path: data["plan"][""]}
    return data
