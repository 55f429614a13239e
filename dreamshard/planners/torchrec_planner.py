"""TorchRec's `EmbeddingShardingPlanner` as a planner here (`--method torchrec`), table-wise only.

Our tables become embedding-bag configs on the meta device, our task a topology of D GPUs with
our memory cap as HBM, and every table is constrained to table-wise sharding with the fused
kernel, so TorchRec solves the same problem as our planners. TorchRec is optional: this module
imports it only when called (`make torchrec` installs it).

TorchRec keeps memory back that our planners do not: by default 15% of each device's HBM, plus
room for 20 copies of a rank's input batch (its KJT reservation), plus each table's input and
pooled output on top of its weights (and optimizer state when an optimizer is fused in, none
for the plain SGD we measure). A task our planners accept may therefore be one TorchRec
rejects; it then raises DreamshardError saying so, rather than falling back to anything else.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

from dreamshard.errors import DreamshardError
from dreamshard.placement.tasks import Placement, PlacementTask, check_legal
from dreamshard.report import format_bytes
from dreamshard.tables.traces import DEFAULT_BATCH, table_batch_size

INSTALL_HINT = (
    "torchrec is not installed: run `make torchrec`, or `pip install tensordict==0.15.3 "
    "torchmetrics==1.0.3 pyre-extensions==0.0.32 tqdm==4.70.1` then "
    "`pip install --no-deps torchrec==1.8.0` (a plain install pulls a CUDA fbgemm)"
)
RESERVED_FRACTION = 0.15  # TorchRec's default HBM share kept back (HeuristicalStorageReservation)
KJT_COPIES = 20  # its KJT reservation: 2 pipelined batches x 10 internal copies
KJT_BYTES_PER_LOOKUP = 8  # int64 ids
DATA_TYPES = {"fp16": "FP16", "fp32": "FP32"}


def require_torchrec() -> None:
    """Raise the one-line install hint when torchrec cannot be imported."""
    try:
        import torchrec  # noqa: F401
    except ImportError:
        raise DreamshardError(INSTALL_HINT) from None


@contextlib.contextmanager
def quiet_torchrec() -> Iterator[None]:
    """Silence TorchRec's dry-run warnings (direct Topology, heuristical reservation)."""
    logger = logging.getLogger("torchrec")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


@dataclass(frozen=True)
class TorchRecRequest:
    """What TorchRec is asked: module, topology, constraints, batch size and reservation."""

    module: object  # an EmbeddingBagCollection on the meta device
    topology: object
    constraints: dict
    batch_size: int
    reserve: bool


