"""TorchRec's planner as a planner here, and our plans exported as TorchRec sharding plans."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from dreamshard.errors import DreamshardError
from dreamshard.integrations.torchrec_export import (
    placement_from_sharding_plan,
    read_torchrec_plan,
    sharding_plan,
    sharding_plan_from_dict,
    sharding_plan_to_dict,
    torchrec_plan_dict,
)
from dreamshard.integrations.torchrec_planner import torchrec_place, torchrec_row_bounds
from dreamshard.placement.planner import PlanOptions
from dreamshard.placement.registry import place
from dreamshard.placement.splitting import heuristic_placements
from dreamshard.placement.tasks import GIB, Placement, PlacementTask, is_legal, placement_task
from dreamshard.tables.shards import Split, max_column_parts
from dreamshard.tables.table import Table
from tests.conftest import place_command, random_tables


@pytest.fixture
def torchrec():
    """Skips only where torchrec is not installed; `make test` installs it."""
    return pytest.importorskip("torchrec")


def random_task(rng: np.random.Generator, slack: float) -> PlacementTask:
    """Tables of 1e5..1e6 rows, dims 16..128; cap `slack` x the even share (>= the largest)."""
    num_tables, num_devices = int(rng.integers(3, 13)), int(rng.integers(2, 5))
    tables = random_tables(rng, num_tables, (100_000, 1_000_000), [16, 32, 64, 128], (1, 30))
    sizes = [t.bytes() for t in tables]
    cap = int(max(slack * sum(sizes) / num_devices, 1.2 * max(sizes)))
    return PlacementTask(tables, num_devices, cap)


@pytest.mark.parametrize("split", ["none", "auto"])
def test_torchrec_plans_are_legal_under_our_caps(torchrec, split):
    rng = np.random.default_rng(0)
    planned = 0
    for _ in range(8):
        task = random_task(rng, slack=float(rng.uniform(1.3, 3.0)))
        try:
            placement = torchrec_place(task, reserve=False, split=split)
        except DreamshardError as exc:
            assert "torchrec's planner rejects this task" in str(exc)
            continue
        assert placement.method == "torchrec"
        assert len(placement.devices) == len(placement_task(task, placement).tables)
        assert is_legal(task, placement)
        if split == "none":
            assert placement.splits == ()
        planned += 1
    assert planned >= 6


def test_a_time_budget_is_torchrecs_own_timeout_and_its_plan_is_legal(torchrec, monkeypatch):
    """`--time-budget` reaches TorchRec's planner as its `timeout_seconds` (its proposers stop
    there and it answers with its best plan so far), and that plan is legal under our caps."""
    from torchrec.distributed.planner import EmbeddingShardingPlanner

    given, original = [], EmbeddingShardingPlanner.__init__

    def recording(self, *args, **kwargs):
        given.append(kwargs.get("timeout_seconds"))
        original(self, *args, **kwargs)

    monkeypatch.setattr(EmbeddingShardingPlanner, "__init__", recording)
    task = random_task(np.random.default_rng(2), slack=1.5)
    options = PlanOptions(split="auto", time_budget=1.4, reserve=False)
    placement = place(task, "torchrec", options=options)
    assert is_legal(task, placement)
    assert given == [1]  # whole seconds, as TorchRec takes them


def test_torchrec_method_with_its_own_reservation_on_roomy_devices(torchrec):
    task = random_task(np.random.default_rng(1), slack=1.5)
    roomy = PlacementTask(task.tables, task.num_devices, 4 * GIB)
    placement = place(roomy, "torchrec")
    assert is_legal(roomy, placement)


def test_a_task_torchrec_reservation_rejects_gives_a_clear_error(torchrec):
    task = random_task(np.random.default_rng(2), slack=1.1)
    assert is_legal(task, place(task, "size_lookup"))  # ours accepts it
    with pytest.raises(DreamshardError) as caught:
        place(task, "torchrec")
    message = str(caught.value)
    assert "torchrec's planner rejects this task" in message
    assert "15%" in message and "kept back" in message
    assert "\n" not in message


def test_a_rejection_says_what_a_fresh_enumeration_says_without_enumerating_again(torchrec):
    """The planner's enumerator keeps its search space; the rejection message reads it."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder

    from dreamshard.integrations.torchrec_planner import (
        plan_with_torchrec,
        rejection_reason,
        torchrec_request,
    )

    task = random_task(np.random.default_rng(2), slack=1.1)
    request = torchrec_request(task, reserve=True)
    with pytest.raises(DreamshardError) as caught:
        plan_with_torchrec(request)
    fresh = rejection_reason(request, [EmbeddingBagCollectionSharder()], Exception())
    # Past the kind of refusal, which only TorchRec's own exception names.
    assert str(caught.value).split("): ", 1)[1] == fresh.split("): ", 1)[1]


