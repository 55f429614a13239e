"""TorchRec's planner, and the perf it reported for its own plan: each rank's sum of its best
plan's shards' `Perf.total`, as its stats table prints it, read through TorchRec's own `Stats`
hook (a recorder in `EmbeddingShardingPlanner(stats=...)`), never re-rated by our code. The
`units` study sets it beside our `torchrec-estimator` judge of the same plan."""

from __future__ import annotations

import logging

from dreamshard.costs.hardware import Hardware
from dreamshard.errors import DreamshardError
from dreamshard.integrations.plan_reading import placement_from_sharding
from dreamshard.integrations.torchrec_planner import quiet_torchrec, torchrec_request
from dreamshard.placement.tasks import Placement, PlacementTask, check_legal


class PerfRecorder:
    """A TorchRec `Stats`: keeps the per-rank perf of the best plan the planner logs."""

    def __init__(self, world_size: int) -> None:
        self.ranks = [0.0] * world_size

    def log(
        self,
        sharding_plan,
        topology,
        batch_size,
        storage_reservation,
        num_proposals,
        num_plans,
        run_time,
        best_plan,
        *args,
        **kwargs,
    ) -> None:  # noqa: ARG002
        for option in best_plan:
            for shard in option.shards:
                self.ranks[shard.rank] += shard.perf.total


def torchrec_reported_place(
    task: PlacementTask, hardware: Hardware, seconds: float, forced: dict | None = None
) -> tuple[Placement, dict]:
    """TorchRec's planner with every sharding type that maps to ours, no reservation, the
    hardware file's constants and links, `seconds` its own timeout; `forced`: {table: type}.
    Returns its plan as our placement and {"reported_ms": its slowest rank's perf}."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner
    from torchrec.distributed.planner.storage_reservations import (
        FixedPercentageStorageReservation,
    )
    from torchrec.distributed.planner.types import PlannerError

    request = torchrec_request(task, reserve=False, split="auto", hardware=hardware)
    for name, kind in (forced or {}).items():
        request.constraints[name].sharding_types = [kind]
    recorder = PerfRecorder(task.num_devices)
    logging.disable(logging.WARNING)  # its root-logger line for each table it did not shard
    with quiet_torchrec():
        planner = EmbeddingShardingPlanner(
            topology=request.topology,
            batch_size=request.batch_size,
            constraints=request.constraints,
            storage_reservation=FixedPercentageStorageReservation(0.0),
            stats=[recorder],
            timeout_seconds=max(1, round(seconds)),
        )
        try:
            plan = planner.plan(request.module, [EmbeddingBagCollectionSharder()])
        except PlannerError as exc:  # the runner records it as the arm declining
            raise DreamshardError(f"TorchRec's planner found no plan: {exc}") from None
        finally:
            logging.disable(logging.NOTSET)
    placement = placement_from_sharding(task, plan.plan[""])
    check_legal(task, placement)
    return placement, {"reported_ms": max(recorder.ranks), "reported_ranks": recorder.ranks}
