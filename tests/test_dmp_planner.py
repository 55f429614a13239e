"""DreamShardPlanner: TorchRec models' tables read and placed, plans DistributedModelParallel
trains with on 2 gloo ranks under torchrun, and one clear line for what it cannot plan."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torchrec")  # `make test` installs it

import torch  # noqa: E402
from fbgemm_gpu.split_embedding_configs import EmbOptimType  # noqa: E402
from torch import nn  # noqa: E402
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig  # noqa: E402
from torchrec.distributed.embedding import EmbeddingCollectionSharder  # noqa: E402
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # noqa: E402
from torchrec.distributed.planner import Topology  # noqa: E402
from torchrec.distributed.test_utils.emb_sharder import TestEBCSharder  # noqa: E402
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor  # noqa: E402

from dreamshard.costs.torchrun import run_job  # noqa: E402
from dreamshard.errors import DreamshardError  # noqa: E402
from dreamshard.integrations.dmp_planner import DreamShardPlanner  # noqa: E402
from dreamshard.integrations.torchrec_export import torchrec_plan_dict  # noqa: E402
from dreamshard.integrations.torchrec_tables import (  # noqa: E402
    DEFAULT_POOLING_FACTOR,
    table_spec_from_torchrec,
    write_table_spec,
)
from dreamshard.learn.costnet import CostNet  # noqa: E402
from dreamshard.learn.model_file import DreamShardModel, save_model  # noqa: E402
from dreamshard.learn.policy import PlacementPolicy  # noqa: E402
from dreamshard.placement.registry import place  # noqa: E402
from dreamshard.placement.tasks import PlacementTask  # noqa: E402
from dreamshard.tables.sources import load_tables, table_from_record  # noqa: E402
from dreamshard.tables.table import DEFAULT_HISTOGRAM  # noqa: E402
from tests.dmp_planner_program import MEMORY, TABLES, TinyRecModel, batch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20


def cpu_topology(world: int = 2, memory: int = 64 * MIB) -> Topology:
    return Topology(world_size=world, compute_device="cpu", ddr_cap=memory)


def ebc(*tables: tuple[str, int, int, list[str]]) -> EmbeddingBagCollection:
    configs = [
        EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=f)
        for n, r, d, f in tables
    ]
    return EmbeddingBagCollection(tables=configs, device=torch.device("meta"))


class TwoTowers(nn.Module):
    """Two collections deep in the model, both with a table called "shared"."""

    def __init__(self) -> None:
        super().__init__()
        self.user = nn.ModuleDict(
            {"bags": ebc(("shared", 1000, 16, ["a", "b"]), ("clicks", 500, 8, ["c"]))}
        )
        self.item = ebc(("shared", 2000, 32, ["d"]))
        self.head = nn.Linear(4, 1)


def kjt(features: dict[str, list[list[int]]]) -> KeyedJaggedTensor:
    """Bags of ids per feature (every feature with the same number of bags)."""
    keys = list(features)
    lengths = [len(bag) for k in keys for bag in features[k]]
    values = [i for k in keys for bag in features[k] for i in bag]
    return KeyedJaggedTensor.from_lengths_sync(
        keys, torch.tensor(values, dtype=torch.long), torch.tensor(lengths, dtype=torch.long)
    )


def placed_entries(task: PlacementTask, method: str, model=None) -> dict[str, dict]:
    """What `place` gives for the task, as the export writes it: {table name: its entry}."""
    return torchrec_plan_dict(task, place(task, method, model=model), "m")["plan"]["m"]


def module_ranks(plan) -> dict[tuple[str, str], list[int]]:
    return {
        (path, name): list(sharding.ranks)
        for path, module_plan in plan.plan.items()
        for name, sharding in module_plan.items()
    }


def test_tables_come_from_every_collection_with_statistics_from_the_batches():
    batches = [
        # a and b both read table "shared" (1 + 2 lookups a sample); c's ids are all distinct;
        # d's each appear exactly twice, so its histogram is all in bin 1, (1, 2]
        kjt(
            {"a": [[1], [2]], "b": [[3, 4], [5, 6]], "c": [[7, 8], [9, 10]], "d": [[1, 1], [2, 2]]}
        ),
        kjt({"a": [[1], [2]], "b": [[3, 4], [5, 6]], "c": [[11], [12]], "d": [[3, 3], [4, 4]]}),
    ]
    tables = {t.name: t for t in table_spec_from_torchrec(TwoTowers(), batches)}
    # the name "shared" repeats, so every table is named by its collection's path
    assert set(tables) == {"user.bags.shared", "user.bags.clicks", "item.shared"}
    shared, clicks, item = (
        tables["user.bags.shared"],
        tables["user.bags.clicks"],
        tables["item.shared"],
    )
    assert (shared.rows, shared.dim, item.rows, item.dim) == (1000, 16, 2000, 32)
    assert shared.pooling_factor == pytest.approx(3.0)  # lookups per sample over its features
    assert clicks.pooling_factor == pytest.approx(1.5)  # bags of 2 in one batch, 1 in the other
    assert clicks.histogram[0] == pytest.approx(1.0)
    assert item.histogram[1] == pytest.approx(1.0)
    assert sum(shared.histogram) == pytest.approx(1.0)


def test_without_batches_tables_get_the_documented_defaults():
    tables = table_spec_from_torchrec(TwoTowers())
    assert [t.pooling_factor for t in tables] == [DEFAULT_POOLING_FACTOR] * 3
    assert all(t.histogram == DEFAULT_HISTOGRAM for t in tables)


def test_a_table_spec_written_from_a_model_is_what_the_cli_places(cli, tmp_path):
    path = tmp_path / "tables.json"
    written = write_table_spec(TinyRecModel(), path, [batch(0)[0]])
    assert load_tables(path) == written
    assert [(t.name, t.rows, t.dim) for t in written] == [(n, r, d) for n, r, d, _ in TABLES]
    assert [t.pooling_factor for t in written] == [float(b) for *_, b in TABLES]
    done = cli("place", "--tables", str(path), "--devices", "2", "--mem-gb", "1")
    assert done.returncode == 0, done.stderr


def test_a_plan_per_collection_matches_the_placement_of_the_same_task():
    model = TwoTowers()
    planner = DreamShardPlanner(cpu_topology(memory=MIB), method="size", reserve=False)
    plan = planner.plan(model)
    task = planner.task(model)
    assert task.memory_cap_bytes == MIB and task.num_devices == 2
    owners = {
        "user.bags.shared": ("user.bags", "shared"),
        "user.bags.clicks": ("user.bags", "clicks"),
        "item.shared": ("item", "shared"),
    }
    expected = placed_entries(task, "size")
    assert module_ranks(plan) == {owners[name]: e["ranks"] for name, e in expected.items()}
    assert len({r for ranks in module_ranks(plan).values() for r in ranks}) == 2  # 0.71 MiB
    for module_plan in plan.plan.values():
        for sharding in module_plan.values():
            for shard in sharding.sharding_spec.shards:
                assert str(shard.placement) in {"rank:0/cpu", "rank:1/cpu"}


def test_gpu_topologies_give_local_cuda_devices_and_their_hbm():
    topology = Topology(world_size=4, local_world_size=2, compute_device="cuda", hbm_cap=MIB)
    planner = DreamShardPlanner(topology, method="lookup", reserve=False)
    plan = planner.plan(TinyRecModel())
    assert planner.task(TinyRecModel()).memory_cap_bytes == MIB
    for sharding in plan.plan["sparse"].values():
        rank = sharding.ranks[0]
        assert str(sharding.sharding_spec.shards[0].placement) == f"rank:{rank}/cuda:{rank % 2}"


def test_torchrecs_reservation_leaves_less_memory_and_can_be_turned_off():
    model = TinyRecModel()
    samples = [batch(0)[0]]
    kept = DreamShardPlanner(cpu_topology(), method="lookup", batches=samples).task(model)
    whole = DreamShardPlanner(cpu_topology(), "lookup", batches=samples, reserve=False).task(model)
    assert whole.memory_cap_bytes == 64 * MIB
    assert 0 < kept.memory_cap_bytes < whole.memory_cap_bytes


def fused(optimizer) -> list:
    return [EmbeddingBagCollectionSharder(fused_params={"optimizer": optimizer})]


def test_the_sharders_fused_optimizer_keeps_state_the_plan_counts():
    planner = DreamShardPlanner(cpu_topology(memory=MIB), method="lookup", reserve=False)
    model = TinyRecModel()
    plain = planner.task(model)
    adam = planner.task(model, fused(EmbOptimType.ADAM))
    assert (plain.optimizer, adam.optimizer) == ("sgd", "adam")
    assert planner.task(model, fused(EmbOptimType.EXACT_ROWWISE_ADAGRAD)).optimizer == (
        "rowwise_adagrad"
    )
    assert adam.table_bytes().sum() == 3 * plain.table_bytes().sum()  # fp32 weights, 2 moments
    with pytest.raises(DreamshardError, match="pass optimizer="):
        planner.task(model, fused(EmbOptimType.SHAMPOO))
    explicit = DreamShardPlanner(cpu_topology(), "lookup", reserve=False, optimizer="adagrad")
    assert explicit.task(model, fused(EmbOptimType.SHAMPOO)).optimizer == "adagrad"


@pytest.mark.parametrize(
    ("model", "kwargs", "words"),
    [
        (nn.Sequential(nn.Linear(4, 1)), {}, "no EmbeddingBagCollection with tables"),
        (TinyRecModel((*TABLES, ("huge", 40_000, 16, 1))), {}, "table huge (2.44 MiB) fits no"),
        (TinyRecModel(), {"batches": [kjt({"user": [[1]]})]}, "no feature 'item'"),
        (TinyRecModel(), {"sharders": [EmbeddingCollectionSharder()]}, "no sharder for"),
        (
            TinyRecModel((*TABLES, ("huge", 40_000, 16, 1))),
            {"sharders": [TestEBCSharder("row_wise", "fused")]},
            "table huge (2.44 MiB) fits no device of 1 MiB in any sharding its sharder offers "
            "(row_wise)",
        ),
    ],
    ids=["no-tables", "table-fits-no-device", "batches-miss-a-feature", "no-sharder", "offered"],
)
def test_what_it_cannot_plan_is_one_line_naming_it(model, kwargs, words):
    sharders = kwargs.pop("sharders", None)
    planner = DreamShardPlanner(cpu_topology(memory=MIB), method="lookup", reserve=False, **kwargs)
    with pytest.raises(DreamshardError) as caught:
        planner.plan(model, sharders)
    message = str(caught.value)
    assert words in message and "\n" not in message


def test_an_unknown_method_is_refused_when_the_planner_is_made():
    with pytest.raises(DreamshardError, match="unknown method 'best'"):
        DreamShardPlanner(cpu_topology(), method="best")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    """An untrained DreamShard model: placing with it is cheap and the plan is still legal."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("model") / "model.pt"
    save_model(DreamShardModel(CostNet(), PlacementPolicy()), path)
    return path


