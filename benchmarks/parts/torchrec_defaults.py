"""TorchRec's planner as a user calls it, for `benchmarks/torchrec.py`: its defaults (its
estimators for the device kind the step trains on, every sharding type and kernel), told the
devices' memory, the tables' pooling factors and the per-rank batch, its plan read back as ours.

Its storage reservation is off, as for every other arm of the study: on the CPU suites' caps
(tens of MiB a device) its 15% and 20 batches of inputs kept back leave no room for any table.
"""

from __future__ import annotations

from dreamshard.errors import DreamshardError
from dreamshard.integrations.plan_reading import placement_from_sharding
from dreamshard.integrations.torchrec_planner import quiet_torchrec, torchrec_request
from dreamshard.placement.tasks import PlacementTask, placement_problem

DEFAULTS = "torchrec defaults"  # the arm's name


def torchrec_defaults(task: PlacementTask, device: str):
    """TorchRec's planner with its defaults but no reservation, given the devices' memory (our
    cap, as HBM on GPUs and as DDR on CPUs), the pooling factors and the per-rank batch; its plan
    as our placement (a data-parallel table as a replica on every device) and the sharding types
    it chose. DreamshardError where it refuses the task or its plan is not one of ours."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import (
        EmbeddingShardingPlanner,
        ParameterConstraints,
        Topology,
    )
    from torchrec.distributed.planner.storage_reservations import (
        FixedPercentageStorageReservation as Reservation,
    )
    from torchrec.distributed.planner.types import PlannerError

    request = torchrec_request(task)  # the module and the per-rank batch
    memory = {("hbm_cap" if device == "cuda" else "ddr_cap"): task.memory_cap_bytes}
    factors = {
        t.name: ParameterConstraints(pooling_factors=[t.pooling_factor]) for t in task.tables
    }
    with quiet_torchrec():
        topology = Topology(world_size=task.num_devices, compute_device=device, **memory)
        planner = EmbeddingShardingPlanner(
            topology, request.batch_size, storage_reservation=Reservation(0.0), constraints=factors
        )
        try:
            plan = planner.plan(request.module, [EmbeddingBagCollectionSharder()])
        except PlannerError as exc:
            raise DreamshardError(f"TorchRec's planner: {str(exc).splitlines()[0]}") from None
    placement = placement_from_sharding(task, plan.plan[""], DEFAULTS)
    problem = placement_problem(task, placement)
    if problem:
        raise DreamshardError(f"TorchRec's default plan breaks our task: {problem}")
    kinds = sorted({s.sharding_type for s in plan.plan[""].values()})
    return placement, {"torchrec types": kinds}
