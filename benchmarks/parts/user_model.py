"""A suite task as a TorchRec user hands it to a planner: its tables as one
`EmbeddingBagCollection` on the meta device, one rank's batch of the tables' traces as the
sample `KeyedJaggedTensor`, and TorchRec's default CPU `Topology` of the task's devices (128 GB
of DDR a rank: loose memory; the suites' own caps, 13-40 MiB a device, leave TorchRec's
planner, which counts each table's inputs and outputs too, no plan), TorchRec's default
reservation. `DreamShardPlanner` and TorchRec's planner (through `torchrec_reference`) plan the
same model, topology and batch; their plans are read back as placements of `user_task(task)`,
the task with the topology's memory, which the DMP judge trains.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dreamshard.errors import DreamshardError
from dreamshard.integrations.dmp_planner import DreamShardPlanner
from dreamshard.integrations.plan_reading import placement_from_sharding
from dreamshard.integrations.reference_plan import torchrec_reference
from dreamshard.integrations.torchrec_planner import bag_configs, quiet_torchrec
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.tables.traces import DEFAULT_BATCH, table_batch_size
from gpu_tasks.dmp_step import rank_batch


@dataclass
class UserModel:
    """What a user's planner call sees of a task."""

    task: PlacementTask
    module: object
    batch: object  # one rank's KeyedJaggedTensor
    topology: object
    sharders: list

    def planner(self, **options) -> DreamShardPlanner:
        return DreamShardPlanner(self.topology, batches=[self.batch], hardware="cpu", **options)

    def placement(self, plan, method: str) -> Placement:
        """A `ShardingPlan` of the module read back as a placement of the task."""
        with quiet_torchrec():  # its log line for each data-parallel table (no sharding spec)
            return placement_from_sharding(self.task, dict(plan.plan[""]), method)

    def placement_of(self, data: dict, method: str) -> Placement:
        """A plan in TorchRec's JSON form (one collection) read back as a placement."""
        from dreamshard.integrations.torchrec_export import table_shardings

        (module_path,) = data["plan"]
        with quiet_torchrec():
            return placement_from_sharding(self.task, table_shardings(data, module_path), method)

    def torchrec_planner_plan(self) -> Placement:
        """TorchRec's planner as the user calls it: the same topology, batch and default
        reservation, our pooling factors (what `DreamShardPlanner` tells it), no timeout."""
        from torchrec.distributed.planner import EmbeddingShardingPlanner

        planner = self.planner()
        tables = planner.tables(self.module)
        with quiet_torchrec():
            plan = EmbeddingShardingPlanner(
                topology=self.topology,
                batch_size=planner.batch_size,
                constraints=planner.torchrec_constraints(tables),
            ).plan(self.module, self.sharders)
        return self.placement(plan, "torchrec")

    def torchrec(self, budget_s: float) -> tuple[Placement, float]:
        """TorchRec's plan as `DreamShardPlanner` asks for it, and its seconds."""
        planner = self.planner()
        tables = planner.tables(self.module)
        found, why = torchrec_reference(
            planner, self.module, self.sharders, planner.task(self.module, tables=tables),
            tables, budget_s,
        )  # fmt: skip
        if found is None:
            raise DreamshardError(why)
        return self.placement(found.sharding_plan, "torchrec"), found.seconds


def user_task(task: PlacementTask) -> PlacementTask:
    """The task with the memory of TorchRec's default CPU topology, its tables as they are."""
    from torchrec.distributed.planner.constants import DDR_CAP

    return replace(task, memory_cap_bytes=DDR_CAP)


def user_model(task: PlacementTask) -> UserModel:
    """`task` (made a `user_task`) as a user's model, batch and topology."""
    import torch
    from torchrec import EmbeddingBagCollection
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import Topology

    with quiet_torchrec():
        module = EmbeddingBagCollection(
            tables=bag_configs(task.tables, task.precision), device=torch.device("meta")
        )
        topology = Topology(world_size=task.num_devices, compute_device="cpu")
    sharders = [EmbeddingBagCollectionSharder()]
    batch_size = table_batch_size(task.tables, DEFAULT_BATCH)  # rank 0's share, as DMP trains
    batch = rank_batch(task.tables, batch_size, 0, task.num_devices, torch.device("cpu"))
    return UserModel(user_task(task), module, batch, topology, sharders)
