"""TorchRec's own judge of a plan: any placement of ours rated by TorchRec's perf model.

Each shard of our plan becomes the `ShardingOption` shard TorchRec's `EmbeddingEnumerator` makes
for it (table-wise for a whole table, column-wise for our column shards, row-wise for a row split
over all ranks, data-parallel with the dense kernel for our replicas: a whole copy per rank, its
perf TorchRec's gradient all-reduce and lookups of the rank's own batch), rated by
`EmbeddingPerfEstimator`, the estimator `EmbeddingShardingPlanner` uses by default, on the GPU
topology `torchrec_request` builds (`compute_device="cuda"`, so its GPU model applies; it runs on
a CPU). A shard's `Perf.total` is TorchRec's forward and backward compute (bytes its TBE model
reads and writes over HBM bandwidth, with its kernel factors and narrow-dim penalties), forward
and backward comms (the pooled outputs' all-to-all, or a row-wise table's reduce-scatter, over
the topology's bandwidths) and prefetch compute (nil for the fused HBM kernel); the input
all-to-all it estimates is not in the total. A rank's perf is the sum over its shards, and a
plan's cost the largest, in ms: what the "Perf" column of TorchRec's planner stats table and its
`NoopPerfModel` report. It is TorchRec's model with its default hardware constants, not a
measurement.

TorchRec cuts a row-wise table into one block of ceil(rows / D) rows per rank, block r on rank r,
so only a row split over all D devices in that order can be rated; another layout raises
DreamshardError naming the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from dreamshard.costs.hardware import Hardware, known_hardware
from dreamshard.costs.types import DeviceCost, PlacementCost
from dreamshard.errors import DreamshardError
from dreamshard.integrations.torchrec_export import SHARDING_TYPES, torchrec_plan_dict
from dreamshard.integrations.torchrec_planner import (
    quiet_torchrec,
    require_torchrec,
    torchrec_batch_size,
    torchrec_request,
)
from dreamshard.placement.tasks import Placement, PlacementTask, check_legal
from dreamshard.tables.shards import Split


def torchrec_judge(
    task: PlacementTask,
    placement: Placement,
    topology: str | None = None,
    batch_size: int | None = None,
    hardware: Hardware | None = None,
) -> float:
    """The plan's cost under TorchRec's estimator: its slowest rank's total perf (ms)."""
    return max(torchrec_rank_perfs(task, placement, topology, batch_size, hardware))


def torchrec_rank_perfs(
    task: PlacementTask,
    placement: Placement,
    topology: str | None = None,
    batch_size: int | None = None,
    hardware: Hardware | None = None,
) -> list[float]:
    """Each rank's total perf (ms) under TorchRec's estimator: the sum of `Perf.total` over the
    shards our placement puts on it (0 on a rank with none).

    `topology`: a `costs.comm` name giving TorchRec's `Topology` its hosts and bandwidths (None:
    TorchRec's defaults); `batch_size`: the per-rank batch TorchRec's planner takes (None: the
    one `torchrec_request` derives from the tables); `hardware`: a GPU hardware file whose
    constants TorchRec's `Topology` gets (`torchrec_planner.torchrec_compute`; None: its own).
    """
    return [
        sum(terms) for terms in torchrec_rank_terms(task, placement, topology, batch_size, hardware)
    ]


def torchrec_rank_terms(
    task: PlacementTask,
    placement: Placement,
    topology: str | None = None,
    batch_size: int | None = None,
    hardware: Hardware | None = None,
) -> list[tuple[float, float, float, float]]:
    """Each rank's (fwd_comp, fwd_comm, bwd_comm, bwd_comp) in ms under TorchRec's estimator,
    summed over the shards our placement puts on it: its `Perf` fields fwd_compute (with
    prefetch_compute, nil for the fused HBM kernel), fwd_comms, bwd_comms, bwd_compute."""
    terms = [[0.0] * 4 for _ in range(task.num_devices)]
    options = torchrec_sharding_options(task, placement, topology, batch_size, hardware)
    for option in options:
        for shard in option.shards:
            perf = shard.perf
            for k, value in enumerate(
                (
                    perf.fwd_compute + perf.prefetch_compute,
                    perf.fwd_comms,
                    perf.bwd_comms,
                    perf.bwd_compute,
                )
            ):
                terms[shard.rank][k] += value
    return [tuple(t) for t in terms]


def torchrec_sharding_options(
    task: PlacementTask,
    placement: Placement,
    topology: str | None = None,
    batch_size: int | None = None,
    hardware: Hardware | None = None,
) -> list:
    """Our plan in the form TorchRec's planner holds its best plan: one `ShardingOption` per
    table, its shards' perf estimated and their ranks set to our devices."""
    require_torchrec()
    task.validate()
    check_legal(task, placement)
    try:  # refuses row splits in a layout TorchRec's row-wise sharding has not
        tables = torchrec_plan_dict(task, placement, module_path="")["plan"][""]
    except DreamshardError as exc:
        raise DreamshardError(f"TorchRec's estimator cannot rate this plan: {exc}") from None
    enumerated = enumerated_options(task, placement.splits, topology, batch_size, hardware)
    shapes = {t.name: [t.rows, t.dim] for t in task.tables}
    plan = []
    for name, entry in tables.items():
        if entry["sharding_type"] == "data_parallel":  # a whole copy on each of its ranks
            entry = {
                **entry,
                "shards": [{"offsets": [0, 0], "sizes": shapes[name]}] * len(entry["ranks"]),
            }
        option = matching_option(name, entry, enumerated.get(name, []))
        for shard, rank in zip(option.shards, entry["ranks"]):
            shard.rank = rank
        plan.append(option)
    return plan


