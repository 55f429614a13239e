"""TorchRec's `EmbeddingShardingPlanner` as a planner here (`--method torchrec`).

Our tables become embedding-bag configs on the meta device, our task a topology of D GPUs with
our memory cap as HBM, and every table is constrained to the fused kernel and, with
`split="none"`, to table-wise sharding, so TorchRec solves the same problem as our planners.
With `split="auto"` it may also shard a table column-wise (into the most equal power-of-two
shards our shard model allows on D devices, `min_partition`) and row-wise (over all D ranks,
where its row blocks are our row ranges); its plan comes back as our placement with splits.
TorchRec is optional: this module imports it only when called (`make torchrec` installs it).

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
from dataclasses import dataclass, replace

from dreamshard.costs.comm import get_topology
from dreamshard.costs.hardware import Hardware, gpu_hardware
from dreamshard.errors import DreamshardError
from dreamshard.integrations.plan_reading import placement_from_sharding
from dreamshard.placement.constraints import sharding_problem
from dreamshard.placement.planner import BasePlanner, PlanOptions
from dreamshard.placement.splitting import SPLIT_MODES
from dreamshard.placement.tasks import Placement, PlacementTask, check_legal
from dreamshard.report import format_bytes
from dreamshard.tables.shards import max_column_parts, row_bounds
from dreamshard.tables.table import Table
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
    timeout: float | None = None  # TorchRec's own `timeout_seconds` (None: none)


def bag_configs(tables, precision: str) -> list:
    """TorchRec's `EmbeddingBagConfig` of each table, one feature each named after it, with
    weights of `precision` (fp16 or fp32)."""
    from torchrec import DataType, EmbeddingBagConfig

    data_type = getattr(DataType, DATA_TYPES[precision])
    return [
        EmbeddingBagConfig(
            name=t.name,
            embedding_dim=t.dim,
            num_embeddings=t.rows,
            feature_names=[t.name],
            data_type=data_type,
        )
        for t in tables
    ]


def torchrec_request(
    task: PlacementTask,
    reserve: bool = True,
    split: str = "none",
    topology: str | None = None,
    hardware: Hardware | None = None,
) -> TorchRecRequest:
    """Our task in TorchRec's terms (tables, D GPUs with our cap as HBM, the fused kernel;
    table-wise only, or with `split="auto"` also the column-/row-wise sharding that maps to
    our shards, `sharding_options`). `topology` (a `costs.comm` name) gives TorchRec's
    `Topology` its hosts and bandwidths; None: a GPU hardware file's links, else TorchRec's
    defaults. A GPU `hardware` file gives its HBM bandwidth and backward multiplier
    (`torchrec_compute`); None or `cpu` keeps TorchRec's defaults."""
    if topology is None and hardware is not None and hardware.is_gpu:
        topology = hardware.topology_name()
    import torch
    from torchrec import EmbeddingBagCollection
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel
    from torchrec.distributed.planner import ParameterConstraints, Topology

    configs = bag_configs(task.tables, task.precision)
    host_size = get_topology(topology).host_size(task.num_devices) if topology else 0
    constraints = {}
    whole = set(task.constraints.no_split) if task.constraints else set()
    asked = {n: (k, parts) for n, k, parts in task.constraints.sharding} if task.constraints else {}
    for t in task.tables:
        kind = "none" if t.name in whole else split  # --no-split: table-wise for TorchRec too
        types, min_partition = sharding_options(t, task.num_devices, kind, host_size)
        if t.name in asked:  # --sharding: that type alone, when it maps to our shards
            wanted, parts = asked[t.name]
            offered, min_partition = sharding_options(t, task.num_devices, "auto", host_size)
            if wanted not in offered:
                raise DreamshardError(
                    f"--sharding {t.name}={wanted}: TorchRec's planner can shard it only as "
                    f"{', '.join(offered)} in a plan that maps to ours"
                )
            types = [wanted]
            if parts:  # column_wise:PARTS: blocks of dim / PARTS columns
                min_partition = t.dim // parts
        constraints[t.name] = ParameterConstraints(
            sharding_types=types,
            # TorchRec's fused kernel, or its dense one for data-parallel (its only one there)
            compute_kernels=[
                EmbeddingComputeKernel.FUSED.value,
                EmbeddingComputeKernel.DENSE.value,
            ],
            pooling_factors=[t.pooling_factor],
            min_partition=min_partition,
        )
    with quiet_torchrec():
        module = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
        # "cuda" makes TorchRec plan HBM per device; planning itself runs fine on a CPU.
        topology = Topology(
            world_size=task.num_devices,
            compute_device="cuda",
            hbm_cap=task.memory_cap_bytes,
            **torchrec_links(topology, task.num_devices),
            **torchrec_compute(hardware),
        )
    # Each device's fused kernel here sees the whole batch for its tables; in TorchRec that batch
    # is the global one, world size x the per-rank batch the planner takes.
    return TorchRecRequest(module, topology, constraints, torchrec_batch_size(task), reserve)


