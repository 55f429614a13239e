"""The real cost backend: fused fbgemm kernels timed on this host's CPU or GPU.

In process (the default), every device group of the placement is built as one fused TBE and
timed on the local accelerator, and communication comes from a topology model
(`comm: modeled`). With `launcher="torchrun"`, one process per device runs the placement for
real, all-to-all included (`comm: measured`; gloo on the CPU, NCCL on GPUs). Either way it
times only while it holds the host's measurement lock (`costs/host_lock.py`). In process, a
fixed reference group is timed alongside, so labels can be compared across runs
(`costs/reference.py`).

A split placement is measured over its shards (`shard_view`): each shard is a table of the
kernel, of its own rows and width, fed its table's trace sliced (`GroupInput.of`). How the
shards' outputs travel (row-wise partial sums) is said in the cost's info (`costs/comm.py`).
"""

from __future__ import annotations

# dreamshard.costs.tbe (torch and the fbgemm kernels) is imported inside the methods that time, so
# that choosing a backend or reading its config loads nothing heavy.
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from dreamshard.costs.comm import allreduce_ms, get_topology, modeled_comm, shard_comm_info
from dreamshard.costs.host_lock import host_lock
from dreamshard.costs.reference import reference_info, reference_tables
from dreamshard.costs.torchrun import TorchrunError, run_job
from dreamshard.costs.types import DeviceCost, PlacementCost
from dreamshard.errors import DreamshardError
from dreamshard.placement.tasks import Placement, PlacementTask, check_legal, shard_view
from dreamshard.report import format_bytes
from dreamshard.tables.shards import pooled_width, reduce_width
from dreamshard.tables.sources import table_to_dict
from dreamshard.tables.traces import DEFAULT_BATCH, table_batch_size


class MeasurementError(DreamshardError):
    """A kernel or a measuring process failed (after its retry)."""


def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo (or a large number where it cannot be read)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 50


def host_bytes_needed(task: PlacementTask, batch_size: int) -> int:
    """What measuring a placement holds at once on the CPU: fp32 weights, traces, outputs."""
    weights = sum(t.rows * t.dim * 4 for t in task.tables)
    lookups = sum(batch_size * t.pooling_factor for t in task.tables)
    outputs = batch_size * sum(t.dim for t in task.tables) * 4 * 3  # output, grad, autograd
    return int(weights + lookups * 8 + outputs)


