"""A TorchRec (DMP) training step estimated from the fbgemm proxy: the fused kernels the proxy
times, plus the parts of DMP's step that kernel timing leaves out, modeled (issue 14).

`costs/comm.py` models only the all-to-all of pooled embeddings (and the cost network of every
trained model uses it as it is). A DMP step (`gpu_tasks/dmp_step.py`) also holds, per sharding
type TorchRec groups the plan's shards into (table-wise, column-wise, row-wise: each group has
its own input distribution, lookup and output distribution):

- **the input all-to-all of ids** (modeled): every rank sends the ids of its own bags of a table
  to the rank holding each of its shards: int64 ids and one int32 length per bag. A column-split
  table's ids go to every shard's rank (each shard is a feature of its own); a row-wise table's
  ids go to the rank whose rows they hit (a row shard's pooling factor is its share of the
  lookups). Three collectives per group (splits, lengths, ids);
- **the pooled all-to-all** of table- and column-wise shards (modeled, `comm.transfer_ms` per
  group, forward and backward: hierarchical on a topology across hosts);
- **the all-reduce of data-parallel tables' gradients** (modeled, `comm.allreduce_ms`);
- **row-wise partial sums** (modeled): each rank pools its rows for the whole batch, [B, dim]
  per row-wise table, and the sums are reduce-scattered (gloo: an all-reduce's volume, ring
  steps), their gradients all-gathered in the backward;
- **per-step work that is not a kernel** (fitted, `DmpStepModel`): a constant (dense tower,
  loss, its all-reduce, TorchRec's awaitables), each sharding group beyond the first (its
  modules and kernels), each column shard beyond a table's first (its feature in the KJT, the
  join of the pooled pieces by a permute forward and backward), and the bucketizing of the ids
  of row-wise tables (per id). `fit_step_model` fits them, and a scale on the kernels, on DMP
  steps of calibration plans (`benchmarks/torchrec_e2e.py` measures them on training tasks).

The other collectives use the topology's bandwidth inside a host: the DMP steps this models run
on one host (gloo on this CPU). A rank's step is its scaled kernels plus its modeled
communication; the estimate is the slowest rank's plus the fitted work. Everything here is
modeled or fitted, never timed; reports label it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import nnls

from dreamshard.costs.comm import POOLED_BYTES, Topology, allreduce_ms, transfer_ms
from dreamshard.errors import DreamshardError
from dreamshard.placement.tasks import Placement, PlacementTask, shard_view

ID_BYTES = 8  # int64 ids
LENGTH_BYTES = 4  # one int32 length per bag, feature and destination
INPUT_COLLECTIVES = 3  # per group: the splits, the lengths, the ids (TorchRec's KJTAllToAll)
# TorchRec's sharding types for our shards
GROUPS = ("table_wise", "column_wise", "row_wise", "data_parallel")
LABEL = "fbgemm + modeled DMP terms"


@dataclass(frozen=True)
class StepTerms:
    """What a plan's DMP step holds besides the fused kernels: modeled ms per rank, and the
    counts the fitted work scales with."""

    ids_ms: np.ndarray  # [D] input all-to-all of ids, every group's
    pooled_ms: np.ndarray  # [D] pooled all-to-all of table- and column-wise shards, fwd + bwd
    row_ms: np.ndarray  # [D] row-wise partial sums: reduce-scatter + all-gather of gradients
    replica_ms: np.ndarray  # [D] data-parallel tables: their gradients' all-reduce
    groups: int  # sharding types present
    column_shards: int  # shards beyond the first of every column-split table
    row_ids: float  # ids per rank that row-wise tables bucketize, per step

    @property
    def comm_ms(self) -> np.ndarray:
        return self.ids_ms + self.pooled_ms + self.row_ms + self.replica_ms

    def to_dict(self) -> dict:
        return {
            "ids_ms": self.ids_ms.tolist(),
            "pooled_ms": self.pooled_ms.tolist(),
            "row_ms": self.row_ms.tolist(),
            "replica_ms": self.replica_ms.tolist(),
            "groups": self.groups,
            "column_shards": self.column_shards,
            "row_ids": self.row_ids,
        }


def shard_group(table) -> str:
    if table.shard is None:
        return "table_wise"
    kinds = {"column": "column_wise", "row": "row_wise", "replica": "data_parallel"}
    if table.shard.kind not in kinds:
        raise DreamshardError(
            f"table {table.shard.of} is table-row-wise, which TorchRec trains on CUDA only; the "
            "DMP step model covers the CPU's sharding types"
        )
    return kinds[table.shard.kind]


def step_terms(
    task: PlacementTask, placement: Placement, batch: int, topology: Topology
) -> StepTerms:
    """The modeled terms of the placement's DMP step at global batch `batch` on `topology`."""
    shards, flat = shard_view(task, placement)
    d = task.num_devices
    per_rank = batch / d
    peers = d - 1
    ids = np.zeros(d)
    pooled = np.zeros(d)
    present = [g for g in GROUPS if any(shard_group(t) == g for t in shards.tables)]
    for group in present:
        if group == "data_parallel":  # each rank reads its own bags' ids and keeps its output
            continue
        members = [(t, e) for t, e in zip(shards.tables, flat.devices) if shard_group(t) == group]
        # each shard's rank receives the ids of every other rank's bags of its table
        per_peer = np.zeros(d)  # bytes each rank receives from one peer
        for table, rank in members:
            per_peer[rank] += per_rank * (ID_BYTES * table.pooling_factor + LENGTH_BYTES)
        recv = per_peer * peers
        send = per_peer.sum() - per_peer  # to every other rank, what that rank receives
        seconds = np.maximum(send, recv) / (topology.bandwidth_gbps * 1e9)
        ids += INPUT_COLLECTIVES * topology.latency_ms * peers + seconds * 1000.0
        if group != "row_wise":
            widths = np.zeros(d)
            for table, rank in members:
                widths[rank] += table.dim
            pooled += 2 * transfer_ms(widths, batch, topology)
    # one entry per row-wise table (any of its shards: they keep the table's dim)
    row_tables = {t.shard.of: t for t in shards.tables if shard_group(t) == "row_wise"}
    row_width = sum(t.dim for t in row_tables.values())
    reduce_bytes = 2 * peers / d * batch * row_width * POOLED_BYTES  # ring all-reduce
    gather_bytes = peers * per_rank * row_width * POOLED_BYTES
    row = np.full(
        d,
        (3 * peers * topology.latency_ms if row_tables else 0.0)
        + (reduce_bytes + gather_bytes) / (topology.bandwidth_gbps * 1e9) * 1000.0,
    )
    row_ids = per_rank * sum(
        t.pooling_factor for t in shards.tables if shard_group(t) == "row_wise"
    )
    column = [t for t in shards.tables if shard_group(t) == "column_wise"]
    column_tables = {t.shard.of for t in column}
    return StepTerms(
        ids_ms=ids,
        pooled_ms=pooled,
        row_ms=row,
        replica_ms=np.full(d, allreduce_ms(shards.tables, d, topology)),
        groups=len(present),
        column_shards=len(column) - len(column_tables),
        row_ids=float(row_ids),
    )


