"""`DreamShardPlanner.tune` on the DMP backend's training model, as a user's program calls it:
one process per device, under torchrun.

    torchrun --nproc_per_node D -m gpu_tasks.tune_step --job job.json --out result.json

The job holds the tables (records), the global batch, the step settings of `dmp_step` and the
tune's (`candidates`, `seconds`, `warmup`, `steps`). Every rank builds `dmp_step`'s training
model unsharded (the collection on the meta device), its share of the traces as its batch, and
a `DreamShardPlanner` on TorchRec's default topology of the world's devices, planning from rank
0's batch; the tune measures the planner's candidates (TorchRec's plan first) in the model's own
steps, each copy with its own dense SGD. Rank 0 writes the winner's plan in TorchRec's JSON form,
its name, its ratio and interval to the reference, and what was measured and skipped.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from dreamshard.tables.sources import table_from_record
from gpu_tasks.distributed import rank_main
from gpu_tasks.dmp_step import MODULE_PATH, TrainingModel, rank_batch


def run_rank(job: dict) -> dict:
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import Topology

    from dreamshard.integrations.dmp_planner import DreamShardPlanner
    from dreamshard.integrations.torchrec_export import sharding_plan_to_dict

    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(job["threads"])
    device = torch.device("cpu")
    tables = [table_from_record(r, f"job table {i}") for i, r in enumerate(job["tables"])]
    batch = rank_batch(tables, job["global_batch"], rank, world, device)
    labels = torch.from_numpy(
        np.random.default_rng(job["seed"] + rank).integers(0, 2, batch.stride()).astype(np.float32)
    )
    planner_batch = rank_batch(tables, job["global_batch"], 0, world, device)
    torch.manual_seed(job["seed"])
    model = TrainingModel(tables, job["hidden"], device)
    fused = {"optimizer": EmbOptimType[job["optimizer"]], "learning_rate": job["learning_rate"]}
    sharders = [EmbeddingBagCollectionSharder(fused_params=fused)]
    planner = DreamShardPlanner(
        Topology(world_size=world, compute_device="cpu"), batches=[planner_batch], hardware="cpu"
    )
    optimizers: dict[int, torch.optim.Optimizer] = {}

    def step(sharded, inputs) -> None:
        dense = optimizers.get(id(sharded))
        if dense is None:
            params = [p for n, p in sharded.named_parameters() if MODULE_PATH not in n]
            dense = optimizers[id(sharded)] = torch.optim.SGD(params, lr=job["learning_rate"])
        loss = sharded(*inputs)
        loss.backward()
        dense.step()
        dense.zero_grad(set_to_none=True)

    result = planner.tune(
        model,
        sharders,
        dist.GroupMember.WORLD,
        [(batch, labels)],
        step,
        steps=job["tune_steps"],
        warmup=job["tune_warmup"],
        candidates=job["candidates"],
        seconds=job["seconds"],
        seed=job["seed"],
    )
    return {
        "device": str(device),
        "name": result.name,
        "plan": sharding_plan_to_dict(result.plan, "tune", "tune", world),
        "ratio": result.ratio,
        "interval": list(result.interval),
        "names": list(result.names),
        "ratios": list(result.ratios),
        "skipped": [list(s) for s in result.skipped],
        "rounds": result.rounds,
        "finalist": result.finalist,
        "confirmation": list(result.confirmation) if result.confirmation else None,
        "confirm rounds": len(result.confirm_ms),
        "seconds": result.seconds,
        "reason": result.reason,
    }


def main() -> None:
    rank_main(run_rank, __doc__.splitlines()[0], lambda job: "cpu")


if __name__ == "__main__":
    main()
