"""Time one fused embedding-bag kernel (fbgemm TBE) per device group.

Each group is built as a single `SplitTableBatchedEmbeddingBagsCodegen` over its tables, fed
their traces concatenated table-major, and timed: the forward pass, then the backward pass with
its fused optimizer update. Groups are timed round-robin (iteration i of every group before
iteration i + 1 of any), so drift on a shared machine hits all groups alike, and a cache flush
precedes a group's timed calls unless the other groups' weights exceed the flush, so no group
runs with rows left hot by its previous call (in training, the dense layers and the all-to-all
run between two embedding steps). Their weights, not the rows they touch: counting those
instead measured the same (the retired device-isolation study, in git history at commit ea3bb69).
CPU: weights fp32 in host memory, a monotonic clock. CUDA: fp16 weights in device memory,
CUDA events.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from dreamshard.tables.traces import concat_traces

MIB = 2**20


@dataclass(frozen=True)
class TimingConfig:
    warmup: int = 1  # first touches of lazily zeroed weights; medians hide the rest
    iterations: int = 15  # 10 gave a 6-8% spread between rounds here, 15-20 about 5%
    optimizer: str = "EXACT_SGD"
    learning_rate: float = 0.01
    # Bytes written between timed calls when the other groups cannot evict this one's rows:
    # twice this CPU's last-level cache. Round-robin over bigger groups evicts by itself.
    flush_bytes: int = 64 * MIB
    threads: int = 1  # the CPU backward of EXACT_SGD is serial; one thread is steadier
    device: str = "auto"  # "auto": CUDA when present, else the CPU


@dataclass
class GroupInput:
    """One device's tables: shapes and their traces (table-major, offsets of length T*B + 1)."""

    rows: list[int]
    dims: list[int]
    indices: np.ndarray
    offsets: np.ndarray

    @classmethod
    def of(cls, tables, batch_size: int) -> GroupInput:
        """The group of `tables` (`dreamshard.tables.Table`s) over one batch. A shard is a table
        of its own rows and width whose trace is its table's, sliced (`trace_for`): a column
        shard reads all its table's lookups, a row shard those inside its rows."""
        indices, offsets = concat_traces(tables, batch_size)
        return cls([t.rows for t in tables], [t.dim for t in tables], indices, offsets)


@dataclass
class GroupFailure(RuntimeError):
    """A group's kernel failed; says which device it was."""

    def __init__(self, device: int, message: str):
        super().__init__(f"device {device}: {message}")
        self.device = device


@dataclass
class GroupTiming:
    fwd_ms: float
    bwd_ms: float
    fwd_samples: list[float] = field(default_factory=list)
    bwd_samples: list[float] = field(default_factory=list)

    @property
    def cv(self) -> float:
        """Coefficient of variation of the per-iteration forward + backward time."""
        total = np.add(self.fwd_samples, self.bwd_samples)
        return float(total.std() / total.mean()) if total.size and total.mean() > 0 else 0.0


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def build_tbe(rows: list[int], dims: list[int], config: TimingConfig, device: torch.device):
    """A fresh fused TBE over the given tables on `device`."""
    import fbgemm_gpu  # noqa: F401  (registers torch.ops.fbgemm)
    from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        EmbeddingLocation,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    if device.type == "cuda":
        location, compute, precision = EmbeddingLocation.DEVICE, ComputeDevice.CUDA, SparseType.FP16
    else:
        location, compute, precision = EmbeddingLocation.HOST, ComputeDevice.CPU, SparseType.FP32
    specs = [(r, d, location, compute) for r, d in zip(rows, dims)]
    return SplitTableBatchedEmbeddingBagsCodegen(
        specs,
        optimizer=EmbOptimType[config.optimizer],
        learning_rate=config.learning_rate,
        pooling_mode=PoolingMode.SUM,
        weights_precision=precision,
        device=device,
    )


class _Clock:
    """Wall clock on the CPU, CUDA events on a GPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def elapsed_ms(self, start, end) -> float:
        if self.cuda:
            end.synchronize()
            return start.elapsed_time(end)
        return (end - start) * 1000.0


def time_groups(
    groups: list[GroupInput], config: TimingConfig = TimingConfig()
) -> list[GroupTiming]:
    """Median forward and backward milliseconds of each group's fused kernel."""
    return _time_all(groups, config, len(groups))


