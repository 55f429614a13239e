"""The program `test_dmp_planner.py` runs on 2 gloo ranks under torchrun: a small TorchRec model
planned by `DreamShardPlanner.collective_plan`, trained a few steps by DistributedModelParallel.

    python -m torch.distributed.run --nproc_per_node 2 -m tests.dmp_planner_program --job J --out R

(from the repository root, or with it on PYTHONPATH).

The job names the method (and model file); rank 0 writes the plan, the task the planner solved,
the loss of every step (mean over ranks), and what each rank heard from a collective plan that
cannot succeed (a table larger than all devices together).
"""

from __future__ import annotations

import argparse
import gc
import json

import torch
import torch.distributed as dist
from fbgemm_gpu.split_embedding_configs import EmbOptimType
from torch import nn
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.planner import Topology
from torchrec.optim.optimizers import in_backward_optimizer_filter
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from dreamshard.errors import DreamshardError
from dreamshard.files import write_json_atomic
from dreamshard.integrations.dmp_planner import DreamShardPlanner
from dreamshard.integrations.torchrec_export import sharding_plan_to_dict
from dreamshard.tables.sources import table_to_dict

# (name, rows, dim, bag length): "user" decides the label, the others are noise to learn past.
TABLES = (("user", 64, 16, 1), ("item", 4000, 16, 4), ("topic", 200, 8, 2), ("geo", 1000, 8, 3))
BATCH = 128  # per rank
# Bytes per device: the tables take 0.31 MiB in all, "item" 0.24 MiB of it, so no device holds
# "item" whole and every plan splits it column-wise (DMP trains column-wise shards on the CPU).
MEMORY = 160 * 2**10
LEARNING_RATE = 0.5  # dense tower
EMBEDDING_RATE = 5.0  # the fused optimizer of the shards (each row sees a few samples)


class TinyRecModel(nn.Module):
    """An EmbeddingBagCollection (on the meta device: DMP makes its shards) and a dense tower."""

    def __init__(self, tables=TABLES) -> None:
        super().__init__()
        configs = [
            EmbeddingBagConfig(name=n, embedding_dim=d, num_embeddings=r, feature_names=[n])
            for n, r, d, _ in tables
        ]
        self.sparse = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
        width = sum(d for _, _, d, _ in tables)
        self.dense = nn.Sequential(nn.Linear(width, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, features: KeyedJaggedTensor) -> torch.Tensor:
        return self.dense(self.sparse(features).values()).squeeze(-1)


def batch(seed: int, tables=TABLES) -> tuple[KeyedJaggedTensor, torch.Tensor]:
    """Fixed-length bags of skewed ids; the label is the parity of the user id."""
    g = torch.Generator().manual_seed(seed)
    values, lengths = [], []
    for _, rows, _, bag in tables:
        ids = (torch.rand(BATCH * bag, generator=g) ** 3 * rows).long()  # hot low ids
        values.append(ids)
        lengths.append(torch.full((BATCH,), bag))
    keys = [n for n, _, _, _ in tables]
    kjt = KeyedJaggedTensor.from_lengths_sync(keys, torch.cat(values), torch.cat(lengths))
    return kjt, (values[0] % 2).float()


def refused_plan(topology) -> str | None:
    """What a plan that cannot succeed (a table larger than all devices together) raises: every
    rank must hear rank 0's error, none may wait for a plan forever."""
    huge = (*TABLES, ("huge", 40_000, 16, 1))  # 2.4 MiB: more than both devices hold
    try:
        DreamShardPlanner(topology, method="lookup", reserve=False).collective_plan(
            TinyRecModel(huge), None, dist.GroupMember.WORLD
        )
    except DreamshardError as exc:
        return str(exc)
    return None


def plan_and_train(job: dict, topology) -> dict:
    """Plan with `DreamShardPlanner.collective_plan`, train `job["steps"]` steps under DMP."""
    rank, world = dist.get_rank(), dist.get_world_size()
    model = TinyRecModel()
    samples = [batch(1000 + n)[0] for n in range(2)]
    planner = DreamShardPlanner(
        topology, method=job["method"], model=job.get("model"), batches=samples, reserve=False
    )
    sharders = [
        EmbeddingBagCollectionSharder(
            fused_params={"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": EMBEDDING_RATE}
        )
    ]
    task = planner.task(model, sharders)
    plan = planner.collective_plan(model, sharders, dist.GroupMember.WORLD)
    dmp = DistributedModelParallel(model, device=torch.device("cpu"), plan=plan, sharders=sharders)
    dense = dict(in_backward_optimizer_filter(dmp.named_parameters()))
    optimizer = torch.optim.SGD(dense.values(), lr=LEARNING_RATE)
    data = [batch(10 * n + rank) for n in range(4)]
    losses = []
    for step in range(job["steps"]):
        features, labels = data[step % len(data)]
        loss = nn.functional.binary_cross_entropy_with_logits(dmp(features), labels)
        optimizer.zero_grad()
        loss.backward()  # the embedding shards update inside backward (fused optimizer)
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    return {
        "plan": sharding_plan_to_dict(plan),
        "task": {
            "tables": [table_to_dict(t) for t in task.tables],
            "num_devices": task.num_devices,
            "memory_cap_bytes": task.memory_cap_bytes,
            "precision": task.precision,
        },
        "dense_parameters": sorted(dense),
        "losses": losses,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with open(args.job) as f:
        job = json.load(f)
    dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())
    topology = Topology(world_size=dist.get_world_size(), compute_device="cpu", ddr_cap=MEMORY)
    refused = refused_plan(topology)
    result = plan_and_train(job, topology)
    heard = [None] * dist.get_world_size()
    dist.all_gather_object(heard, refused)
    if dist.get_rank() == 0:
        write_json_atomic(args.out, {**result, "refused": heard})
    # The sharded model is gone with plan_and_train; collected before the process group goes,
    # or a rank's exit can abort ("terminate called without an active exception", about 1 run
    # in 3 here when the model outlived destroy_process_group).
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
