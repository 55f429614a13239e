"""Real TorchRec training steps of sharding plans: one process per device, under torchrun.

    torchrun --nproc_per_node D -m gpu_tasks.dmp_step --job job.json --out result.json

The job (written by `dreamshard.integrations.dmp_backend`) holds the tables (records), the
plans (each a dreamshard plan, `placement/plan_file.py`, or a TorchRec plan in its JSON form,
`integrations/torchrec_export.py`) and the step settings. Every rank builds, for every plan, the
same small training model: an `EmbeddingBagCollection` of the tables, a dense tower over the
pooled embeddings and a binary cross-entropy loss, wrapped in `DistributedModelParallel` with
that plan (fused kernel, its optimizer applied in the backward; SGD for the dense tower, whose
gradients DMP all-reduces). Its input is its share of the tables' traces: bags
[rank x B, (rank + 1) x B) of the global batch, as a KeyedJaggedTensor, the same batch every
step. Rounds interleave the plans: in each round every plan runs `warmup` then `steps`
steps, in an order shuffled per round (the same on every rank); each step starts from a barrier
and ends when this rank's optimizer step is done, so a rank's step time includes its waits in
the all-to-alls. Rank 0 writes, per rank, the median step of every (round, plan): its wall
clock, and this process's CPU time during the step, which leaves out the time it was preempted
by other work on a shared host and the time it was blocked waiting for the other ranks.

This program sits at the top of the stack, as a user's TorchRec program would: it imports the
plan conversion from `dreamshard.integrations.torchrec_export`; nothing in the library imports
it (`integrations/dmp_backend.py` starts it under torchrun).
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from dreamshard.tables.sources import table_from_record
from dreamshard.tables.traces import trace_for
from gpu_tasks.distributed import rank_main

MODULE_PATH = "embedding_bags"  # where the collection sits in the model (the export's default)


class TrainingModel(nn.Module):
    """Embedding bags -> dense tower -> one logit per sample; the loss against fixed labels."""

    def __init__(self, tables: list, hidden: int, device: torch.device):
        from torchrec import EmbeddingBagCollection

        from dreamshard.integrations.torchrec_planner import bag_configs

        super().__init__()
        # the fbgemm backend's precisions: fp16 weights on GPUs, fp32 on the CPU
        configs = bag_configs(tables, "fp16" if device.type == "cuda" else "fp32")
        self.embedding_bags = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
        width = sum(t.dim for t in tables)
        self.dense = nn.Sequential(
            nn.Linear(width, hidden, device=device), nn.ReLU(), nn.Linear(hidden, 1, device=device)
        )

    def forward(self, features, labels: torch.Tensor) -> torch.Tensor:
        pooled = self.embedding_bags(features)
        pooled = pooled.wait() if hasattr(pooled, "wait") else pooled
        logits = self.dense(pooled.values()).squeeze(1)
        return nn.functional.binary_cross_entropy_with_logits(logits, labels)


def rank_batch(tables: list, global_batch: int, rank: int, world: int, device: torch.device):
    """This rank's bags of every table's trace as a KeyedJaggedTensor (keys = table names)."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    per_rank = global_batch // world
    first, last = rank * per_rank, (rank + 1) * per_rank
    values, lengths = [], []
    for table in tables:
        indices, offsets = trace_for(table, global_batch)
        values.append(indices[offsets[first] : offsets[last]])
        lengths.append(np.diff(offsets[first : last + 1]))
    return KeyedJaggedTensor(
        keys=[t.name for t in tables],
        values=torch.from_numpy(np.concatenate(values).astype(np.int64)).to(device),
        lengths=torch.from_numpy(np.concatenate(lengths).astype(np.int32)).to(device),
    )


def torchrec_plan_json(entry: dict, tables: list, device: torch.device) -> dict:
    """The plan in TorchRec's JSON form, its shards on this rank's kind of device."""
    from dreamshard.integrations.torchrec_export import torchrec_plan_dict
    from dreamshard.placement.plan_file import placement_from_plan
    from dreamshard.placement.tasks import PlacementTask

    if "sharding_plan" in entry:
        return entry["sharding_plan"]  # TorchRec's own, made for this kind of device
    plan = entry["placement"]
    task = PlacementTask(
        tuple(tables),
        plan["num_devices"],
        plan["memory_cap_bytes"],
        plan["precision"],
        optimizer=plan.get("optimizer", "sgd"),
    )
    placement = placement_from_plan(task, plan, "the job's plan")
    return torchrec_plan_dict(task, placement, MODULE_PATH, compute_device=device.type)


