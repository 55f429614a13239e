"""`dreamshard check` cannot be fooled by a TorchRec plan (issue 49): malformed plans, each
one line with the right exit code and no traceback (2: it cannot be read in our terms; 1: it
reads but breaks the task, the table named), and the same reader for a live ShardingPlan."""

from __future__ import annotations

import copy
import json

import pytest

from dreamshard.cli.main import main
from dreamshard.errors import DreamshardError, IllegalPlanError
from dreamshard.integrations.torchrec_export import torchrec_plan_dict
from dreamshard.placement.tasks import GIB, Placement, PlacementTask
from dreamshard.tables.shards import Split
from dreamshard.tables.sources import load_tables

MODULE = "embedding_bags"
TABLES = [  # name, rows, dim: rows divisible by 4 (row-wise over 4 ranks is ours)
    ("wide", 4000, 64),
    ("tall", 4000, 16),
    ("small", 100, 8),
    ("a", 2000, 32),
    ("b", 3000, 16),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The table file, and a legal TorchRec plan of it on 4 devices: "wide" column-wise in two,
    "tall" row-wise over all four, "small" data-parallel, "a" and "b" whole."""
    folder = tmp_path_factory.mktemp("fuzz")
    tables = folder / "tables.json"
    records = [{"name": n, "rows": r, "dim": d, "pooling_factor": 2.0} for n, r, d in TABLES]
    tables.write_text(json.dumps(records))
    task = PlacementTask(tuple(load_tables(tables)), 4, GIB)
    splits = (Split("wide", "column", 2), Split("tall", "row", 4), Split("small", "replica", 4))
    # shards in task order: wide[c0:32], wide[c32:64], tall's four, small's four, a, b
    placement = Placement((0, 1, 0, 1, 2, 3, 0, 1, 2, 3, 2, 3), method="by hand", splits=splits)
    return tables, torchrec_plan_dict(task, placement, MODULE, compute_device="cpu")


def entry(data: dict, name: str) -> dict:
    return data["plan"][MODULE][name]


def moved(data: dict, name: str, rank: int) -> None:
    """A whole table moved to `rank`, its ranks and its shard's placement alike."""
    entry(data, name)["ranks"] = [rank]
    entry(data, name)["shards"][0]["placement"] = f"rank:{rank}/cpu"


def put(data: dict, name: str, key: str, value) -> None:
    entry(data, name)[key] = value


def shard(data: dict, name: str, i: int, key: str, value) -> None:
    entry(data, name)["shards"][i][key] = value


# (id, the change to the legal plan, extra flags, exit code, words of the one line)
CASES = [
    ("not-json", None, [], 2, "cannot read plan file"),
    (
        "another-format",
        lambda d: d.update(format="torchrec-plan"),
        ["--devices", "4"],
        2,
        "neither a dreamshard plan",
    ),
    (
        "no-device-count",
        lambda d: d.pop("num_devices"),
        [],
        2,
        "it records no device count; give --devices",
    ),
    (
        "device-count-a-string",
        lambda d: d.update(num_devices="4"),
        [],
        2,
        "'num_devices' is '4', not a device count",
    ),
    ("device-count-true", lambda d: d.update(num_devices=True), [], 2, "not a device count"),
    ("plan-a-list", lambda d: d.update(plan=[]), [], 2, "has no 'plan' object"),
    (
        "another-module",
        lambda d: d.update(plan={"sparse": d["plan"][MODULE]}),
        [],
        2,
        "has no module 'embedding_bags'",
    ),
    (
        "entry-without-ranks",
        lambda d: entry(d, "a").pop("ranks"),
        [],
        2,
        "table 'a' has no 'ranks'",
    ),
    (
        "ranks-a-string",
        lambda d: put(d, "a", "ranks", "2"),
        [],
        2,
        "ranks '2' is not a list of integers",
    ),
    ("rank-a-float", lambda d: put(d, "a", "ranks", [2.0]), [], 2, "is not a list of integers"),
    (
        "sharding-type-a-number",
        lambda d: put(d, "a", "sharding_type", 1),
        [],
        2,
        "sharding_type 1 is not a string",
    ),
    (
        "offsets-strings",
        lambda d: shard(d, "a", 0, "offsets", ["0", "0"]),
        [],
        2,
        "offsets ['0', '0'] is not two integers",
    ),
    (
        "sizes-three-numbers",
        lambda d: shard(d, "a", 0, "sizes", [2000, 32, 1]),
        [],
        2,
        "sizes [2000, 32, 1] is not two integers",
    ),
    (
        "placement-not-a-rank",
        lambda d: shard(d, "a", 0, "placement", "cpu:2"),
        [],
        2,
        "shard placement 'cpu:2' is not 'rank:R/DEVICE'",
    ),
    (
        "unknown-sharding-type",
        lambda d: put(d, "a", "sharding_type", "grid_shard"),
        [],
        2,
        "table a: sharding type 'grid_shard' does not map to ours",
    ),
    (
        "made-up-sharding-type",
        lambda d: put(d, "b", "sharding_type", "diagonal"),
        [],
        2,
        "table b: sharding type 'diagonal' does not map to ours",
    ),
    (
        "ranks-disagree-with-placements",
        lambda d: put(d, "a", "ranks", [3]),
        [],
        2,
        "table a: its ranks [3] disagree with its shards' placements [2]",
    ),
    (
        "fewer-ranks-than-shards",
        lambda d: put(d, "tall", "ranks", [0, 1, 2]),
        [],
        2,
        "table tall: its ranks [0, 1, 2] disagree",
    ),
    (
        "a-table-of-another-model",
        lambda d: d["plan"][MODULE].update(c=entry(d, "a")),
        [],
        2,
        "the plan shards table c, which is not among the task's 5 tables",
    ),
    (
        "column-shards-not-ours",
        lambda d: (
            shard(d, "wide", 0, "sizes", [4000, 16]),
            shard(d, "wide", 1, "offsets", [0, 16]),
            shard(d, "wide", 1, "sizes", [4000, 48]),
        ),
        [],
        2,
        "table wide (4000 x 64): its column_wise shards cover columns 0:16, 16:64",
    ),
    (
        "replicas-twice-on-a-rank",
        lambda d: put(d, "small", "ranks", [0, 0, 1, 2]),
        [],
        2,
        "table small is data_parallel on ranks [0, 0, 1, 2]",
    ),
    (
        "rank-outside-the-recorded-devices",
        lambda d: moved(d, "a", 7),
        [],
        1,
        "table a: rank 7 is outside the 4 devices (0..3)",
    ),
    (
        "rank-outside-the-devices-given",
        lambda d: None,
        ["--devices", "2"],
        1,
        "table tall: rank 2 is outside the 2 devices (0..1)",
    ),  # --devices over what it records
    (
        "table-missing",
        lambda d: d["plan"][MODULE].pop("b"),
        [],
        1,
        "table b is missing from the plan",
    ),
    (
        "empty-shards",
        lambda d: (put(d, "b", "shards", []), put(d, "b", "ranks", [])),
        [],
        1,
        "table b has no shards",
    ),
    (
        "negative-offsets",
        lambda d: shard(d, "wide", 1, "offsets", [0, -32]),
        [],
        1,
        "table wide: a shard at offsets [0, -32] of sizes [4000, 32] lies past its 4000 x 64",
    ),
    (
        "shard-past-the-rows",
        lambda d: shard(d, "b", 0, "sizes", [3010, 16]),
        [],
        1,
        "table b: a shard at offsets [0, 0] of sizes [3010, 16] lies past",
    ),
    (
        "shard-past-the-width",
        lambda d: shard(d, "wide", 1, "offsets", [0, 48]),
        [],
        1,
        "table wide: a shard at offsets [0, 48] of sizes [4000, 32] lies past",
    ),
    (
        "overlapping-shards",
        lambda d: shard(d, "wide", 1, "offsets", [0, 16]),
        [],
        1,
        "table wide: its shards at offsets [0, 0] and [0, 16] overlap",
    ),
    (
        "a-gap",
        lambda d: (entry(d, "tall")["shards"].pop(3), entry(d, "tall")["ranks"].pop(3)),
        [],
        1,
        "table tall: its shards cover 48,000 of its 4000 x 16 weight's 64,000 elements",
    ),
    (
        "replicas-on-two-of-four",
        lambda d: put(d, "small", "ranks", [0, 1]),
        [],
        1,
        "table small is data_parallel on ranks [0, 1], not a replica on each of the 4 devices",
    ),
    ("over-memory", lambda d: None, ["--mem-gb", "0.0001"], 1, "over its cap"),
]


@pytest.mark.parametrize(
    ("change", "flags", "code", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_malformed_torchrec_plan_is_one_line_with_its_exit_code(
    files, tmp_path, capsys, change, flags, code, words
):
    tables, legal = files
    plan = tmp_path / "plan.json"
    if change is None:
        plan.write_text('{"format": "torchrec-sharding-plan", "plan": ')  # cut short
    else:
        data = copy.deepcopy(legal)
        change(data)
        plan.write_text(json.dumps(data))
    memory = [] if "--mem-gb" in flags else ["--mem-gb", "1"]
    command = ["check", "--plan", str(plan), "--tables", str(tables), "--no-compare"]
    assert main([*command, *memory, *flags]) == code  # an exception here is a traceback
    out, err = capsys.readouterr()
    if code == 2:
        assert not out
        assert err.count("\n") == 1 and err.startswith("dreamshard: error: "), err
        assert words in err, err
    else:
        assert not err
        said = [line for line in out.splitlines() if "legal: no: " in line]
        assert len(said) == 1 and words in said[0], out


def test_the_legal_plan_is_legal_on_the_devices_it_records(files, tmp_path, capsys):
    tables, legal = files
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(legal))
    command = ["check", "--plan", str(plan), "--tables", str(tables), "--mem-gb", "1"]
    assert main([*command, "--no-compare", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["legal"] and report["num_devices"] == 4  # recorded, not the highest rank + 1
    assert [d["tables"] for d in report["devices"]] == [3, 3, 3, 3]  # shards and replicas
    # checked against the devices given: on 8, the data-parallel table is short of replicas
    assert main([*command, "--no-compare", "--devices", "8"]) == 1
    assert "table small is data_parallel on ranks [0, 1, 2, 3], not a replica on each of the 8" in (
        capsys.readouterr().out
    )


def test_a_live_sharding_plan_goes_the_same_way():
    pytest.importorskip("torchrec")
    from dreamshard.integrations.dmp_planner import DreamShardPlanner
    from dreamshard.integrations.plan_check import check_sharding_plan
    from dreamshard.integrations.torchrec_export import (
        sharding_plan_from_dict,
        sharding_plan_to_dict,
    )
    from tests.test_dmp_planner import TwoTowers, cpu_topology

    model, topology = TwoTowers(), cpu_topology(memory=2**20)
    planner = DreamShardPlanner(topology, method="size", reserve=False)
    data = sharding_plan_to_dict(planner.plan(model))
    assert check_sharding_plan(model, sharding_plan_from_dict(data), topology, reserve=False).legal

    def live(change) -> object:
        changed = copy.deepcopy(data)
        change(changed["plan"])
        return sharding_plan_from_dict(changed)

    def whole(plan: dict) -> dict:
        return plan["user.bags"]["clicks"]

    def elsewhere(plan: dict) -> None:
        other = 1 - whole(plan)["ranks"][0]
        whole(plan)["ranks"] = [other]
        whole(plan)["shards"][0]["placement"] = f"rank:{other + 4}/cpu"

    cases = [
        (
            lambda p: whole(p).update(ranks=[1 - whole(p)["ranks"][0]]),
            DreamshardError,
            "table user.bags.clicks: its ranks",
        ),
        (elsewhere, DreamshardError, "disagree with its shards' placements"),
        (
            lambda p: p["user.bags"].pop("clicks"),
            IllegalPlanError,
            "table user.bags.clicks is missing from the plan",
        ),
        (
            lambda p: whole(p)["shards"][0].update(sizes=[600, 8]),
            IllegalPlanError,
            "table user.bags.clicks: a shard at offsets [0, 0] of sizes [600, 8] lies past",
        ),
        (
            lambda p: whole(p).update(sharding_type="grid_shard"),
            DreamshardError,
            "sharding type 'grid_shard' does not map",
        ),
    ]
    for change, kind, words in cases:
        with pytest.raises(kind) as caught:
            check_sharding_plan(model, live(change), topology, reserve=False)
        assert words in str(caught.value) and "\n" not in str(caught.value)
    moved_out = live(
        lambda p: (whole(p).update(ranks=[5]), whole(p)["shards"][0].update(placement="rank:5/cpu"))
    )
    with pytest.raises(IllegalPlanError, match="rank 5 is outside the 2 devices"):
        check_sharding_plan(model, moved_out, topology, reserve=False)