def torchrec_request(task: PlacementTask, reserve: bool = True) -> TorchRecRequest:
    """Our task in TorchRec's terms (tables, D GPUs with our cap as HBM, table-wise fused)."""
    import torch
    from torchrec import DataType, EmbeddingBagCollection, EmbeddingBagConfig
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel
    from torchrec.distributed.planner import ParameterConstraints, Topology
    from torchrec.distributed.types import ShardingType

    data_type = getattr(DataType, DATA_TYPES[task.precision])
    configs = [
        EmbeddingBagConfig(
            name=t.name,
            embedding_dim=t.dim,
            num_embeddings=t.rows,
            feature_names=[t.name],
            data_type=data_type,
        )
        for t in task.tables
    ]
    constraints = {
        t.name: ParameterConstraints(
            sharding_types=[ShardingType.TABLE_WISE.value],
            compute_kernels=[EmbeddingComputeKernel.FUSED.value],
            pooling_factors=[t.pooling_factor],
        )
        for t in task.tables
    }
    with quiet_torchrec():
        module = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
        # "cuda" makes TorchRec plan HBM per device; planning itself runs fine on a CPU.
        topology = Topology(
            world_size=task.num_devices, compute_device="cuda", hbm_cap=task.memory_cap_bytes
        )
    # Each device's fused kernel here sees the whole batch for its tables; in TorchRec that batch
    # is the global one, world size x the per-rank batch the planner takes.
    batch_size = max(1, -(-table_batch_size(task.tables, DEFAULT_BATCH) // task.num_devices))
    return TorchRecRequest(module, topology, constraints, batch_size, reserve)


def plan_with_torchrec(request: TorchRecRequest):
    """Run TorchRec's planner; its refusal becomes a DreamshardError saying why."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner
    from torchrec.distributed.planner.storage_reservations import (
        FixedPercentageStorageReservation,
    )
    from torchrec.distributed.planner.types import PlannerError

    sharders = [EmbeddingBagCollectionSharder()]
    with quiet_torchrec():
        planner = EmbeddingShardingPlanner(
            topology=request.topology,
            batch_size=request.batch_size,
            constraints=request.constraints,
            storage_reservation=None if request.reserve else FixedPercentageStorageReservation(0.0),
            debug=False,
        )
        try:
            return planner.plan(request.module, sharders)
        except PlannerError as exc:
            raise DreamshardError(rejection_reason(request, sharders, exc)) from None


def rejection_reason(request: TorchRecRequest, sharders: list, exc: Exception) -> str:
    """One line: what TorchRec kept back per device and what its tables need."""
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator

    cap = request.topology.devices[0].storage.hbm
    left = cap
    kept = "no reservation"
    if request.reserve:
        kjt = kjt_reserved_bytes(request)
        left = int((1 - RESERVED_FRACTION) * cap) - kjt
        kept = (
            f"{RESERVED_FRACTION:.0%} of it and {format_bytes(kjt)} for {KJT_COPIES} copies of "
            f"a per-device batch of {request.batch_size} inputs kept back"
        )
    enumerator = EmbeddingEnumerator(request.topology, request.batch_size, request.constraints)
    needs = [o.total_storage.hbm for o in enumerator.enumerate(request.module, sharders)]
    kind = getattr(getattr(exc, "error_type", None), "value", "rejected")
    return (
        f"torchrec's planner rejects this task ({kind}): each of the "
        f"{request.topology.world_size} devices has {format_bytes(cap)} with {kept}, leaving "
        f"{format_bytes(max(left, 0))}, while its tables need {format_bytes(sum(needs))} in all "
        f"(largest {format_bytes(max(needs))}), counting each table's inputs and pooled outputs "
        "beside its weights; raise --mem-gb or the device count, or use another method"
    )


def kjt_reserved_bytes(request: TorchRecRequest) -> int:
    """TorchRec's per-device room for input batches (as HeuristicalStorageReservation counts)."""
    lookups = sum(c.pooling_factors[0] for c in request.constraints.values()) * request.batch_size
    return int(lookups * KJT_BYTES_PER_LOOKUP) * KJT_COPIES


def placement_from_sharding(
    task: PlacementTask, module_plan, method: str = "torchrec"
) -> Placement:
    """Our placement from a table-wise module plan ({table name: ParameterSharding})."""
    devices = []
    for table in task.tables:
        sharding = module_plan.get(table.name)
        if sharding is None:
            raise DreamshardError(f"the TorchRec plan has no entry for table {table.name}")
        if sharding.sharding_type != "table_wise" or len(sharding.ranks or []) != 1:
            raise DreamshardError(
                f"table {table.name} is sharded {sharding.sharding_type} on ranks "
                f"{sharding.ranks}; only table-wise plans (one rank per table) map to ours"
            )
        devices.append(int(sharding.ranks[0]))
    return Placement(tuple(devices), method=method)


def torchrec_place(task: PlacementTask, seed: int = 0, reserve: bool = True) -> Placement:
    """TorchRec's table-wise plan for the task, checked legal under our caps.

    `reserve=False` plans on the full cap (no HBM share, no KJT room kept back), the same memory
    our planners get. `seed` is unused: TorchRec's planner is deterministic.
    """
    require_torchrec()
    task.validate()
    plan = plan_with_torchrec(torchrec_request(task, reserve))
    placement = placement_from_sharding(task, plan.plan[""])
    check_legal(task, placement)
    return placement