# dreamshard only: a heuristic's plan goes the same way (DreamShardPlanner with no model), and
# test_dmp.py trains heuristics' plans under DMP already
@pytest.mark.parametrize("method", ["dreamshard"])
def test_dmp_trains_with_the_collective_plan_on_two_gloo_ranks(method, model_file):
    model = str(model_file) if method == "dreamshard" else None
    job = {"method": method, "model": model, "steps": 30}
    result = run_job(
        "tests.dmp_planner_program",
        2,
        job,
        timeout_s=300,
        threads=1,
        env={"PYTHONPATH": str(ROOT)},
    )
    # the task the planner solved: the model's tables, their fixed bag lengths, the topology
    spec = result["task"]
    tables = tuple(table_from_record(t, "task") for t in spec["tables"])
    assert [(t.name, t.rows, t.dim, t.pooling_factor) for t in tables] == [
        (n, r, d, float(b)) for n, r, d, b in TABLES
    ]
    task = PlacementTask(tables, spec["num_devices"], spec["memory_cap_bytes"], spec["precision"])
    assert (task.num_devices, task.memory_cap_bytes) == (2, MEMORY)
    # the plan both ranks trained with is the placement dreamshard gives for that task
    plan = result["plan"]["plan"]["sparse"]
    expected = placed_entries(task, method, model)
    assert set(plan) == set(expected)
    for name, entry in plan.items():
        shards = [(s["offsets"], s["sizes"], s["placement"]) for s in entry["shards"]]
        assert entry["ranks"] == expected[name]["ranks"]
        assert entry["sharding_type"] == expected[name]["sharding_type"]
        assert shards == [
            (s["offsets"], s["sizes"], s["placement"].split("/")[0] + "/cpu")
            for s in expected[name]["shards"]
        ]
    assert result["dense_parameters"]  # the dense tower trained beside the fused shards
    assert plan["item"]["sharding_type"] == "column_wise"  # no device holds it whole
    losses = np.array(result["losses"])
    assert losses[-5:].mean() < 0.85 * losses[:5].mean(), losses
    # a plan that cannot succeed reached every rank as rank 0's one line, and nobody hung
    first, second = result["refused"]
    assert first == second and "table huge (2.44 MiB) fits no device" in first