def test_exported_plans_round_trip(torchrec):
    task = random_task(np.random.default_rng(3), slack=1.5)
    placement = place(task, "size_lookup")
    data = torchrec_plan_dict(task, placement, module_path="model.sparse.ebc")
    plan = sharding_plan(task, placement, module_path="model.sparse.ebc")
    assert sharding_plan_from_dict(json.loads(json.dumps(data))) == plan
    assert sharding_plan_to_dict(plan, "size_lookup", task.name, task.num_devices) == data
    back = placement_from_sharding_plan(task, plan, "model.sparse.ebc", method="size_lookup")
    assert back == placement
    sharding = plan.plan["model.sparse.ebc"]["t0"]
    assert sharding.sharding_type == "table_wise" and sharding.compute_kernel == "fused"
    shard = sharding.sharding_spec.shards[0]
    d = placement.devices[0]
    assert sharding.ranks == [d]
    assert shard.shard_sizes == [task.tables[0].rows, task.tables[0].dim]
    assert str(shard.placement) == f"rank:{d}/cuda:{d}"


def test_torchrec_own_plan_exports_like_ours(torchrec):
    from dreamshard.integrations.torchrec_planner import plan_with_torchrec, torchrec_request

    task = random_task(np.random.default_rng(4), slack=2.0)
    plan = plan_with_torchrec(torchrec_request(task, reserve=False))
    placement = placement_from_sharding_plan(task, plan, module_path="", method="torchrec")
    assert sharding_plan_to_dict(plan) == sharding_plan_to_dict(
        sharding_plan(task, placement, module_path="")
    )


def gib_task(num_devices: int, *tables: tuple[str, int, int, float], name="") -> PlacementTask:
    """Tables given as (name, rows, dim, pooling factor) on devices of 1 GiB each."""
    return PlacementTask(tuple(Table(*table) for table in tables), num_devices, GIB, name=name)


# A split plan on 4 devices: "wide" in 4 column shards (two on device 2), "tall" row-wise in the
# layout DMP trains (rows divisible by 4, shard r on device r), "small" whole.
SPLIT_TASK = gib_task(4, ("wide", 3000, 64, 20.0), ("tall", 8000, 16, 5.0), ("small", 500, 8, 1.0))
SPLIT_PLAN = Placement(
    # wide[c0:16] .. wide[c48:64], tall[r0:2000] .. tall[r6000:8000], small
    (2, 0, 2, 3, 0, 1, 2, 3, 1),
    method="by hand",
    splits=(Split("wide", "column", 4), Split("tall", "row", 4)),
)


def test_split_plans_round_trip(torchrec):
    data = torchrec_plan_dict(SPLIT_TASK, SPLIT_PLAN, module_path="sparse.ebc")
    plan = sharding_plan(SPLIT_TASK, SPLIT_PLAN, module_path="sparse.ebc")
    again = sharding_plan_from_dict(json.loads(json.dumps(sharding_plan_to_dict(plan))))
    assert again == plan and sharding_plan_from_dict(data) == plan
    back = placement_from_sharding_plan(SPLIT_TASK, again, "sparse.ebc", method="by hand")
    assert back == SPLIT_PLAN

    wide, tall, small = (plan.plan["sparse.ebc"][n] for n in ("wide", "tall", "small"))
    assert (wide.sharding_type, wide.compute_kernel, wide.ranks) == (
        "column_wise",
        "fused",
        [2, 0, 2, 3],
    )
    assert [(s.shard_offsets, s.shard_sizes) for s in wide.sharding_spec.shards] == [
        ([0, c], [3000, 16]) for c in (0, 16, 32, 48)
    ]
    assert [str(s.placement) for s in wide.sharding_spec.shards] == [
        f"rank:{d}/cuda:{d}" for d in (2, 0, 2, 3)
    ]
    assert (tall.sharding_type, tall.ranks) == ("row_wise", [0, 1, 2, 3])
    assert [(s.shard_offsets, s.shard_sizes) for s in tall.sharding_spec.shards] == [
        ([r, 0], [2000, 16]) for r in (0, 2000, 4000, 6000)
    ]
    assert (small.sharding_type, small.ranks) == ("table_wise", [1])

    on_cpu = torchrec_plan_dict(SPLIT_TASK, SPLIT_PLAN, compute_device="cpu")
    shards = on_cpu["plan"]["embedding_bags"]["wide"]["shards"]
    assert [s["placement"] for s in shards] == [f"rank:{d}/cpu" for d in (2, 0, 2, 3)]


# One hot table: its lookup key (dim x pooling) exceeds the mean device load on 2 devices, so the
# lookup heuristic's balance rule halves it column-wise (tests/test_dmp_split.py trains with it).
ONE_HOT_TABLE = gib_task(
    2, ("hot", 1000, 32, 50.0), ("cold", 400, 16, 2.0), ("geo", 600, 8, 3.0), name="one hot table"
)