@dataclass(frozen=True)
class DmpStepModel:
    """The fitted part of the estimate (ms unless said): see the module's docstring.

    The defaults are the CPU-time fit on this 2-core CPU host (gloo, 2 ranks, fp32, batch 1024
    per rank; `benchmarks/torchrec_e2e.py`'s calibration on 2 cpu-24x2 training tasks,
    2026-12-01: R2 0.95, RMSE 1.5 ms over 20 plans); the benchmark fits its own each run."""

    kernel_scale: float = 0.70  # DMP's fused-kernel time per ms the proxy times
    base_ms: float = 6.27  # per step: dense tower, loss, its all-reduce, TorchRec's own work
    group_ms: float = 0.0  # per sharding group beyond the first (its latencies are modeled)
    column_shard_ms: float = 0.31  # per column shard beyond a table's first
    row_id_us: float = 0.0  # per id of a row-wise table bucketized on a rank

    def fitted(self) -> dict:
        return asdict(self)

    def estimate(self, kernels_ms: np.ndarray, terms: StepTerms) -> float:
        """The step (ms): the slowest rank's scaled kernels + modeled comm, + the fitted work."""
        ranks = self.kernel_scale * np.asarray(kernels_ms, dtype=np.float64) + terms.comm_ms
        return float(ranks.max() + self.work_ms(terms))

    def work_ms(self, terms: StepTerms) -> float:
        return float(
            self.base_ms
            + self.group_ms * max(terms.groups - 1, 0)
            + self.column_shard_ms * terms.column_shards
            + self.row_id_us * terms.row_ids / 1000.0
        )


def fit_step_model(
    kernels_ms: Sequence[np.ndarray],
    terms: Sequence[StepTerms],
    measured_ms: Sequence[float],
    scales: np.ndarray | None = None,
) -> tuple[DmpStepModel, dict]:
    """The model that fits measured DMP steps best (least squares, every constant >= 0; the
    kernel scale by a grid search): (model, {"rmse_ms", "r2", "samples"})."""
    y = np.asarray(measured_ms, dtype=np.float64)
    features = np.array(
        [[1.0, max(t.groups - 1, 0), t.column_shards, t.row_ids / 1000.0] for t in terms]
    )  # ms per 1000 ids = us per id
    best = None
    for scale in np.arange(0.3, 1.81, 0.01) if scales is None else scales:
        modeled = np.array(
            [(scale * np.asarray(k) + t.comm_ms).max() for k, t in zip(kernels_ms, terms)]
        )
        coefs, norm = nnls(features, y - modeled)
        if best is None or norm < best[0]:
            best = (norm, float(scale), coefs)
    norm, scale, (base, group, column, row) = best
    model = DmpStepModel(scale, float(base), float(group), float(column), float(row))
    predicted = np.array([model.estimate(k, t) for k, t in zip(kernels_ms, terms)])
    residual = y - predicted
    total = float(((y - y.mean()) ** 2).sum())
    return model, {
        "rmse_ms": float(np.sqrt((residual**2).mean())),
        "r2": 1.0 - float((residual**2).sum()) / total if total > 0 else float("nan"),
        "samples": len(y),
    }