def torchrec_batch_size(task: PlacementTask) -> int:
    """The per-rank batch TorchRec's planner takes for the task: the tables' batch (the whole
    batch a device's fused kernel sees here) over the world size, rounded up."""
    return max(1, -(-table_batch_size(task.tables, DEFAULT_BATCH) // task.num_devices))


def torchrec_links(topology: str | None, d: int) -> dict:
    """TorchRec `Topology` arguments for our topology `topology` on `d` devices: its devices per
    host and its bandwidths in bytes/ms (TorchRec models no latency). {} for None."""
    if topology is None:
        return {}
    links = get_topology(topology)
    size = links.host_size(d)
    network = links.network_gbps if size < d else links.bandwidth_gbps
    return {
        "local_world_size": size,
        "intra_host_bw": links.bandwidth_gbps * 1e9 / 1000,
        "inter_host_bw": network * 1e9 / 1000,
    }


def torchrec_compute(hardware: Hardware | None) -> dict:
    """TorchRec `Topology` arguments for a GPU hardware file's compute: the HBM bandwidth a TBE
    reaches (spec x efficiency, bytes/ms) and the backward multiplier. {} for None or cpu."""
    if hardware is None or not hardware.is_gpu:
        return {}
    return {
        "hbm_mem_bw": hardware.value("hbm_spec_gbps") * hardware.value("hbm_efficiency") * 1e6,
        "bwd_compute_multiplier": hardware.value("bwd_fwd_ratio"),
    }


def sharding_options(
    table: Table, num_devices: int, split: str, host_size: int = 0
) -> tuple[list[str], int | None]:
    """The sharding types TorchRec may use for `table`, and its column-wise shard width.

    TorchRec cuts a column-wise table into blocks of the smallest multiple-of-4 divisor of dim
    at least `min_partition` wide (default 128, so no table of dim <= 128 is ever split); we set
    it to dim / k, k the most column shards our shard model allows on D devices (a power of
    two, widths multiples of 4), which gives k equal shards. Its row-wise sharding spans all D
    ranks in blocks of ceil(rows / D) rows (`torchrec_row_bounds`), which are our row ranges
    only when D divides rows; other tables are not offered row-wise. Its table-row-wise sharding
    (offered on hosts of `host_size` < D devices) cuts blocks of ceil(rows / L) rows alike.
    Data-parallel is offered on more than one device.
    """
    types = ["table_wise"]
    if split == "none":
        return types, None
    parts = max_column_parts(table, num_devices)
    if parts > 1:
        types.append("column_wise")
    if 1 < num_devices <= table.rows and torchrec_row_bounds(table.rows, num_devices) == row_bounds(
        table.rows, num_devices
    ):
        types.append("row_wise")
    if 1 < host_size < num_devices and host_size <= table.rows:
        if torchrec_row_bounds(table.rows, host_size) == row_bounds(table.rows, host_size):
            types.append("table_row_wise")
    if num_devices > 1:
        types.append("data_parallel")
    return types, table.dim // parts if parts > 1 else None


def torchrec_row_bounds(rows: int, num_devices: int) -> list[tuple[int, int]]:
    """The row range of each rank in TorchRec's row-wise sharding (blocks of ceil(rows / D)
    rows, the last ranks' ranges short or empty), which its training bucketizes ids by
    (`torchrec.distributed.sharding_plan._calculate_rw_shard_sizes_and_offsets`)."""
    block = -(-rows // num_devices)
    return [(min(r * block, rows), min((r + 1) * block, rows)) for r in range(num_devices)]


def plan_with_torchrec(request: TorchRecRequest):
    """Run TorchRec's planner; its refusal becomes a DreamshardError saying why. With a
    `request.timeout`, TorchRec's own `timeout_seconds` (whole seconds, at least one): its
    proposers stop once that long has passed since its search began and it answers with the
    best plan found so far (its enumeration of every table's sharding options comes before and
    is not counted: 13 s of 428 tables on 64 devices with every sharding type, this host)."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
    from torchrec.distributed.planner.storage_reservations import (
        FixedPercentageStorageReservation,
    )
    from torchrec.distributed.planner.types import PlannerError

    sharders = [EmbeddingBagCollectionSharder()]
    # One enumerator for the planner and the rejection message: it keeps its last search space,
    # so saying why costs no second enumeration (minutes at 856 tables with every type).
    enumerator = EmbeddingEnumerator(request.topology, request.batch_size, request.constraints)
    with quiet_torchrec():
        planner = EmbeddingShardingPlanner(
            topology=request.topology,
            batch_size=request.batch_size,
            constraints=request.constraints,
            enumerator=enumerator,
            storage_reservation=None if request.reserve else FixedPercentageStorageReservation(0.0),
            debug=False,
            timeout_seconds=None if request.timeout is None else max(1, round(request.timeout)),
        )
        try:
            return planner.plan(request.module, sharders)
        except PlannerError as exc:
            raise DreamshardError(rejection_reason(request, sharders, exc, enumerator)) from None


def rejection_reason(
    request: TorchRecRequest, sharders: list, exc: Exception, enumerator=None
) -> str:
    """One line: what TorchRec kept back per device and what its tables need. `enumerator`: the
    planner's, whose last search space (every table's sharding options) is reused."""
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
    options = enumerator.last_stored_search_space if enumerator is not None else None
    if options is None:
        enumerator = EmbeddingEnumerator(request.topology, request.batch_size, request.constraints)
        options = enumerator.enumerate(request.module, sharders)
    least: dict[str, int] = {}  # each table's cheapest sharding option
    for option in options:
        hbm = option.total_storage.hbm
        least[option.name] = min(hbm, least.get(option.name, hbm))
    needs = list(least.values())
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


def torchrec_place(
    task: PlacementTask,
    seed: int = 0,
    reserve: bool = True,
    split: str = "none",
    topology: str | None = None,
    timeout: float | None = None,
    hardware: Hardware | None = None,
) -> Placement:
    """TorchRec's plan for the task, checked legal under our caps.

    `split="none"`: table-wise only. `split="auto"`: TorchRec may also shard tables column-wise
    and row-wise (`sharding_options`), and its plan comes back with our splits.
    `reserve=False` plans on the full cap (no HBM share, no KJT room kept back), the same memory
    our planners get. `topology`: the hosts and links TorchRec's `Topology` gets (None: its
    defaults). `timeout`: seconds TorchRec's proposers may search (`plan_with_torchrec`; None:
    until they are done). `hardware`: a GPU hardware file whose constants TorchRec's
    estimator prices with (None: its own). `seed` is unused: TorchRec's planner is
    deterministic.
    """
    if split not in SPLIT_MODES:
        raise DreamshardError(
            f"unknown split mode {split!r}; choose one of {', '.join(SPLIT_MODES)}"
        )
    require_torchrec()
    task.validate()
    request = replace(torchrec_request(task, reserve, split, topology, hardware), timeout=timeout)
    plan = plan_with_torchrec(request)
    placement = placement_from_sharding(task, plan.plan[""])
    check_legal(task, placement)
    return placement


def torchrec_column_place(task: PlacementTask) -> Placement:
    """TorchRec's planner on our cap without its reservation, allowed the sharding types
    `dreamshard --split auto` uses where every table fits a device: table- and column-wise
    (`torchrec_place(split="auto")` also offers row-wise)."""
    request = torchrec_request(task, reserve=False, split="auto")
    for constraint in request.constraints.values():
        constraint.sharding_types = [k for k in constraint.sharding_types if k != "row_wise"]
    plan = plan_with_torchrec(request)
    placement = placement_from_sharding(task, plan.plan[""], "torchrec_cw")
    check_legal(task, placement)
    return placement


class TorchRecMethod(BasePlanner):
    """`--method torchrec`: TorchRec decides its own splits under `split="auto"`, so this
    planner answers `place` whole rather than through `splits` and `place_tables`. A time
    budget (`options.time_budget`) is TorchRec's own `timeout_seconds` (`plan_with_torchrec`);
    without one TorchRec searches until its proposers are done, as it does by default."""

    name = "torchrec"

    def place(self, task: PlacementTask, options: PlanOptions) -> Placement:
        constraints = options.constraints if options.constraints is not None else task.constraints
        if constraints and (constraints.pins or constraints.together or constraints.apart):
            raise DreamshardError(
                "TorchRec's planner has no pin, together or apart constraints (its "
                "ParameterConstraints has none); drop --pin/--together/--apart or choose "
                "another --method"
            )
        if constraints:
            task = replace(task, constraints=constraints)
        placement = torchrec_place(
            task,
            options.seed,
            options.reserve,
            options.split,
            options.topology,
            options.time_budget,
            gpu_hardware(options.hardware),
        )
        problem = sharding_problem(task.constraints, placement.splits)
        if problem:
            raise DreamshardError(f"TorchRec's planner broke a constraint: {problem}")
        return placement

    def place_tables(self, task: PlacementTask, options: PlanOptions) -> Placement:
        return torchrec_place(
            task,
            options.seed,
            options.reserve,
            "none",
            options.topology,
            options.time_budget,
            gpu_hardware(options.hardware),
        )


TORCHREC = TorchRecMethod()