def planner_split_plans(task: PlacementTask = ONE_HOT_TABLE) -> tuple[Placement, Placement]:
    """`lookup --split auto`'s plan (the balance rule cuts "hot"; the analytic check keeps it
    cut row-wise, one shard a rank) and lookup's placement of "hot" halved column-wise."""
    rows = place(task, "lookup", split="auto")
    assert rows.splits == (Split("hot", "row", 2),)
    (columns,) = heuristic_placements(task, (Split("hot", "column", 2),), ["lookup"])
    return rows, columns


def test_a_planner_split_plan_round_trips(torchrec):
    task = ONE_HOT_TABLE
    for placement in planner_split_plans(task):
        data = json.loads(json.dumps(torchrec_plan_dict(task, placement)))
        back = placement_from_sharding_plan(task, sharding_plan_from_dict(data), method="lookup")
        assert back == placement


def test_row_splits_dmp_cannot_train_are_refused(torchrec):
    # three row shards on four devices, and four out of rank order: DMP would route ids wrongly
    for splits, devices in (
        ((Split("tall", "row", 3),), (0, 1, 2, 3, 1)),
        ((Split("tall", "row", 4),), (0, 1, 3, 2, 3, 1)),
    ):
        placement = Placement(devices, splits=splits)
        assert is_legal(SPLIT_TASK, placement)
        with pytest.raises(DreamshardError, match="table tall: its row shards") as caught:
            torchrec_plan_dict(SPLIT_TASK, placement)
        assert "\n" not in str(caught.value)


def test_torchrec_row_blocks_are_its_own(torchrec):
    import torch
    from torchrec.distributed.sharding_plan import calculate_shard_sizes_and_offsets

    for rows, devices in ((8000, 4), (10, 4), (9, 4), (1001, 8), (7, 2)):
        weight = torch.empty((rows, 8), device="meta")
        sizes, offsets = calculate_shard_sizes_and_offsets(weight, devices, devices, "row_wise")
        theirs = [(o[0], o[0] + s[0]) for s, o in zip(sizes, offsets)]
        assert [(a, b) for a, b in torchrec_row_bounds(rows, devices)] == theirs


def torchrec_plan_of(tables: list[tuple[str, int, int]], world: int, types: list[str], width=None):
    """TorchRec's own planner's plan (world GPUs) for tables constrained to `types`."""
    import torch
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import (
        EmbeddingShardingPlanner,
        ParameterConstraints,
        Topology,
    )

    from dreamshard.integrations.torchrec_planner import quiet_torchrec

    configs = [
        EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=[n])
        for n, r, d in tables
    ]
    constraints = {
        n: ParameterConstraints(sharding_types=types, min_partition=width) for n, _, _ in tables
    }
    with quiet_torchrec():
        module = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
        planner = EmbeddingShardingPlanner(
            topology=Topology(world_size=world, compute_device="cuda"), constraints=constraints
        )
        return planner.plan(module, [EmbeddingBagCollectionSharder()])


def test_torchrec_own_split_plans_read_as_our_splits(torchrec):
    tables = [("wide", 5000, 64), ("tall", 8000, 32)]
    task = gib_task(2, *((n, r, d, 1.0) for n, r, d in tables))
    # column-wise in blocks of 16: four shards on two ranks, so one rank holds two
    plan = torchrec_plan_of(tables, 2, ["column_wise"], width=16)
    assert sorted(plan.plan[""]["wide"].ranks) == [0, 0, 1, 1]
    placement = placement_from_sharding_plan(task, plan, module_path="", method="torchrec")
    assert placement.splits == (Split("wide", "column", 4), Split("tall", "column", 2))
    assert sharding_plan_to_dict(sharding_plan(task, placement, module_path="")) == (
        sharding_plan_to_dict(plan)
    )
    plan = torchrec_plan_of(tables, 2, ["row_wise"])
    placement = placement_from_sharding_plan(task, plan, module_path="", method="torchrec")
    assert placement.splits == (Split("wide", "row", 2), Split("tall", "row", 2))
    assert placement.devices == (0, 1, 0, 1)
    assert sharding_plan_to_dict(sharding_plan(task, placement, module_path="")) == (
        sharding_plan_to_dict(plan)
    )