def build_model(tables: list, plan, job: dict, device: torch.device):
    """The training model sharded by `plan`, with its dense optimizer."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel

    torch.manual_seed(job["seed"])  # the same dense tower on every rank and for every plan
    model = TrainingModel(tables, job["hidden"], device)
    fused = {"optimizer": EmbOptimType[job["optimizer"]], "learning_rate": job["learning_rate"]}
    sharders = [EmbeddingBagCollectionSharder(fused_params=fused)]
    dmp = DistributedModelParallel(model, device=device, plan=plan, sharders=sharders)
    dense = [p for name, p in dmp.named_parameters() if MODULE_PATH not in name]
    return dmp, torch.optim.SGD(dense, lr=job["learning_rate"])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_steps(
    model, optimizer, batch, labels, count: int, device: torch.device
) -> tuple[np.ndarray, float]:
    """`count` training steps: [count, 2] milliseconds (wall clock, this process's CPU time)
    of each, and the last loss."""
    times, loss = [], None
    for _ in range(count):
        dist.barrier()
        _sync(device)
        start, cpu_start = time.perf_counter(), time.process_time()
        loss = model(batch, labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _sync(device)
        times.append((time.perf_counter() - start, time.process_time() - cpu_start))
    last = float(loss.detach()) if loss is not None else float("nan")
    return np.array(times).reshape(-1, 2) * 1000.0, last


def run_rank(job: dict) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    cuda = torch.cuda.is_available() and job["device"] in ("auto", "cuda")
    device = torch.device(f"cuda:{local}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(job["threads"])
        if job["pin"] and hasattr(os, "sched_setaffinity"):
            cores = sorted(os.sched_getaffinity(0))
            os.sched_setaffinity(0, {cores[local % len(cores)]})
    tables = [table_from_record(r, f"job table {i}") for i, r in enumerate(job["tables"])]
    batch = rank_batch(tables, job["global_batch"], rank, world, device)
    labels = torch.from_numpy(
        np.random.default_rng(job["seed"] + rank).integers(0, 2, batch.stride()).astype(np.float32)
    ).to(device)
    from dreamshard.integrations.torchrec_export import sharding_plan_from_dict  # torchrec

    models = []
    for entry in job["plans"]:
        plan = sharding_plan_from_dict(torchrec_plan_json(entry, tables, device))
        models.append(build_model(tables, plan, job, device))
    rounds, plans = job["rounds"], len(models)
    step_ms, cpu_ms, spread = (np.zeros((rounds, plans)) for _ in range(3))
    losses = [[float("nan"), float("nan")] for _ in models]
    order_rng = np.random.default_rng(job["seed"])  # the same order on every rank

    def warm_up(p: int, r: int) -> None:
        model, optimizer = models[p]
        _, loss = run_steps(model, optimizer, batch, labels, job["warmup"], device)
        if r == 0:
            losses[p][0] = loss  # after the first warm-up steps

    def timed_steps(p: int, count: int) -> np.ndarray:
        model, optimizer = models[p]
        times, losses[p][1] = run_steps(model, optimizer, batch, labels, count, device)
        return times

    for r in range(rounds):
        order = order_rng.permutation(plans)
        if job["interleave"] == "steps":
            # every plan warmed up, then one timed step of each in turn, `steps` times: a slow
            # moment of the host falls on every plan alike
            for p in order:
                warm_up(p, r)
            parts = [[timed_steps(p, 1) for p in order] for _ in range(job["steps"])]
            timed = {p: np.concatenate([step[i] for step in parts]) for i, p in enumerate(order)}
        else:  # in turns: each plan's warm-up and timed steps together
            timed = {}
            for p in order:
                warm_up(p, r)
                timed[p] = timed_steps(p, job["steps"])
        for p, times in timed.items():
            step_ms[r, p], cpu_ms[r, p] = np.median(times, axis=0)
            spread[r, p] = times[:, 0].std() / times[:, 0].mean()
    return {
        "device": str(device),
        "step_ms": step_ms.tolist(),
        "cpu_ms": cpu_ms.tolist(),
        "cv": spread.tolist(),
        "loss": losses,
        "sharding_types": [sorted(sharding_types(m)) for m, _ in models],
    }


def sharding_types(model) -> set[str]:
    return {s.sharding_type for module in model.plan.plan.values() for s in module.values()}


def main() -> None:
    rank_main(run_rank, __doc__.splitlines()[0], lambda job: job["device"])


if __name__ == "__main__":
    main()
