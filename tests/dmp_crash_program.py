"""`gpu_tasks.dmp_step` under torchrun, except that in a launch measuring a plan made by the
method "crash" rank 1 dies once the ranks are up (`test_dmp_collect.py`: a launch that fails
loses only its own placements).

    python -m torch.distributed.run --nproc_per_node 2 -m tests.dmp_crash_program --job J --out R
"""

from __future__ import annotations

import torch.distributed as dist

from gpu_tasks import dmp_step
from gpu_tasks.distributed import rank_main


def run_rank(job: dict) -> dict:
    methods = {entry.get("placement", {}).get("method") for entry in job["plans"]}
    if "crash" in methods and dist.get_rank() == 1:
        raise RuntimeError("rank 1 lost its device in the middle of the launch")
    return dmp_step.run_rank(job)


if __name__ == "__main__":
    rank_main(run_rank, "a DMP launch that can crash", lambda job: job["device"])
