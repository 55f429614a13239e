"""Our plans as TorchRec `ShardingPlan`s, and the JSON form of those plans (`--format torchrec`).

Every table becomes one table-wise `ParameterSharding` on the rank of its device: one shard
covering the whole table, fused kernel. The JSON form (docs/torchrec.md) is written without
torchrec installed; turning it into a `ShardingPlan` for `DistributedModelParallel` needs it.

    {"format": "torchrec-sharding-plan", "version": 1, "method": ..., "task": ...,
     "num_devices": D,
     "plan": {MODULE_PATH: {TABLE: {"sharding_type": "table_wise", "compute_kernel": "fused",
                                    "ranks": [d],
                                    "shards": [{"offsets": [0, 0], "sizes": [rows, dim],
                                                "placement": "rank:d/cuda:d"}]}}}}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dreamshard.errors import DreamshardError
from dreamshard.files import read_json, write_json_atomic
from dreamshard.placement.tasks import Placement, PlacementTask, check_legal
from dreamshard.planners.torchrec_planner import placement_from_sharding, require_torchrec

TORCHREC_PLAN_FORMAT = "torchrec-sharding-plan"
DEFAULT_MODULE_PATH = "embedding_bags"  # where the EmbeddingBagCollection sits in the model
SHARDING_KEYS = ("sharding_type", "compute_kernel", "ranks", "shards")


def torchrec_plan_dict(
    task: PlacementTask,
    placement: Placement,
    module_path: str = DEFAULT_MODULE_PATH,
    gpus_per_host: int | None = None,
) -> dict[str, Any]:
    """The JSON form of our placement as a table-wise TorchRec plan.

    Rank d is device d; its shard lives on `cuda:{d % gpus_per_host}` (default: one host).
    """
    check_legal(task, placement)
    per_host = gpus_per_host or task.num_devices
    tables = {
        table.name: {
            "sharding_type": "table_wise",
            "compute_kernel": "fused",
            "ranks": [int(d)],
            "shards": [
                {
                    "offsets": [0, 0],
                    "sizes": [table.rows, table.dim],
                    "placement": f"rank:{d}/cuda:{d % per_host}",
                }
            ],
        }
        for table, d in zip(task.tables, placement.devices)
    }
    return plan_header(placement.method, task.name, task.num_devices, {module_path: tables})


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
    """A TorchRec `ShardingPlan` from the JSON form (needs torchrec)."""
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
                sharding_spec=EnumerableShardingSpec(shards),
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
    task: PlacementTask, placement: Placement, module_path: str = DEFAULT_MODULE_PATH
):
    """Our placement as a TorchRec `ShardingPlan`, ready for `DistributedModelParallel`."""
    return sharding_plan_from_dict(torchrec_plan_dict(task, placement, module_path))


def placement_from_sharding_plan(
    task: PlacementTask, plan, module_path: str = DEFAULT_MODULE_PATH, method: str = ""
) -> Placement:
    """Our placement back from a table-wise `ShardingPlan`, checked legal for the task."""
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
) -> None:
    write_json_atomic(path, torchrec_plan_dict(task, placement, module_path))


def read_torchrec_plan(path: str | Path) -> dict[str, Any]:
    """The JSON form from a file, its layout checked."""
    data = read_json(path, "TorchRec plan file")
    try:
        return check_plan_dict(data)
    except DreamshardError as exc:
        raise DreamshardError(f"{path}: {exc}") from None


def check_plan_dict(data: Any) -> dict[str, Any]:
    """`data` itself when it has the layout above, else DreamshardError naming what is off."""
    if not isinstance(data, dict) or data.get("format") != TORCHREC_PLAN_FORMAT:
        raise DreamshardError(f"not a TorchRec plan: 'format' is not {TORCHREC_PLAN_FORMAT!r}")
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
            for shard in entry["shards"]:
                if not isinstance(shard, dict) or not {"offsets", "sizes", "placement"} <= set(
                    shard
                ):
                    raise DreamshardError(
                        f"table {name!r} has a shard without offsets, sizes and placement"
                    )
    return data