def enumerated_options(
    task: PlacementTask,
    splits: tuple[Split, ...],
    topology: str | None,
    batch_size: int | None,
    hardware: Hardware | None = None,
) -> dict[str, list]:
    """TorchRec's enumerated sharding options of each table, their perf and storage estimated,
    each table constrained to the sharding type of our plan (and a column split's width)."""
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
    from torchrec.distributed.planner.shard_estimators import (
        EmbeddingPerfEstimator,
        EmbeddingStorageEstimator,
    )

    request = torchrec_request(task, reserve=False, topology=topology, hardware=hardware)
    by_table = {s.table: s for s in splits}
    constraints = {}
    for table in task.tables:
        split = by_table.get(table.name)
        kind = split.kind if split else None
        constraints[table.name] = replace(
            request.constraints[table.name],
            sharding_types=[SHARDING_TYPES[kind]],
            # TorchRec's column blocks: the smallest multiple-of-4 divisor of dim >= this width
            min_partition=table.dim // split.parts if kind == "column" else None,
            # TorchRec runs data-parallel tables with its dense kernel only
            compute_kernels=[EmbeddingComputeKernel.DENSE.value]
            if kind == "replica"
            else request.constraints[table.name].compute_kernels,
        )
    with quiet_torchrec():
        estimators = [  # perf, and storage as its planner counts memory (`plan_check`)
            EmbeddingPerfEstimator(topology=request.topology, constraints=constraints),
            EmbeddingStorageEstimator(topology=request.topology, constraints=constraints),
        ]
        enumerator = EmbeddingEnumerator(
            request.topology, batch_size or request.batch_size, constraints, estimator=estimators
        )
        options = enumerator.enumerate(request.module, [EmbeddingBagCollectionSharder()])
    grouped: dict[str, list] = {}
    for option in options:
        grouped.setdefault(option.name, []).append(option)
    return grouped


def matching_option(name: str, entry: dict, options: list):
    """The sharding option whose type, kernel and shards (offsets, sizes in order) are those of
    our plan's entry for table `name` (`torchrec_plan_dict`'s form); DreamshardError if none."""
    ours = [(list(s["offsets"]), list(s["sizes"])) for s in entry["shards"]]
    for option in options:
        theirs = [(list(s.offset), list(s.size)) for s in option.shards]
        if (option.sharding_type, option.compute_kernel, theirs) == (
            entry["sharding_type"],
            entry["compute_kernel"],
            ours,
        ):
            return option
    offered = "; ".join(
        f"{o.sharding_type} {o.compute_kernel} sizes {[list(s.size) for s in o.shards]}"
        for o in options
    )
    raise DreamshardError(
        f"table {name}: TorchRec's enumerator offers no {entry['sharding_type']} sharding with "
        f"our shard sizes {[size for _, size in ours]} (it offers {offered or 'nothing'}), so "
        "TorchRec's estimator cannot rate this plan"
    )


@dataclass
class TorchRecEstimatorBackend:
    """`measure --backend torchrec-estimator`: each rank's perf as TorchRec's planner computes
    it (`torchrec_rank_terms`), for a GPU hardware file's constants (None: TorchRec's defaults),
    on `topology` (None: the file's links, else TorchRec's). It times nothing: a judge, a model
    of a GPU that need not be here."""

    hardware: Hardware | None = None
    topology: str | None = None
    batch_size: int | None = None
    name: str = field(default="torchrec-estimator", init=False)

    def __post_init__(self):
        require_torchrec()
        if self.hardware is not None and not self.hardware.is_gpu:
            raise DreamshardError(
                f"TorchRec's estimator models GPUs, not the {self.hardware.name} hardware file; "
                f"give a GPU one ({', '.join(n for n in known_hardware() if n != 'cpu')}) or "
                "none for TorchRec's own constants"
            )

    def config(self) -> dict:
        hardware = self.hardware.record() if self.hardware else "torchrec-defaults"
        return {"backend": self.name, "topology": self.topology, "hardware": hardware}

    def measure(self, task: PlacementTask, placement: Placement) -> PlacementCost:
        terms = torchrec_rank_terms(task, placement, self.topology, self.batch_size, self.hardware)
        topology = self.topology or (self.hardware.topology_name() if self.hardware else None)
        info = {
            "topology": topology or "torchrec defaults",
            "batch": (self.batch_size or torchrec_batch_size(task)) * task.num_devices,
            "hardware": self.hardware.label() if self.hardware else "TorchRec's defaults",
        }
        comm = "modeled" if task.num_devices > 1 else "none"
        return PlacementCost(tuple(DeviceCost(*t) for t in terms), self.name, comm, info)
