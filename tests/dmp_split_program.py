"""The program `test_dmp_split.py` runs on 2 gloo ranks under torchrun: DistributedModelParallel
with sharding plans exported by `integrations.torchrec_export` (split tables among them), one
training step each.

    python -m torch.distributed.run --nproc_per_node 2 -m tests.dmp_split_program --job J --out R

(from the repository root, or with it on PYTHONPATH).

The job holds the tables (name, rows, dim) and the plans (TorchRec's JSON form, shards on the
cpu). For every plan each rank builds an EmbeddingBagCollection sharded by it, writes known
weights into its shards (W[i, j] of the whole table), runs a forward on its own batch and a
backward of the pooled outputs' sum (the fused EXACT_SGD updates the shards in the backward),
and reports its shards (offsets, sizes), whether the pooled outputs equal those of the whole
tables, and whether every shard now holds W - lr x (how often each row was looked up in the
global batch) / world size, which is what one SGD step on that loss gives in TorchRec, whose
all-to-all divides embedding gradients by the world size. Rank 0 writes every rank's report.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
from fbgemm_gpu.split_embedding_configs import EmbOptimType
from torch import nn
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from dreamshard.integrations.torchrec_export import DEFAULT_MODULE_PATH, sharding_plan_from_dict
from gpu_tasks.distributed import rank_main

LEARNING_RATE = 0.5
BATCH = 16  # bags per rank
BAG = 3  # lookups per bag


class Bags(nn.Module):
    """The collection where the exported plans expect it (`DEFAULT_MODULE_PATH`)."""

    def __init__(self, tables: list[dict]) -> None:
        super().__init__()
        configs = [
            EmbeddingBagConfig(
                name=t["name"],
                embedding_dim=t["dim"],
                num_embeddings=t["rows"],
                feature_names=[t["name"]],
            )
            for t in tables
        ]
        setattr(self, DEFAULT_MODULE_PATH, EmbeddingBagCollection(configs, torch.device("meta")))

    def forward(self, features: KeyedJaggedTensor):
        pooled = getattr(self, DEFAULT_MODULE_PATH)(features)
        return pooled.wait() if hasattr(pooled, "wait") else pooled


def known_weights(rows: int, dim: int, salt: int) -> torch.Tensor:
    """Small exact floats that differ by row and column."""
    i, j = torch.arange(rows).unsqueeze(1), torch.arange(dim).unsqueeze(0)
    return (((i * 7 + j * 3 + salt) % 17) / 8.0).float()


def global_ids(tables: list[dict], world: int) -> dict[str, np.ndarray]:
    """Every rank's bags of every table, [world, BATCH, BAG] (the same on every rank)."""
    rng = np.random.default_rng(0)
    return {t["name"]: rng.integers(0, t["rows"], (world, BATCH, BAG)) for t in tables}


def rank_batch(tables: list[dict], ids: dict[str, np.ndarray], rank: int) -> KeyedJaggedTensor:
    return KeyedJaggedTensor(
        keys=[t["name"] for t in tables],
        values=torch.from_numpy(np.concatenate([ids[t["name"]][rank].ravel() for t in tables])),
        lengths=torch.full((len(tables) * BATCH,), BAG, dtype=torch.int32),
    )


def local_shards(model) -> dict[str, list]:
    """This rank's shards of each table: [(offsets, sizes, tensor)]."""
    shards = {}
    for key, value in model.state_dict().items():
        if key.startswith(f"{DEFAULT_MODULE_PATH}.") and hasattr(value, "local_shards"):
            name = key.split(".")[-2]
            shards[name] = [
                (list(s.metadata.shard_offsets), list(s.metadata.shard_sizes), s.tensor)
                for s in value.local_shards()
            ]
    return shards


def run_plan(tables: list[dict], data: dict, rank: int, world: int) -> dict:
    torch.manual_seed(0)
    fused = {"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": LEARNING_RATE}
    model = DistributedModelParallel(
        Bags(tables),
        device=torch.device("cpu"),
        plan=sharding_plan_from_dict(data),
        sharders=[EmbeddingBagCollectionSharder(fused_params=fused)],
    )
    weights = {t["name"]: known_weights(t["rows"], t["dim"], k) for k, t in enumerate(tables)}
    for name, shards in local_shards(model).items():
        for (r0, c0), (rows, cols), tensor in shards:
            tensor.copy_(weights[name][r0 : r0 + rows, c0 : c0 + cols])
    ids = global_ids(tables, world)
    pooled = model(rank_batch(tables, ids, rank))
    expected = torch.cat(
        [weights[t["name"]][torch.from_numpy(ids[t["name"]][rank])].sum(1) for t in tables], 1
    )
    forward_ok = bool(torch.allclose(pooled.values(), expected))
    pooled.values().sum().backward()  # the fused optimizer steps here

    report, updated = {}, True
    for name, shards in local_shards(model).items():
        counts = torch.from_numpy(np.bincount(ids[name].ravel(), minlength=weights[name].shape[0]))
        # TorchRec divides embedding gradients by the world size (comm_ops.GRADIENT_DIVISION,
        # as DDP averages dense ones): each lookup of a row adds 1 / world to its gradient
        stepped = weights[name] - LEARNING_RATE * counts.unsqueeze(1).float() / world
        for (r0, c0), (rows, cols), tensor in shards:
            updated &= bool(torch.allclose(tensor, stepped[r0 : r0 + rows, c0 : c0 + cols]))
        if shards:  # a table with no shard here still has an (empty) entry
            report[name] = [[offsets, sizes] for offsets, sizes, _ in shards]
    return {
        "shards": report,
        "forward_matches": forward_ok,
        "step_updates": updated,
        "sharding_types": {
            n: s.sharding_type for n, s in model.plan.plan[DEFAULT_MODULE_PATH].items()
        },
    }


def run_rank(job: dict) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    return {"plans": [run_plan(job["tables"], data, rank, world) for data in job["plans"]]}


if __name__ == "__main__":
    rank_main(run_rank, __doc__.splitlines()[0], lambda job: "cpu")
