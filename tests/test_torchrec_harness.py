"""TorchRec's own correctness harness passes with DreamShardPlanner in place of its planner
(issue 49): `sharding_single_rank_test_single_process` on 2 gloo ranks, one launch for every
case (tests/torchrec_harness_program.py), and it fails when the sharded model's optimizer does
not match the unsharded one's, so a pass means something."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torchrec")  # `make test` installs it

from dreamshard.costs.torchrun import run_job  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CASES = [
    {"name": "default sharder, --split auto"},  # these tiny tables: data-parallel, its choice
    {"name": "default sharder, --split none", "split": "none"},  # fused, table-wise
    {"name": "forced", "constraints": {"table_2": "column_wise", "table_1": "data_parallel"}},
    {"name": "only column_wise", "only": "column_wise"},
    {"name": "only row_wise", "only": "row_wise"},
    # as "--split none" but the fused tables step at 0.5 where the unsharded reference steps 0.1
    {"name": "control", "split": "none", "learning_rate": 0.5},
]
TABLES = {f"table_{i}" for i in range(6)} | {"weighted_table_0", "weighted_table_1"}


def test_torchrecs_harness_passes_with_dreamshards_planner_and_fails_when_it_should():
    result = run_job(
        "tests.torchrec_harness_program",
        2,
        {"cases": CASES},
        timeout_s=400,
        threads=1,
        env={"PYTHONPATH": str(ROOT)},
    )
    for rank in result["ranks"]:
        cases = {c["name"]: c for c in rank["cases"]}
        assert all(c["planners"] == 1 for c in cases.values())  # ours planned, not TorchRec's
        default, whole, forced, columns, rows, control = (cases[c["name"]] for c in CASES)
        for case in (default, whole, forced, columns, rows):
            assert case["outcome"] == "passed", case
            assert set(case["kinds"]) == TABLES, case
        assert set(default["kinds"].values()) <= {"table_wise", "column_wise", "data_parallel"}
        assert set(whole["kinds"].values()) == {"table_wise"}
        assert forced["kinds"]["table_2"] == "column_wise"
        assert forced["kinds"]["table_1"] == "data_parallel"
        assert set(columns["kinds"].values()) == {"column_wise"}
        assert set(rows["kinds"].values()) == {"row_wise"}
        assert control["outcome"] == "failed: Tensor-likes are not close!", control
