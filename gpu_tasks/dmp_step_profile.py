"""Where a DMP training step's time goes, under the PyTorch profiler. Nothing launches it now:
the old torchrec_e2e script's `--profile` step profile that did was retired with that script
(git history, ea3bb69); it runs by hand under torchrun.

    torchrun --nproc_per_node D -m gpu_tasks.dmp_step_profile --job job.json --out result.json

The job is a `dmp` backend job (`dreamshard/integrations/dmp_backend.py`) with the plans' names
beside it. Each rank builds each plan's training model exactly as `gpu_tasks/dmp_step.py`
does, runs the job's warm-up steps, then profiles its timed steps with the PyTorch profiler
(CPU), and reports the self CPU time per step of every operator, grouped by `CATEGORIES`.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

from dreamshard.integrations.torchrec_export import sharding_plan_from_dict
from dreamshard.tables.sources import table_from_record
from gpu_tasks.distributed import rank_main
from gpu_tasks.dmp_step import build_model, rank_batch, run_steps, torchrec_plan_json

# An operator's category: the first whose words its name contains (lower case); else "other"
# (TorchRec's and Python's per-step work: awaitables, KJT permutes and splits, copies).
CATEGORIES = (
    ("barrier", ("barrier",)),
    ("embedding kernels", ("split_embedding", "bounds_check")),
    ("collectives", ("all2all", "alltoall", "allreduce", "all_reduce", "awaitable", "c10d")),
    ("dense tower and loss", ("addmm", "aten::mm", "linear", "relu", "threshold", "cross")),
)


def category(op: str) -> str:
    name = op.lower()
    return next((c for c, words in CATEGORIES if any(w in name for w in words)), "other")


def run_rank(job: dict) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    torch.set_num_threads(job["threads"])
    tables = [table_from_record(r, f"job table {i}") for i, r in enumerate(job["tables"])]
    batch = rank_batch(tables, job["global_batch"], rank, world, device)
    rng = np.random.default_rng(job["seed"] + rank)
    labels = torch.from_numpy(rng.integers(0, 2, batch.stride()).astype(np.float32))
    found = {}
    for name, entry in zip(job["names"], job["plans"]):
        model, optimizer = build_model(
            tables, sharding_plan_from_dict(torchrec_plan_json(entry, tables, device)), job, device
        )
        run_steps(model, optimizer, batch, labels, job["warmup"], device)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            timed, _ = run_steps(model, optimizer, batch, labels, job["steps"], device)
        parts: dict[str, float] = {}
        for event in prof.key_averages():
            key = category(event.key)
            parts[key] = parts.get(key, 0.0) + event.self_cpu_time_total / 1000 / job["steps"]
        found[name] = {"step_ms": float(np.median(timed[:, 0])), "parts_ms": parts}
        del model, optimizer
    return found


if __name__ == "__main__":
    rank_main(run_rank, __doc__.splitlines()[0], lambda job: "cpu")
