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
from dreamshard.methods import place
from dreamshard.placement.tasks import GIB, PlacementTask, is_legal
from dreamshard.planners.torchrec_planner import torchrec_place
from dreamshard.tables.table import Table


@pytest.fixture
def torchrec():
    """Skips only where torchrec is not installed; `make test` installs it."""
    return pytest.importorskip("torchrec")


def random_task(rng: np.random.Generator, slack: float) -> PlacementTask:
    """Tables of 1e5..1e6 rows, dims 16..128; cap `slack` x the even share (>= the largest)."""
    num_tables, num_devices = int(rng.integers(3, 13)), int(rng.integers(2, 5))
    tables = tuple(
        Table(
            name=f"t{i}",
            rows=int(rng.integers(100_000, 1_000_000)),
            dim=int(rng.choice([16, 32, 64, 128])),
            pooling_factor=float(rng.uniform(1, 30)),
        )
        for i in range(num_tables)
    )
    sizes = [t.bytes() for t in tables]
    cap = int(max(slack * sum(sizes) / num_devices, 1.2 * max(sizes)))
    return PlacementTask(tables, num_devices, cap)


def test_torchrec_plans_are_legal_under_our_caps(torchrec):
    rng = np.random.default_rng(0)
    planned = 0
    for _ in range(8):
        task = random_task(rng, slack=float(rng.uniform(1.3, 3.0)))
        try:
            placement = torchrec_place(task, reserve=False)
        except DreamshardError as exc:
            assert "torchrec's planner rejects this task" in str(exc)
            continue
        assert placement.method == "torchrec"
        assert len(placement.devices) == len(task.tables)
        assert is_legal(task, placement)
        planned += 1
    assert planned >= 6


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
    from dreamshard.planners.torchrec_planner import plan_with_torchrec, torchrec_request

    task = random_task(np.random.default_rng(4), slack=2.0)
    plan = plan_with_torchrec(torchrec_request(task, reserve=False))
    placement = placement_from_sharding_plan(task, plan, module_path="", method="torchrec")
    assert sharding_plan_to_dict(plan) == sharding_plan_to_dict(
        sharding_plan(task, placement, module_path="")
    )


def test_place_format_torchrec_writes_a_valid_plan(torchrec, cli, tmp_path):
    spec = tmp_path / "tables.csv"
    spec.write_text(
        "name,rows,dim,pooling_factor\n"
        + "".join(f"t{i},{20000 * (i + 1)},{16 * (1 + i % 3)},{2 + i}\n" for i in range(8))
    )
    out = tmp_path / "plan.json"
    # 0.02 GiB a device: room for our planners, not once TorchRec keeps its reservation back
    args = ["place", "--tables", str(spec), "--devices", "3", "--mem-gb", "0.02"]
    done = cli(
        *args,
        "--method",
        "lookup",
        "--out",
        str(out),
        "--format",
        "torchrec",
        "--module-path",
        "sparse_arch.embedding_bag_collection",
    )
    assert done.returncode == 0, done.stderr
    data = read_torchrec_plan(out)
    tables = data["plan"]["sparse_arch.embedding_bag_collection"]
    assert sorted(tables) == [f"t{i}" for i in range(8)]
    plan = sharding_plan_from_dict(data)
    assert plan.plan["sparse_arch.embedding_bag_collection"]["t3"].ranks == tables["t3"]["ranks"]
    assert not list(tmp_path.glob(".plan.json.*"))  # written atomically: no temporary left

    rejected = cli(*args, "--method", "torchrec")
    assert rejected.returncode == 2
    assert rejected.stderr.count("\n") == 1
    assert rejected.stderr.startswith("dreamshard: error: torchrec's planner rejects this task")


def test_without_torchrec_the_method_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchrec", None)  # import torchrec now raises ImportError
    task = PlacementTask((Table("a", 100, 16, 1.0), Table("b", 100, 16, 1.0)), 2, GIB)
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
