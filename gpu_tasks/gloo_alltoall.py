"""All-to-all timing between local processes: what the retired gloo_alltoall study (in git
history at commit ea3bb69) fitted the `cpu-gloo` topology on.

    torchrun --nproc_per_node P -m gpu_tasks.gloo_alltoall --job job.json --out result.json

The job names the message sizes (fp32 elements each rank sends to each peer) and the timed
repeats; every rank times `all_to_all_single` of each size after a barrier, and reports the
median of its repeats after the first two (milliseconds).
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.distributed as dist

from gpu_tasks.distributed import rank_main


def run_rank(job: dict) -> dict:
    world = dist.get_world_size()
    torch.set_num_threads(1)
    medians = []
    for n in job["sizes"]:
        send, recv = torch.randn(n * world), torch.empty(n * world)
        times = []
        for _ in range(job["repeats"]):
            dist.barrier()
            start = time.perf_counter()
            dist.all_to_all_single(recv, send)
            times.append(time.perf_counter() - start)
        medians.append(float(np.median(times[2:]) * 1000))
    return {"ms": medians}


if __name__ == "__main__":
    rank_main(run_rank, __doc__.splitlines()[0], lambda job: "cpu")
