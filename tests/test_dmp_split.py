"""DistributedModelParallel accepts our exported split plans and trains a step with them: 2 gloo
ranks under torchrun on this CPU, column-wise and row-wise shards from our planner and a
hand-made plan with two column shards per rank and a row-wise table (tests/dmp_split_program.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torchrec")  # `make test` installs it

from test_torchrec import ONE_HOT_TABLE, planner_split_plans  # noqa: E402

from dreamshard.costs.torchrun import run_job  # noqa: E402
from dreamshard.integrations.torchrec_export import torchrec_plan_dict  # noqa: E402
from dreamshard.placement.tasks import Placement, PlacementTask, placement_task  # noqa: E402
from dreamshard.tables.shards import Split  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def rank_shards(task: PlacementTask, placement: Placement) -> list[dict]:
    """What each rank should hold: {table: [[offsets, sizes], ...]} from our placement."""
    held: list[dict] = [{} for _ in range(task.num_devices)]
    for shard, d in zip(placement_task(task, placement).tables, placement.devices):
        cut = shard.shard
        name = cut.of if cut else shard.name
        if cut is None:
            offsets = [0, 0]
        else:
            offsets = [cut.start, 0] if cut.kind == "row" else [0, cut.start]
        held[d].setdefault(name, []).append([offsets, [shard.rows, shard.dim]])
    return held


def test_dmp_trains_a_step_with_exported_split_plans_on_two_gloo_ranks():
    rows, columns = planner_split_plans()  # "hot" cut row-wise / column-wise by our planner
    # Four column shards of "hot" on two ranks (two each, interleaved) and "cold" row-wise in
    # the layout DMP trains (one row shard per rank, in rank order).
    splits = (Split("hot", "column", 4), Split("cold", "row", 2))
    # shards in order: hot[c0:8] .. hot[c24:32], cold[r0:200], cold[r200:400], geo
    by_hand = Placement((1, 0, 0, 1, 0, 1, 1), method="by hand", splits=splits)
    plans = [columns, rows, by_hand]
    job = {
        "tables": [{"name": t.name, "rows": t.rows, "dim": t.dim} for t in ONE_HOT_TABLE.tables],
        "plans": [torchrec_plan_dict(ONE_HOT_TABLE, p, compute_device="cpu") for p in plans],
    }
    result = run_job(
        "tests.dmp_split_program", 2, job, timeout_s=300, threads=1, env={"PYTHONPATH": str(ROOT)}
    )
    for i, placement in enumerate(plans):
        expected = rank_shards(ONE_HOT_TABLE, placement)
        for rank, reports in enumerate(result["ranks"]):
            report = reports["plans"][i]
            assert report["shards"] == expected[rank], (placement.method, rank)
            assert report["forward_matches"], (placement.method, rank)
            assert report["step_updates"], (placement.method, rank)
    types = [plan["sharding_types"] for plan in result["ranks"][0]["plans"]]
    assert types[0] == {"hot": "column_wise", "cold": "table_wise", "geo": "table_wise"}
    assert types[1] == {"hot": "row_wise", "cold": "table_wise", "geo": "table_wise"}
    assert types[2]["cold"] == "row_wise"
