"""Measure one placement across real processes: one rank per device, all-to-all for real.

Run under torchrun (one process per device of the placement):

    torchrun --nproc_per_node D -m gpu_tasks.distributed --job job.json --out result.json

Each rank builds the fused TBE of its own tables and times, per iteration: its forward kernel
(fwd_comp); the forward all-to-all of pooled embeddings, from the end of its kernel, so it
includes the wait for the slowest device (fwd_comm); the backward all-to-all of their gradients
(bwd_comm); and its backward kernel with the fused optimizer update (bwd_comp). NCCL on GPUs
(one GPU per rank), gloo on the CPU. Rank 0 writes the medians of every rank as JSON, with the
shapes and lookups each rank's kernel got.

A rank's tables may be shards (their records carry `shard`): each is a table of its own rows
and width fed its table's trace sliced. A row shard's output is partial sums of its table's
full width; the all-to-all sends every rank the rows of its samples, which is the exchange of a
reduce-scatter of those partials (the sums on receipt are not run: [B/D, dim] additions).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist

from dreamshard.costs.tbe import GroupInput, TimingConfig, build_tbe
from dreamshard.files import write_json_atomic
from dreamshard.tables.sources import table_from_record


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _exchange(tensor: torch.Tensor, send_splits: list[int], recv_splits: list[int]) -> torch.Tensor:
    out = torch.empty(sum(recv_splits), dtype=tensor.dtype, device=tensor.device)
    dist.all_to_all_single(out, tensor.contiguous(), recv_splits, send_splits)
    return out


def run_rank(job: dict) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    config = TimingConfig(**job["timing"])
    cuda = torch.cuda.is_available() and config.device in ("auto", "cuda")
    device = torch.device(f"cuda:{local}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(config.threads)
    batch = job["batch_size"]
    widths = job["widths"]
    tables = [table_from_record(r, f"rank {rank} table") for r in job["groups"][rank]]
    rows = [len(b) for b in np.array_split(np.arange(batch), world)]  # samples per rank
    send_splits = [n * widths[rank] for n in rows]
    recv_splits = [rows[rank] * w for w in widths]
    group = GroupInput.of(tables, batch)
    if tables:
        tbe = build_tbe(group.rows, group.dims, config, device)
        indices, offsets = (torch.from_numpy(a).to(device) for a in (group.indices, group.offsets))
    samples = []
    for it in range(config.warmup + config.iterations):
        dist.barrier()
        _sync(device)
        t0 = time.perf_counter()
        out = tbe(indices, offsets) if tables else torch.zeros(batch, 0, device=device)
        _sync(device)
        t1 = time.perf_counter()
        # row block e of the pooled output goes to rank e
        received = _exchange(out.detach().reshape(-1), send_splits, recv_splits)
        _sync(device)
        t2 = time.perf_counter()
        grad_back = _exchange(torch.ones_like(received), recv_splits, send_splits)
        _sync(device)
        t3 = time.perf_counter()
        if tables:
            out.backward(grad_back.reshape(batch, widths[rank]))
        _sync(device)
        t4 = time.perf_counter()
        if it >= config.warmup:
            samples.append([t1 - t0, t2 - t1, t3 - t2, t4 - t3])
    ms = np.array(samples) * 1000.0
    totals = ms.sum(axis=1)
    return {
        "fwd_comp": float(np.median(ms[:, 0])),
        "fwd_comm": float(np.median(ms[:, 1])),
        "bwd_comm": float(np.median(ms[:, 2])),
        "bwd_comp": float(np.median(ms[:, 3])),
        "cv": float(totals.std() / totals.mean()) if totals.mean() > 0 else 0.0,
        "device": str(device),
        "rows": group.rows,
        "dims": group.dims,
        "lookups": int(len(group.indices)),
    }


def rank_main(
    run_rank: Callable[[dict], dict], description: str, device_of: Callable[[dict], str]
) -> None:
    """A measuring program's torchrun entry point: read `--job`, join the process group (NCCL
    when the job's device, `device_of(job)`, allows CUDA and it is here, else gloo), run
    `run_rank(job)` on every rank, and rank 0 writes every rank's result to `--out`."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--job", required=True, help="job JSON written by the backend")
    parser.add_argument("--out", required=True, help="where rank 0 writes the per-rank results")
    args = parser.parse_args()
    with open(args.job) as f:
        job = json.load(f)
    cuda = torch.cuda.is_available() and device_of(job) in ("auto", "cuda")
    dist.init_process_group("nccl" if cuda else "gloo")
    try:
        result = run_rank(job)
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, result)
        if dist.get_rank() == 0:
            write_json_atomic(args.out, {"ranks": gathered, "backend": dist.get_backend()})
    finally:
        # what the run built (DMP models hold the group) goes first: a rank whose model
        # outlives the group can abort at exit (docs/torchrec.md)
        gc.collect()
        dist.destroy_process_group()


def main() -> None:
    rank_main(run_rank, __doc__.splitlines()[0], lambda job: job["timing"].get("device", "auto"))


if __name__ == "__main__":
    main()