def test_torchrec_shards_we_do_not_cut_name_the_table(torchrec):
    # dim 96 in blocks of 32: three column shards, not a power of two
    task = gib_task(2, ("odd", 1000, 96, 1.0))
    plan = torchrec_plan_of([("odd", 1000, 96)], 2, ["column_wise"], width=32)
    with pytest.raises(DreamshardError, match=r"table odd \(1000 x 96\): its column_wise shards"):
        placement_from_sharding_plan(task, plan, module_path="")
    # 1001 rows on 4 ranks: TorchRec's blocks of 251 rows (the last 248) are our row ranges
    task = gib_task(4, ("uneven", 1001, 16, 1.0))
    plan = torchrec_plan_of([("uneven", 1001, 16)], 4, ["row_wise"])
    placement = placement_from_sharding_plan(task, plan, module_path="")
    assert placement.splits == (Split("uneven", "row", 4),) and placement.devices == (0, 1, 2, 3)


@pytest.mark.parametrize("rows", [600_000, 600_002])
def test_torchrec_split_auto_places_a_table_no_device_holds_whole(torchrec, rows):
    # 600000 x 64 fp16 = 73 MiB on devices of 64 MiB (54 MiB after TorchRec's 15%); whether D
    # divides the rows or not, TorchRec's row blocks are our row ranges
    big = Table("big", rows, 64, 10.0)
    task = PlacementTask((big, *(Table(f"t{i}", 20_000, 16, 2.0) for i in range(6))), 4, 2**26)
    with pytest.raises(DreamshardError, match="torchrec's planner rejects this task"):
        place(task, "torchrec", split="none")
    placement = place(task, "torchrec", split="auto")
    assert placement.method == "torchrec" and is_legal(task, placement)
    (split,) = [s for s in placement.splits if s.table == "big"]
    if split.kind == "column":  # TorchRec's column shards are the narrowest we allow
        assert split.parts == max_column_parts(big, task.num_devices)
    else:
        assert split == Split("big", "row", 4)


def test_place_format_torchrec_writes_a_valid_plan(torchrec, cli, tmp_path):
    spec = tmp_path / "tables.csv"
    spec.write_text(
        "name,rows,dim,pooling_factor\n"
        + "".join(f"t{i},{20000 * (i + 1)},{16 * (1 + i % 3)},{2 + i}\n" for i in range(8))
    )
    out = tmp_path / "plan.json"
    # 0.02 GiB a device: room for our planners, not once TorchRec keeps its reservation back
    args = place_command(spec, 3, 0.02)
    lookup = [*args, "--method", "lookup", "--out", str(out), "--format", "torchrec"]
    done = cli(*lookup, "--module-path", "sparse_arch.embedding_bag_collection")
    assert done.returncode == 0, done.stderr
    data = read_torchrec_plan(out)
    tables = data["plan"]["sparse_arch.embedding_bag_collection"]
    assert sorted(tables) == [f"t{i}" for i in range(8)]
    plan = sharding_plan_from_dict(data)
    assert plan.plan["sparse_arch.embedding_bag_collection"]["t3"].ranks == tables["t3"]["ranks"]
    assert not list(tmp_path.glob(".plan.json.*"))  # written atomically: no temporary left
    places = {s["placement"] for t in tables.values() for s in t["shards"]}
    assert all(p.startswith("rank:") and "/cuda:" in p for p in places)

    done = cli(*lookup, "--compute-device", "cpu")
    assert done.returncode == 0, done.stderr
    tables = read_torchrec_plan(out)["plan"]["embedding_bags"]
    places = {s["placement"] for t in tables.values() for s in t["shards"]}
    assert places <= {f"rank:{d}/cpu" for d in range(3)}

    rejected = cli(*args, "--method", "torchrec")
    assert rejected.returncode == 2
    assert rejected.stderr.count("\n") == 1
    assert rejected.stderr.startswith("dreamshard: error: torchrec's planner rejects this task")


def test_without_torchrec_the_method_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchrec", None)  # import torchrec now raises ImportError
    task = gib_task(2, ("a", 100, 16, 1.0), ("b", 100, 16, 1.0))
    with pytest.raises(DreamshardError, match="make torchrec"):
        place(task, "torchrec")


def test_importing_dreamshard_does_not_import_torchrec():
    code = (
        "import sys, dreamshard, dreamshard.cli.main, dreamshard.integrations.torchrec_export;"
        "assert 'torchrec' not in sys.modules, 'torchrec imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_reading_a_bad_torchrec_plan_says_what_is_wrong(tmp_path):
    with pytest.raises(DreamshardError, match="does not exist"):
        read_torchrec_plan(tmp_path / "missing.json")
    ours = tmp_path / "ours.json"
    ours.write_text(json.dumps({"format": "dreamshard-plan", "placement": {}}))
    with pytest.raises(DreamshardError, match="not a TorchRec plan"):
        read_torchrec_plan(ours)
    entry = {"sharding_type": "table_wise", "compute_kernel": "fused", "ranks": [0]}
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"format": "torchrec-sharding-plan", "plan": {"m": {"t": entry}}}))
    with pytest.raises(DreamshardError, match="table 't' has no 'shards'"):
        read_torchrec_plan(broken)
