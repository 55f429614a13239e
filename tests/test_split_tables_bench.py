"""benchmarks/split_tables.py at toy scale on the simulated backend: TorchRec's planner as rows
beside ours, its declines counted instead of failing the run, and `dreamshard +split` against
`torchrec +split` as a ratio paired within rounds."""

import json

import numpy as np
import pytest
from conftest import load_benchmark

from dreamshard.errors import DreamshardError
from dreamshard.integrations import torchrec_planner
from dreamshard.placement.suites import make_suite, parse_suite_name

pytest.importorskip("torchrec")

SUITE = "cpu-12x2"
TARGET = "dreamshard +split / torchrec +split"


@pytest.mark.usefixtures("one_torch_thread")
def test_torchrec_rows_count_a_declined_task_and_pair_the_rest(
    tmp_path, monkeypatch, toy_model_path
):
    monkeypatch.setenv("DREAMSHARD_HOME", str(tmp_path / "state"))
    script = load_benchmark("split_tables")
    real, asked = torchrec_planner.torchrec_place, []

    def declines(task, seed=0, reserve=True, split="none", topology=None, timeout=None):
        """The second task, and the first one table-wise (as on dlrm tasks: TorchRec counts
        inputs and outputs beside the weights, and may fit them only split)."""
        asked.append((reserve, split))
        if task.name.endswith("/1") or split == "none":
            raise DreamshardError("torchrec's planner rejects this task (test)")
        return real(task, seed, reserve=reserve, split=split, topology=topology, timeout=timeout)

    monkeypatch.setattr(torchrec_planner, "torchrec_place", declines)  # what `torchrec` calls
    out = tmp_path / "split_tables"
    args = ["--backend", "simulated", "--labels", "raw", "--suites", SUITE, "--tasks", "2"]
    args += ["--rounds", "2", "--planners", "lookup,dreamshard,torchrec"]
    results = script.main([*args, "--model", str(toy_model_path), "--out", str(out)])

    assert set(asked) == {(False, "none"), (False, "auto")}  # our memory, no reservation
    tasks = make_suite(parse_suite_name(SUITE, 1, 2)).test_tasks
    placed, declined = results["tasks"]
    for name in ("torchrec", "torchrec +split"):
        assert "rejects this task (test)" in declined["planners"][name]["declined"]
    assert "declined" in placed["planners"]["torchrec"]
    assert len(placed["planners"]["torchrec +split"]["costs_ms"]) == 2
    assert placed["planners"]["torchrec +split"]["vs_none"] is None  # no table-wise plan
    assert [t["task"] for t in results["tasks"]] == [t.name for t in tasks]

    suite = results["suites"][SUITE]
    pair = suite["vs_torchrec"][TARGET]
    assert (pair["tasks_placed"], pair["tasks"]) == (1, 2)
    assert pair["per_task"][1] is None
    ours = np.array(placed["planners"]["dreamshard +split"]["costs_ms"])
    theirs = np.array(placed["planners"]["torchrec +split"]["costs_ms"])
    assert pair["ratio"] == pytest.approx(np.exp(np.mean(np.log(ours / theirs))))
    assert results["targets"]["vs_torchrec"][TARGET]["tasks_placed"] == 1
    assert suite["vs_torchrec"]["dreamshard / torchrec"]["tasks_placed"] == 0
    assert suite["vs_torchrec"]["dreamshard / torchrec"]["ratio"] is None
    row = suite["planners"]["torchrec +split"]
    assert (row["tasks_placed"], row["tasks_placed_none"], row["tasks"]) == (1, 0, 2)
    assert row["auto_vs_none_tasks"] == [] and row["vs_strongest_auto"] > 0
    assert suite["planners"]["lookup +split"]["tasks_placed"] == 2  # the existing rows stay

    report = out.with_suffix(".md").read_text()
    assert "torchrec +split [1/2]" in report
    assert f"`dreamshard +split` vs `torchrec +split`: {pair['ratio']:.3f}" in report
    assert "[1/2 tasks TorchRec placed; per task: " in report
    assert "`dreamshard` vs `torchrec`: no task placed [0/2 tasks TorchRec placed" in report
    assert json.loads(out.with_suffix(".json").read_text())["suites"][SUITE]["vs_torchrec"]
