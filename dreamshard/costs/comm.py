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

Across hosts the all-to-all is hierarchical. With L devices per host (device i on host i // L),
a device's blocks to its L - 1 host peers travel on the host's links (NVLink, PCIe), those to
the D - L devices elsewhere on the network, both at once:

    send_in = B * w_d * (L - 1) / D     recv_in = B / D * (W_h - w_d)     (W_h = its host's sum)
    send_out = B * w_d * (D - L) / D    recv_out = B / D * (W - W_h)
    transfer_d = latency * (L - 1) + network_latency * (D - L)
                 + max(max(send_in, recv_in) / bandwidth, max(send_out, recv_out) / network)

so moving a table between hosts changes the time of every device on both hosts, and a host's
widths cost less kept at home. A topology whose hosts hold every device is the flat model above.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from dreamshard.errors import DreamshardError
from dreamshard.tables.shards import pooled_width, reduce_width
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
    bandwidth_gbps: float  # GB/s each device sustains in the all-to-all inside its host
    latency_ms: float  # per message to a peer on the same host
    description: str
    devices_per_host: int = 0  # 0: one host holds every device (a flat topology)
    network_gbps: float = 0.0  # GB/s each device sustains to devices on other hosts
    network_latency_ms: float = 0.0  # per message to a peer on another host

    def host_size(self, d: int) -> int:
        """Devices per host among `d` devices (`d` when one host holds them all); `d` must
        fill whole hosts."""
        size = self.devices_per_host
        if size <= 0 or size >= d:
            return d
        if d % size:
            raise DreamshardError(
                f"{d} devices do not fill hosts of {size} (topology {self.name}); choose a "
                f"device count that is a multiple of {size}, or hosts that divide {d}"
            )
        return size

    def hosts_of(self, d: int) -> np.ndarray:
        """[d] the host of each device: device i sits on host i // L, as TorchRec numbers ranks."""
        return np.arange(d) // self.host_size(d)


GIB = 1024**3 / 1e9  # GB per GiB (TorchRec states its bandwidths in GiB/s)
TOPOLOGIES = {
    t.name: t
    for t in (
        Topology("nvlink", 150.0, 0.015, "one host, GPUs on NVLink (H100/H200 class)"),
        Topology("pcie", 20.0, 0.025, "one host, GPUs talking over PCIe"),
        Topology("network", 10.0, 0.050, "several hosts, one 100 Gb/s NIC per GPU"),
        # Measured on this 2-core CPU host, 2026-11-29: gloo all_to_all_single between 2 and 4
        # processes (the retired gloo_alltoall study, in git history at commit ea3bb69): fit
        # 0.23 ms per peer, 0.68 GB/s sent.
        Topology("cpu-gloo", 0.7, 0.25, "this CPU host: gloo between processes"),
        # hosts of 8: the network at 80% of the NIC's line rate, as `network` above
        Topology(
            "nvlink-rdma",
            150.0,
            0.015,
            "hosts of 8 GPUs on NVLink, a 400 Gb/s RDMA NIC per GPU",
            8,
            40.0,
            0.030,
        ),
        Topology(
            "pcie-ethernet",
            20.0,
            0.025,
            "hosts of 8 GPUs on PCIe, a 100 Gb/s NIC per GPU",
            8,
            10.0,
            0.050,
        ),
        # torchrec/distributed/planner/constants.py: INTRA_NODE_BANDWIDTH, CROSS_NODE_BANDWIDTH
        # and its default local world size; TorchRec models no latency
        Topology(
            "torchrec",
            600 * GIB,
            0.0,
            "TorchRec's planner defaults: hosts of 8, "
            "600 GiB/s inside a host, 12.5 GiB/s between hosts",
            8,
            12.5 * GIB,
            0.0,
        ),
    )
}
CUSTOM_KEYS = {
    "per-host": "devices_per_host",
    "intra": "bandwidth_gbps",
    "inter": "network_gbps",
    "latency": "latency_ms",
    "network-latency": "network_latency_ms",
}
TOPOLOGY_HELP = (
    f"a preset ({', '.join(TOPOLOGIES)}); a multi-host preset with its devices per host, as "
    "nvlink-rdma:4; or your own hosts, as per-host=8,intra=150,inter=40[,latency=0.015,"
    "network-latency=0.03] (GB/s per device, ms per message)"
)


def get_topology(name: str) -> Topology:
    """The topology a name gives: a preset, `preset:L` (L devices per host), or a custom
    `per-host=L,intra=GBPS,inter=GBPS[,latency=MS,network-latency=MS]`."""
    if name in TOPOLOGIES:
        return TOPOLOGIES[name]
    if "=" in name:
        return _custom_topology(name)
    preset, _, size = name.partition(":")
    if preset not in TOPOLOGIES or not size:
        raise DreamshardError(f"unknown topology {name!r}; give {TOPOLOGY_HELP}")
    base = TOPOLOGIES[preset]
    if base.devices_per_host <= 0:
        multi = ", ".join(n for n, t in TOPOLOGIES.items() if t.devices_per_host > 0)
        raise DreamshardError(
            f"topology {preset!r} is one host and has no devices per host; a multi-host one "
            f"is {multi}"
        )
    if not size.isdigit() or int(size) < 1:
        raise DreamshardError(f"topology {name!r}: devices per host must be a whole number >= 1")
    return replace(base, name=name, devices_per_host=int(size))


def _custom_topology(name: str) -> Topology:
    values = {}
    for part in name.split(","):
        key, _, value = part.partition("=")
        if key.strip() not in CUSTOM_KEYS:
            raise DreamshardError(
                f"topology {name!r}: unknown key {key.strip()!r}; keys: {', '.join(CUSTOM_KEYS)}"
            )
        try:
            values[CUSTOM_KEYS[key.strip()]] = float(value)
        except ValueError:
            raise DreamshardError(f"topology {name!r}: {key.strip()} must be a number") from None
    missing = [k for k in ("per-host", "intra", "inter") if CUSTOM_KEYS[k] not in values]
    if missing:
        raise DreamshardError(f"topology {name!r} lacks {', '.join(missing)}")
    per_host = values.pop("devices_per_host")
    if per_host < 1 or per_host != int(per_host):
        raise DreamshardError(f"topology {name!r}: per-host must be a whole number >= 1")
    for field in ("bandwidth_gbps", "network_gbps"):
        if not values[field] > 0:
            raise DreamshardError(f"topology {name!r}: bandwidths must be above 0 GB/s")
    if min(values.get("latency_ms", 0.0), values.get("network_latency_ms", 0.0)) < 0:
        raise DreamshardError(f"topology {name!r}: latencies cannot be negative")
    return Topology(
        name=name,
        description="custom hosts",
        devices_per_host=int(per_host),
        **{"latency_ms": 0.0, "network_latency_ms": 0.0, **values},
    )


def hosts_topology(name: str, hosts: int, d: int) -> str:
    """The name of topology `name` with `d` devices spread evenly over `hosts` hosts."""
    topology = get_topology(name)
    if hosts < 1:
        raise DreamshardError(f"--hosts must be at least 1, not {hosts}")
    if d % hosts:
        raise DreamshardError(
            f"{d} devices do not divide evenly over {hosts} hosts; choose a host count that "
            f"divides {d}"
        )
    if hosts == 1:
        return name
    if topology.devices_per_host <= 0:
        multi = ", ".join(n for n, t in TOPOLOGIES.items() if t.devices_per_host > 0)
        raise DreamshardError(
            f"topology {name!r} is one host; for {hosts} hosts choose a multi-host one ({multi}) "
            "or give your own (per-host=L,intra=GBPS,inter=GBPS)"
        )
    base = name.partition(":")[0] if "=" not in name else None
    if base is None:  # a custom spec: its per-host entry replaced
        parts = [p for p in name.split(",") if p.partition("=")[0].strip() != "per-host"]
        return ",".join([f"per-host={d // hosts}", *parts])
    return f"{base}:{d // hosts}"


def host_widths(widths: np.ndarray, topology: Topology) -> np.ndarray:
    """[..., D]: the summed width of each device's host, for device widths [..., D]."""
    widths = np.asarray(widths, dtype=np.float64)
    d = widths.shape[-1]
    hosts = topology.hosts_of(d)
    if hosts[-1] == 0:  # one host
        return np.broadcast_to(widths.sum(axis=-1, keepdims=True), widths.shape).copy()
    member = np.eye(hosts[-1] + 1)[hosts]  # [D, H]
    return (widths @ member) @ member.T


def transfer_ms(widths: np.ndarray, batch_size: int, topology: Topology) -> np.ndarray:
    """Each device's all-to-all time for pooled widths `widths` (one entry per device)."""
    return transfer_many(np.asarray(widths, dtype=np.float64)[None], batch_size, topology)[0]


def transfer_many(widths: np.ndarray, batch_size: int, topology: Topology) -> np.ndarray:
    """`transfer_ms` of many placements at once: widths [..., D] -> times [..., D] in ms."""
    widths = np.asarray(widths, dtype=np.float64)
    total = widths.sum(axis=-1, keepdims=True)
    hosts = host_widths(widths, topology)
    return device_transfer_ms(widths, total, widths.shape[-1], batch_size, topology, hosts)


def exchange_many(
    tables: Sequence[Table], devices: np.ndarray, batch_size: int, topology: Topology, d: int
) -> np.ndarray:
    """[N, D] each device's modeled exchange in ms for placements `devices` [N, T] of `tables`
    on `d` devices, counted once per direction: the all-to-all of the pooled widths
    (`tables.shards.pooled_width`), the host's reduce-scatter of table-row-wise partial sums
    (`reduce_width`), and half the data-parallel all-reduce, which only the backward pays in
    full (an overall that counts the exchange twice is then exact)."""
    n = len(devices)
    slot = (np.asarray(devices, dtype=np.int64) + d * np.arange(n)[:, None]).ravel()

    def per_device(values: list[float]) -> np.ndarray:
        return np.bincount(slot, np.tile(values, n), n * d).reshape(n, d)

    widths = per_device([pooled_width(t) for t in tables])
    transfer = transfer_many(widths, batch_size, topology) + allreduce_ms(tables, d, topology) / 2
    reduced = [reduce_width(t) for t in tables]
    if any(reduced):  # table-row-wise partial sums, reduced inside each host
        transfer = transfer + host_reduce_ms(per_device(reduced), batch_size, topology)
    return transfer


def device_transfer_ms(
    widths: np.ndarray,
    total: np.ndarray | float,
    d: int,
    batch_size: int,
    topology: Topology,
    host: np.ndarray | float | None = None,
) -> np.ndarray:
    """A device's all-to-all time from its own width, its host's summed width `host` and the
    total width of all `d` devices. On one host `host` is the total and may be left out:
    moving tables between devices leaves the total, and so every other device's time, alone;
    across hosts a move changes every device on the two hosts it joins."""
    return blended_transfer_ms(widths, total, d, batch_size, [topology], [1.0], host)


def blended_transfer_ms(
    widths: np.ndarray,
    total: np.ndarray | float,
    d: int,
    batch_size: int,
    topologies: list[Topology],
    weights: list[float],
    host: np.ndarray | float | None = None,
) -> np.ndarray:
    """The weighted sum of `device_transfer_ms` over `topologies` that put the `d` devices on
    the same hosts (one hardware file's centre and corners, `device_search.blended_model`):
    the bytes, which no link changes, worked out once, then each topology's latency and
    bandwidths (for one topology, `device_transfer_ms` itself, to the bit)."""
    widths = np.asarray(widths, dtype=np.float64)
    if d <= 1:
        return np.zeros_like(widths)
    sizes = {topology.host_size(d) for topology in topologies}
    if len(sizes) != 1:
        raise ValueError("blended topologies must put the devices on the same hosts")
    size = sizes.pop()
    views = list(zip(weights, topologies))
    if size >= d:
        peak = np.maximum(*exchange_bytes(widths, total, d, batch_size))
        latency = sum(w * t.latency_ms for w, t in views) * (d - 1)
        return latency + peak * sum(w * ms_per_byte(t) for w, t in views)
    if host is None:
        raise ValueError("a topology across hosts needs each device's host width")
    per_row = batch_size / d * POOLED_BYTES
    inside = np.maximum(per_row * widths * (size - 1), per_row * (host - widths))
    outside = np.maximum(per_row * widths * (d - size), per_row * (total - host))
    if len(views) == 1:  # as the time was always written
        (w, t), latency = views[0], _host_latency(topologies[0], size, d)
        across = outside * 1000.0 / (t.network_gbps * 1e9)
        return w * (latency + np.maximum(inside * ms_per_byte(t), across))
    # each view's max(inside x its ms a byte, outside x its ms a network byte), as its ms a
    # byte x max(inside, outside x their quotient): four array operations a view
    out = sum(w * _host_latency(t, size, d) for w, t in views)
    for w, t in views:
        quotient = 1000.0 / (t.network_gbps * 1e9) / ms_per_byte(t)
        out = out + (w * ms_per_byte(t)) * np.maximum(inside, outside * quotient)
    return out


def _host_latency(topology: Topology, size: int, d: int) -> float:
    """A device's latency to the other devices of its host and to those of the other hosts."""
    return topology.latency_ms * (size - 1) + topology.network_latency_ms * (d - size)


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
    widths: np.ndarray,
    fwd_comp_ms: np.ndarray,
    batch_size: int,
    topology: Topology,
    allreduce: float = 0.0,
    reduce_widths: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(fwd_comm, bwd_comm) per device in ms under the topology model; `allreduce`: each
    device's share of the data-parallel tables' gradient all-reduce (`allreduce_ms`), backward;
    `reduce_widths`: each device's table-row-wise partial sums reduced inside its host
    (`host_reduce_ms`), both ways."""
    transfer = transfer_ms(widths, batch_size, topology)
    if reduce_widths is not None:
        transfer = transfer + host_reduce_ms(reduce_widths, batch_size, topology)
    if len(transfer) <= 1:
        return transfer, transfer
    wait = np.max(fwd_comp_ms) - np.asarray(fwd_comp_ms, dtype=np.float64)
    return wait + transfer, transfer + allreduce


def host_reduce_ms(reduce_widths: np.ndarray, batch_size: int, topology: Topology) -> np.ndarray:
    """[..., D] each device's time in its host's reduce-scatter of table-row-wise partial sums
    (the all-gather of their gradients takes as long): `reduce_widths` [..., D] (the devices'
    summed `tables.shards.reduce_width`) of the batch's fp32 sums sent and received on the
    host's links, after a message to each host peer; 0 where a device holds none."""
    widths = np.asarray(reduce_widths, dtype=np.float64)
    peers = topology.host_size(widths.shape[-1]) - 1
    latency = np.where(widths > 0, topology.latency_ms * peers, 0.0)
    return latency + batch_size * widths * POOLED_BYTES * ms_per_byte(topology)


GRADIENT_BYTES = 4  # a data-parallel table's gradients travel dense, in fp32


def allreduce_ms(tables: Sequence[Table], d: int, topology: Topology) -> float:
    """Each device's time in the all-reduce of the data-parallel tables' gradients (the
    replicas among `tables`, each table once): one fused ring over the `d` devices, each sending
    and receiving 2 (d - 1) / d of the weights' bytes in 2 (d - 1) steps; across hosts the ring's
    slowest link, the network, sets the pace. 0 when nothing is replicated."""
    replicated = {
        t.shard.of: t for t in tables if t.shard is not None and t.shard.kind == "replica"
    }
    if not replicated or d <= 1:
        return 0.0
    size = sum(t.rows * t.dim for t in replicated.values()) * GRADIENT_BYTES
    across = topology.host_size(d) < d
    gbps = topology.network_gbps if across else topology.bandwidth_gbps
    latency = topology.network_latency_ms if across else topology.latency_ms
    return 2 * (d - 1) * latency + 2 * (d - 1) / d * size * 1000.0 / (gbps * 1e9)


def shard_comm_info(tables: Sequence[Table], measured: bool) -> dict[str, str]:
    """What a cost's info says of how the placed tables' outputs travel: {"row_partials": ...}
    when some are row shards (see the module's docstring), else nothing."""
    if not any(t.shard is not None and t.shard.kind in ("row", "table_row") for t in tables):
        return {}
    return {"row_partials": ROW_PARTIALS_MEASURED if measured else ROW_PARTIALS_MODELED}