@dataclass
class FbgemmBackend:
    timing: object = None  # costs.tbe.TimingConfig; created lazily so torch loads late
    topology: str = "auto"  # "auto": cpu-gloo on the CPU, nvlink on GPUs
    launcher: str = "inprocess"  # or "torchrun"
    batch_size: int = DEFAULT_BATCH
    retries: int = 1
    # Time the reference group (costs/reference.py) inside every in-process measurement and
    # record it in the info. It leaves the placement's own timings as they are, so it is not
    # part of config() (records keep their keys); it costs about 12 ms per timed iteration.
    reference: bool = True
    name: str = field(default="fbgemm", init=False)

    def __post_init__(self):
        from dreamshard.costs.tbe import TimingConfig

        self.timing = self.timing or TimingConfig()
        if self.launcher not in ("inprocess", "torchrun"):
            raise DreamshardError(f"unknown launcher {self.launcher!r}; use inprocess or torchrun")

    def device_kind(self) -> str:
        from dreamshard.costs.tbe import resolve_device

        return resolve_device(self.timing.device).type

    def topology_name(self) -> str:
        if self.topology != "auto":
            return get_topology(self.topology).name
        return "nvlink" if self.device_kind() == "cuda" else "cpu-gloo"

    def config(self) -> dict:
        return {
            "backend": self.name,
            "device": self.device_kind(),
            "launcher": self.launcher,
            "topology": self.topology_name() if self.launcher == "inprocess" else "measured",
            "timing": asdict(self.timing),
        }

    def measure(self, task: PlacementTask, placement: Placement) -> PlacementCost:
        task.validate()
        check_legal(task, placement)
        task, placement = shard_view(task, placement)
        batch = table_batch_size(task.tables, self.batch_size)
        if self.device_kind() == "cpu":
            needed, free = host_bytes_needed(task, batch), available_memory_bytes()
            if needed > 0.8 * free:
                raise DreamshardError(
                    f"measuring this placement needs about {format_bytes(needed)} of host "
                    f"memory; only {format_bytes(free)} is available (use smaller tables, "
                    "e.g. the cpu profile)"
                )
        run = self._torchrun if self.launcher == "torchrun" else self._in_process
        with host_lock():  # one measurement at a time on this host (costs/host_lock.py)
            for attempt in range(self.retries + 1):
                started = time.time()
                try:
                    cost = run(task, placement, batch)
                except MeasurementError as exc:
                    if attempt == self.retries:
                        raise
                    print(f"dreamshard: measurement failed ({exc}); retrying", file=sys.stderr)
                    continue
                when = {"started": started, "finished": time.time()}  # unix seconds
                return replace(cost, info={**cost.info, **when})
        raise AssertionError("unreachable")

    def _in_process(self, task: PlacementTask, placement: Placement, batch: int) -> PlacementCost:
        from dreamshard.costs.tbe import (
            GroupFailure,
            GroupInput,
            time_groups,
            time_groups_with_reference,
        )

        groups = device_groups(task, placement, batch)
        info: dict = {}
        try:
            if self.reference:
                tables = reference_tables()
                reference = GroupInput.of(tables, table_batch_size(tables, self.batch_size))
                timings, ref = time_groups_with_reference(groups, reference, self.timing)
                spent = sum(ref.fwd_samples) + sum(ref.bwd_samples)
                info = reference_info(
                    ref.fwd_ms + ref.bwd_ms,
                    ref.cv,
                    spent,
                    self.device_kind(),
                    (ref.fwd_ms, ref.bwd_ms),
                )
            else:
                timings = time_groups(groups, self.timing)
        except GroupFailure as exc:
            raise MeasurementError(f"kernel failed on {exc}") from exc
        # a row shard's width: its table's dim; a data-parallel replica's: none (`pooled_width`)
        members = placement.device_tables(task.num_devices)  # the shards' (`measure`)
        widths = np.array([sum(pooled_width(task.tables[i]) for i in m) for m in members])
        fwd = np.array([t.fwd_ms for t in timings])
        topology = get_topology(self.topology_name())
        allreduce = allreduce_ms(task.tables, task.num_devices, topology)
        reduced = np.array([sum(reduce_width(task.tables[i]) for i in m) for m in members])
        fwd_comm, bwd_comm = modeled_comm(widths, fwd, batch, topology, allreduce, reduced)
        devices = tuple(
            DeviceCost(t.fwd_ms, float(fc), float(bc), t.bwd_ms, t.cv)
            for t, fc, bc in zip(timings, fwd_comm, bwd_comm)
        )
        comm = "modeled" if task.num_devices > 1 else "none"
        kernel_ms = sum(sum(t.fwd_samples) + sum(t.bwd_samples) for t in timings)
        info.update(topology=topology.name, batch=batch, kernel_ms=kernel_ms)
        info.update(shard_comm_info(task.tables, measured=False))
        return PlacementCost(devices, self.name, comm, info)

    def _torchrun(self, task: PlacementTask, placement: Placement, batch: int) -> PlacementCost:
        if any(
            t.shard is not None and t.shard.kind in ("replica", "table_row") for t in task.tables
        ):
            raise DreamshardError(
                "data-parallel and table-row-wise tables are measured in process only (their "
                "all-reduce and reduce-scatter are modeled); drop --launcher torchrun"
            )
        groups = [[task.tables[i] for i in m] for m in placement.device_tables(task.num_devices)]
        job = {
            "groups": [[table_to_dict(t) for t in g] for g in groups],
            "widths": [sum(t.dim for t in g) for g in groups],
            "batch_size": batch,
            "timing": asdict(self.timing),
        }
        try:
            result = run_job(
                "gpu_tasks.distributed", task.num_devices, job, threads=self.timing.threads
            )
        except TorchrunError as exc:
            raise MeasurementError(str(exc)) from exc
        devices = tuple(
            DeviceCost(r["fwd_comp"], r["fwd_comm"], r["bwd_comm"], r["bwd_comp"], r["cv"])
            for r in result["ranks"]
        )
        kernels = [{k: r[k] for k in ("rows", "dims", "lookups")} for r in result["ranks"]]
        info = {"batch": batch, "process_group": result["backend"], "kernels": kernels}
        info.update(shard_comm_info(task.tables, measured=True))
        return PlacementCost(devices, self.name, "measured", info)


def device_groups(task: PlacementTask, placement: Placement, batch: int) -> list:
    """What each device's fused kernel gets (`costs.tbe.GroupInput`): the shapes and traces
    of its tables, or of its shards when the placement splits tables."""
    from dreamshard.costs.tbe import GroupInput

    task, placement = shard_view(task, placement)
    return [
        GroupInput.of([task.tables[i] for i in members], batch)
        for members in placement.device_tables(task.num_devices)
    ]
