"""A bandwidth-and-latency model of the all-to-all of pooled embeddings, per topology.

In model-parallel DLRM training each device computes pooled embeddings [B, w_d] for the whole
global batch B over its tables (w_d = the sum of their dims), then an all-to-all sends every
other device its B/D rows and receives the B/D rows of its own samples from every other device:

    send_d = B * w_d * (D - 1) / D * bytes     recv_d = B / D * (W - w_d) * bytes   (W = sum w)
    transfer_d = latency * (D - 1) + max(send_d, recv_d) / bandwidth

Forward communication (DreamShard's definition) also absorbs the wait for the slowest device:
    fwd_comm_d = (max_e fwd_comp_e - fwd_comp_d) + transfer_d
Backward communication sends the gradients of the same tensors back: bwd_comm_d = transfer_d.
On one device there is nothing to exchange. Pooled embeddings travel in fp32 (4 bytes).

Shards (`tables.shards`) enter through their widths, a shard's `dim`:
- A column shard outputs its columns of the pooled embeddings, [B, width]: column-wise outputs
  travel as per-device widths, and a table split column-wise sends what it sent whole.
- A row shard outputs *partial sums* of its table's full width for the whole batch, [B, dim];
  a reduce-scatter adds them up, each device ending with the sums of its B/D samples. Each
  device sends every other device that device's B/D rows of its partials, (D - 1)/D of its
  [B, dim], and receives B/D rows from each other shard: the volume of the all-to-all of a
  table of that width. So a row shard counts with its table's dim (which it keeps) and the
  formulas above model the reduce-scatter as they model the all-to-all. The sums on receipt
  ([B/D, dim] additions) are not counted. This is modeled, and every cost of a placement with
  row shards says so in its info (`shard_comm_info`). Under torchrun the all-to-all that is
  timed sends exactly these blocks, so the reduce-scatter's exchange is measured there, less
  the sums; gloo's own reduce-scatter (a full all-reduce, then a slice) is not what a trainer
  would run, and is neither timed nor calibrated on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dreamshard.errors import DreamshardError
from dreamshard.tables.table import Table

POOLED_BYTES = 4
ROW_PARTIALS_MODELED = (
    "row-wise partial sums: reduce-scatter, modeled (the volume of the all-to-all of a table "
    "of that width)"
)
ROW_PARTIALS_MEASURED = (
    "row-wise partial sums: reduce-scatter timed as the all-to-all of the partials (the same "
    "volume; the sums on receipt not timed)"
)


@dataclass(frozen=True)
class Topology:
    name: str
    bandwidth_gbps: float  # GB/s each device sustains in the all-to-all
    latency_ms: float  # per peer message
    description: str


TOPOLOGIES = {
    t.name: t
    for t in (
        Topology("nvlink", 150.0, 0.015, "one host, GPUs on NVLink (H100/H200 class)"),
        Topology("pcie", 20.0, 0.025, "one host, GPUs talking over PCIe"),
        Topology("network", 10.0, 0.050, "several hosts, one 100 Gb/s NIC per GPU"),
        # Measured on this 2-core CPU host, 2026-11-29: gloo all_to_all_single between 2 and 4
        # processes (benchmarks/gloo_alltoall.py): fit 0.23 ms per peer, 0.68 GB/s sent.
        Topology("cpu-gloo", 0.7, 0.25, "this CPU host: gloo between processes"),
    )
}


def get_topology(name: str) -> Topology:
    if name not in TOPOLOGIES:
        raise DreamshardError(f"unknown topology {name!r}; choose one of {', '.join(TOPOLOGIES)}")
    return TOPOLOGIES[name]


def transfer_ms(widths: np.ndarray, batch_size: int, topology: Topology) -> np.ndarray:
    """Each device's all-to-all time for pooled widths `widths` (one entry per device)."""
    return transfer_many(np.asarray(widths, dtype=np.float64)[None], batch_size, topology)[0]


def transfer_many(widths: np.ndarray, batch_size: int, topology: Topology) -> np.ndarray:
    """`transfer_ms` of many placements at once: widths [..., D] -> times [..., D] in ms."""
    widths = np.asarray(widths, dtype=np.float64)
    total = widths.sum(axis=-1, keepdims=True)
    return device_transfer_ms(widths, total, widths.shape[-1], batch_size, topology)


def device_transfer_ms(
    widths: np.ndarray, total: np.ndarray | float, d: int, batch_size: int, topology: Topology
) -> np.ndarray:
    """A device's all-to-all time from its own width and the total width of all `d` devices:
    moving tables between devices leaves the total, and so every other device's time, alone."""
    widths = np.asarray(widths, dtype=np.float64)
    if d <= 1:
        return np.zeros_like(widths)
    send, recv = exchange_bytes(widths, total, d, batch_size)
    return topology.latency_ms * (d - 1) + np.maximum(send, recv) * ms_per_byte(topology)


def exchange_bytes(
    widths: np.ndarray, total: np.ndarray | float, d: int, batch_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """What a device of width `widths` sends to the other `d - 1` devices and receives from
    them (the rest of the `total` width), in bytes: both linear in the widths."""
    send = batch_size * widths * (d - 1) / d * POOLED_BYTES
    recv = batch_size / d * (total - widths) * POOLED_BYTES
    return send, recv


def ms_per_byte(topology: Topology) -> float:
    return 1000.0 / (topology.bandwidth_gbps * 1e9)


def modeled_comm(
    widths: np.ndarray, fwd_comp_ms: np.ndarray, batch_size: int, topology: Topology
) -> tuple[np.ndarray, np.ndarray]:
    """(fwd_comm, bwd_comm) per device in ms under the topology model."""
    transfer = transfer_ms(widths, batch_size, topology)
    if len(transfer) <= 1:
        return transfer, transfer
    wait = np.max(fwd_comp_ms) - np.asarray(fwd_comp_ms, dtype=np.float64)
    return wait + transfer, transfer


def shard_comm_info(tables: Sequence[Table], measured: bool) -> dict[str, str]:
    """What a cost's info says of how the placed tables' outputs travel: {"row_partials": ...}
    when some are row shards (see the module's docstring), else nothing."""
    if not any(t.shard is not None and t.shard.kind == "row" for t in tables):
        return {}
    return {"row_partials": ROW_PARTIALS_MEASURED if measured else ROW_PARTIALS_MODELED}
