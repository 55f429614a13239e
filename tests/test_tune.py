"""`DreamShardPlanner.tune`: bad input refused in one line before anything is built, and a
measured tune on 2 gloo ranks that skips the candidates that fail, agrees on every rank and
leaves the user's model as it was."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import socket
import time
import weakref
from datetime import timedelta

import pytest

pytest.importorskip("torchrec")  # `make test` installs it

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from fbgemm_gpu.split_embedding_configs import EmbOptimType  # noqa: E402
from torch import nn  # noqa: E402
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig  # noqa: E402
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # noqa: E402
from torchrec.distributed.planner import Topology  # noqa: E402
from torchrec.optim.optimizers import in_backward_optimizer_filter  # noqa: E402
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor  # noqa: E402

from dreamshard.errors import DreamshardError  # noqa: E402
from dreamshard.integrations.dmp_planner import DreamShardPlanner  # noqa: E402
from dreamshard.integrations.torchrec_export import sharding_plan_to_dict  # noqa: E402

# (name, rows, dim): small enough that a DMP build and a step take milliseconds
TABLES = [("t0", 2000, 16), ("t1", 1500, 8), ("t2", 800, 16), ("t3", 400, 8)]
TABLES += [("t4", 200, 8), ("t5", 100, 4)]
BATCH = 32  # per rank
STEP_FAILS, BUILD_FAILS = 2, 3  # the candidates (1: the reference) that raise, in build order


class SmallModel(nn.Module):
    """An EmbeddingBagCollection with real CPU weights and a dense tower."""

    def __init__(self) -> None:
        super().__init__()
        configs = [
            EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=[n])
            for n, r, d in TABLES
        ]
        self.sparse = EmbeddingBagCollection(tables=configs, device=torch.device("cpu"))
        self.dense = nn.Linear(sum(d for _, _, d in TABLES), 1)

    def forward(self, features: KeyedJaggedTensor) -> torch.Tensor:
        return self.dense(self.sparse(features).values()).squeeze(-1)


def batch(seed: int) -> tuple[KeyedJaggedTensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    values = [(torch.rand(BATCH * 2, generator=g) ** 3 * r).long() for _, r, _ in TABLES]
    lengths = torch.full((BATCH * len(TABLES),), 2)
    kjt = KeyedJaggedTensor.from_lengths_sync([n for n, _, _ in TABLES], torch.cat(values), lengths)
    return kjt, (values[0][::2] % 2).float()


class CountingSharder(EmbeddingBagCollectionSharder):
    """The default sharder that numbers the collections it shards (one per candidate, in the
    candidates' order, on every rank) and fails the `BUILD_FAILS`-th."""

    def __init__(self) -> None:
        super().__init__(fused_params={"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": 0.1})
        self.built = 0

    def shard(self, module, params, env, device=None, module_fqn=None):
        self.built += 1
        if self.built == BUILD_FAILS:
            raise RuntimeError("this candidate's shards cannot be made\nsecond line")
        sharded = super().shard(module, params, env, device, module_fqn)
        sharded.build_index = self.built
        return sharded


optimizers = weakref.WeakKeyDictionary()  # one dense optimizer per sharded copy


def train_step(model, data) -> None:
    """The user's step; the `STEP_FAILS`-th candidate's raises on every rank."""
    index = next(m.build_index for m in model.modules() if hasattr(m, "build_index"))
    if index == STEP_FAILS:
        raise ValueError("step refused for this candidate")
    if model not in optimizers:
        dense = dict(in_backward_optimizer_filter(model.named_parameters())).values()
        optimizers[model] = torch.optim.SGD(dense, lr=0.1)
    features, labels = data
    loss = nn.functional.binary_cross_entropy_with_logits(model(features), labels)
    optimizers[model].zero_grad()
    loss.backward()
    optimizers[model].step()


def planner(world: int = 2) -> DreamShardPlanner:
    topology = Topology(world_size=world, compute_device="cpu")
    return DreamShardPlanner(topology, batches=[batch(0)[0]], hardware="cpu")


def rank_main(rank: int, port: int, out: str) -> None:
    """One rank of the 2-rank tune; writes what it got to OUT.rank."""
    torch.set_num_threads(1)
    os.environ["DREAMSHARD_HOME"] = os.path.join(os.path.dirname(out), "state")
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=2,
        timeout=timedelta(seconds=60),  # a hang fails the test instead of stalling it
    )
    torch.manual_seed(0)  # the same user model on both ranks
    model = SmallModel()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    began = time.monotonic()
    result = planner().tune(
        model,
        [CountingSharder()],
        dist.GroupMember.WORLD,
        [batch(10 * n + rank) for n in range(2)],
        train_step,
        steps=3,
        warmup=1,
        rounds=3,
        tracking=f"sqlite:///{os.path.dirname(out)}/mlflow.db",
    )
    seconds = time.monotonic() - began
    after = model.state_dict()
    same = before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in after)
    got = {
        "plan": sharding_plan_to_dict(result.plan),
        "fields": (result.name, result.names, result.costs_ms, result.skipped, result.reason),
        "confirming": (result.finalist, result.confirm_ms, result.confirmation),
        "ratio": (result.ratio, result.interval),
        "unchanged": same,
        "summary": result.summary(),
        "seconds": seconds,
        "tune_seconds": result.seconds,
    }
    with open(f"{out}.{rank}", "wb") as f:
        pickle.dump(got, f)
    dist.barrier()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_tune_on_two_gloo_ranks_skips_failing_candidates_and_agrees(tmp_path):
    out = str(tmp_path / "result")
    ctx = multiprocessing.get_context("spawn")
    port = free_port()
    ranks = [ctx.Process(target=rank_main, args=(r, port, out)) for r in range(2)]
    for p in ranks:
        p.start()
    try:
        for p in ranks:
            p.join(timeout=150)
    finally:
        for p in ranks:
            if p.is_alive():
                p.kill()  # by its own handle: only the processes this test started
    assert [p.exitcode for p in ranks] == [0, 0]
    got = []
    for r in range(2):
        with open(f"{out}.{r}", "rb") as f:
            got.append(pickle.load(f))
    print(got[0]["summary"], f"\ntune {got[0]['tune_seconds']:.1f} s", sep="")
    assert got[0]["plan"] == got[1]["plan"]
    assert got[0]["fields"] == got[1]["fields"] and got[0]["ratio"] == got[1]["ratio"]
    assert got[0]["unchanged"] and got[1]["unchanged"]
    name, names, costs, skipped, _ = got[0]["fields"]
    assert names[0] == "torchrec" or names[0].startswith("heuristic ")
    assert name in names and len(costs) == 3 and all(len(row) == len(names) for row in costs)
    assert all(c > 0 for row in costs for c in row)
    errors = dict(skipped)
    assert len(skipped) == 2 and not set(errors) & set(names)
    assert sorted(errors.values()) == [
        "RuntimeError: this candidate's shards cannot be made",
        "ValueError: step refused for this candidate",
    ]
    lo, hi = got[0]["ratio"][1]
    assert lo <= got[0]["ratio"][0] <= hi
    assert got[0]["confirming"] == got[1]["confirming"]
    finalist, confirm_ms, confirmation = got[0]["confirming"]
    if finalist is not None:  # the screening's best, measured again in fresh copies
        assert finalist in names[1:] and len(confirm_ms) == 3
        assert all(len(row) == 2 and min(row) > 0 for row in confirm_ms)
    if name == names[0]:
        assert got[0]["ratio"][0] == 1.0
    else:  # a candidate replaces the reference only beyond the noise of the fresh rounds
        assert name == finalist and (got[0]["ratio"][0], lo, hi) == confirmation and hi < 1.0

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.get_experiment_by_name("dreamshard-tune")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.data.params["winner"] == name and run.data.params["rounds"] == "3"


@pytest.mark.parametrize(
    "change, words",
    [
        ({"world": 2}, "process group of 1 ranks but the planner's topology has 2"),
        ({"batches": []}, "no batches"),
        ({"batches": None}, "no batches"),
        ({"candidates": 0}, "candidates=0"),
        ({"steps": 3, "warmup": 3}, "raise steps or lower warmup"),
        ({"model": nn.Linear(2, 1)}, "no EmbeddingBagCollection"),
    ],
)
def test_bad_input_is_one_line_before_anything_is_built(change, words):
    pg = dist.ProcessGroupGloo(dist.HashStore(), 0, 1)  # a real group of one rank
    built = []
    args = {
        "model": SmallModel(),
        "batches": [batch(0)],
        **{k: v for k, v in change.items() if k in ("model", "batches")},
    }
    options = {k: v for k, v in change.items() if k in ("candidates", "steps", "warmup")}
    with pytest.raises(DreamshardError, match=words):
        planner(change.get("world", 1)).tune(
            args["model"], None, pg, args["batches"], lambda m, b: built.append(m), **options
        )
    assert not built