def time_groups_with_reference(
    groups: list[GroupInput], reference: GroupInput, config: TimingConfig = TimingConfig()
) -> tuple[list[GroupTiming], GroupTiming]:
    """`time_groups`, with a fixed reference group timed in the same round-robin.

    Whatever slows the machine during the measurement (another process, a slower clock) slows
    the reference alike, so a group's time over the reference's is comparable across runs.
    The reference's bytes do not count towards evicting the groups' rows: their flushes, and
    so their timings, stay what they are without it.
    """
    timings = _time_all([*groups, reference], config, len(groups))
    return timings[:-1], timings[-1]


def _time_all(groups: list[GroupInput], config: TimingConfig, own: int) -> list[GroupTiming]:
    """Time every group round-robin; groups from index `own` on ride along (the reference).
    On the CPU the kernels run on `config.threads` threads; the process's own count comes back
    after (a cost network fitted next in the same process keeps its threads)."""
    device = resolve_device(config.device)
    previous = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(config.threads)
    try:
        return _time_on(groups, config, own, device)
    finally:
        torch.set_num_threads(previous)


def _time_on(groups: list[GroupInput], config: TimingConfig, own: int, device) -> list[GroupTiming]:
    clock = _Clock(device)
    flush = torch.empty(config.flush_bytes // 4, dtype=torch.float32, device=device)
    prepared = []
    for g, group in enumerate(groups):
        if not group.rows:  # a device with no tables runs no kernel
            prepared.append(None)
            continue
        try:
            tbe = build_tbe(group.rows, group.dims, config, device)
        except Exception as exc:  # noqa: BLE001
            raise GroupFailure(g, f"cannot build its kernel: {exc}") from exc
        indices = torch.from_numpy(np.ascontiguousarray(group.indices, dtype=np.int64)).to(device)
        offsets = torch.from_numpy(np.ascontiguousarray(group.offsets, dtype=np.int64)).to(device)
        batch = (len(group.offsets) - 1) // len(group.rows)
        grad = torch.randn(batch, sum(group.dims), device=device)
        prepared.append((tbe, indices, offsets, grad))
    weight_bytes = [4 * sum(r * d for r, d in zip(g.rows, g.dims)) for g in groups]
    evicting = sum(weight_bytes[:own])  # the bytes the measured groups stream through
    needs_flush = [
        (evicting - own_bytes if g < own else evicting) < config.flush_bytes
        for g, own_bytes in enumerate(weight_bytes)
    ]
    fwd: list[list[float]] = [[] for _ in groups]
    bwd: list[list[float]] = [[] for _ in groups]
    # Only the young generations: a full collection walks the whole heap (0.3 s a measurement
    # in a flow's process, with Prefect and MLflow loaded: a fifth of a cpu-50x4 measurement)
    # and frees nothing the kernels hold (a kernel goes when its last reference does).
    gc.collect(1)
    gc.disable()  # a collector pause inside a timed call would be charged to the kernel
    try:
        _timed_loop(prepared, needs_flush, flush, clock, config, fwd, bwd)
    finally:
        gc.enable()
    return [
        GroupTiming(float(np.median(f)), float(np.median(b)), f, b) if f else GroupTiming(0.0, 0.0)
        for f, b in zip(fwd, bwd)
    ]


def _timed_loop(prepared, needs_flush, flush, clock, config, fwd, bwd) -> None:
    """Round-robin over the groups: warm-up iterations, then timed ones."""
    count = len(prepared)
    for it in range(config.warmup + config.iterations):
        shift = it % max(1, count)  # rotate who goes first
        for g in list(range(shift, count)) + list(range(shift)):
            if prepared[g] is None:
                continue
            tbe, indices, offsets, grad = prepared[g]
            if needs_flush[g]:
                flush.fill_(float(it))
            if clock.cuda:
                torch.cuda.synchronize()
            try:
                t0 = clock.mark()
                out = tbe(indices, offsets)
                t1 = clock.mark()
                out.backward(grad)
                t2 = clock.mark()
            except Exception as exc:  # noqa: BLE001  (any kernel failure names its device)
                raise GroupFailure(g, f"{type(exc).__name__}: {exc}") from exc
            if it >= config.warmup:
                fwd[g].append(clock.elapsed_ms(t0, t1))
                bwd[g].append(clock.elapsed_ms(t1, t2))
