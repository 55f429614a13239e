"""Collecting and training on DMP step labels: real TorchRec training steps under torchrun on 2
gloo ranks, many placements of a task per launch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from dreamshard.costs.collect import Job, collect, collection_jobs
from dreamshard.costs.dataset import CostDataset
from dreamshard.costs.fanout import BackendSpec, launch_groups, plans_per_launch
from dreamshard.integrations.dmp_backend import REFERENCE, DmpBackend, StepConfig
from dreamshard.learn.costnet_data import load_examples, record_cost, step_split
from dreamshard.learn.model_file import load_model
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import Placement
from tests.conftest import SCRIPT, generated_tables, place_command

pytest.importorskip("torchrec")

SUITE = "cpu-6x2"  # six tables on two devices: a launch of a few plans takes seconds
FAST = StepConfig(warmup=1, steps=2)


def collect_command(dataset, *more: str) -> list[str]:
    what = ["--suite", SUITE, "--train-tasks", "2", "--placements", "3", "--iterations", "2"]
    what += ["--rounds", "2"]
    return [str(SCRIPT), "collect", "--backend", "dmp", *what, "--dataset", str(dataset), *more]


def stored(dataset) -> list:
    return [] if not dataset.exists() else CostDataset(dataset).rows()


def errors(dataset: CostDataset) -> list:
    return dataset.rows("error")


def test_a_dmp_collection_stores_step_labels_and_resumes_after_kill_9(tmp_path):
    """Three placements of two tasks: two launches (one a task). Killed once the first
    launch's labels are stored, the same command measures only the other task's."""
    dataset = tmp_path / "costs.sqlite"
    child = subprocess.Popen(
        collect_command(dataset),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the kill takes its ranks too
    )
    deadline = time.monotonic() + 120
    while not stored(dataset) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    first = stored(dataset)
    assert first, "the first launch stored nothing"
    assert len({row["task"] for row in first}) == 1  # one launch: one task's placements
    done = subprocess.run(
        collect_command(dataset), cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"{3 - len(first)} measured, {len(first)} already stored")
    rows = stored(dataset)
    assert len(rows) == 3 and not errors(CostDataset(dataset))
    for row in rows:  # step labels: each rank's median step, paired with the reference plan
        cost = record_cost(row)
        assert cost.backend == "dmp" and cost.info["terms"] == "step"
        assert len(cost.devices) == 2 and all(d.fwd_comp > 0 for d in cost.devices)
        assert cost.overall == pytest.approx(max(d.fwd_comp for d in cost.devices))
        assert len(cost.info["reference_ms"]) == len(cost.info["round_ms"]) == 2  # --rounds
        assert cost.info["paired_ratio"] > 0
        split = step_split(cost)  # each rank's own CPU work, and the rest of its wall step
        assert [d.total for d in split.devices] == pytest.approx(cost.info["wall_ms"])
        cpu = [min(c, w) for c, w in zip(cost.info["cpu_ms"], cost.info["wall_ms"])]
        assert [d.fwd_comp for d in split.devices] == pytest.approx(cpu)
    config = json.loads(rows[0]["config"])
    assert config["reference"] == REFERENCE and config["rounds"] == 2
    assert len(load_examples(CostDataset(dataset), config)) == 3


def test_a_launch_that_fails_loses_only_its_own_placements_and_says_why(tmp_path, capsys):
    """Two tasks, two launches; a rank of the first dies mid-launch, on its retry too. Its two
    placements are error records (measured again next run), the other task's is measured. The
    retry is the backend's default: without it a rare abort of the other launch on a loaded
    host (SIGABRT, seen once in a fresh clone's `make test`) failed this test."""
    suite = make_suite(parse_suite_name(SUITE, num_train_tasks=2, num_test_tasks=1))
    first, second = suite.train_tasks
    jobs = list(collection_jobs(suite, 3))  # tasks first, second, first
    assert [job.task.name for job in jobs] == [first.name, second.name, first.name]
    crash = Placement(jobs[0].placement.devices, method="crash")
    jobs[0] = Job(first, crash)
    backend = DmpBackend(FAST, retries=1, rounds=2, program="tests.dmp_crash_program")
    dataset = CostDataset(tmp_path / "costs.sqlite")
    summary = collect(jobs, backend, dataset, SUITE)
    said = [line for line in capsys.readouterr().err.splitlines() if "launch of" in line]
    assert len(said) == 1
    assert f"of {first.name} failed" in said[0]
    assert "rank 1 lost its device in the middle of the launch" in said[0]
    failed = errors(dataset)
    assert {row["task"] for row in failed} == {first.name}
    assert len(failed) == summary.errors == len(jobs) - 1
    assert all("rank 1 lost its device" in row["error"] for row in failed)
    kept = dataset.rows()
    assert [row["task"] for row in kept] == [second.name] and summary.measured == 1


def test_training_on_dmp_labels_runs_end_to_end(tmp_path, cli):
    """`dreamshard train --backend dmp`: a warm start and one iteration measured as training
    steps, the shipped network fine-tuned on them, a model that places."""
    out = tmp_path / "run"
    args = ["train", "--suite", SUITE, "--backend", "dmp", "--measure-iterations", "2"]
    args += ["--measure-rounds", "2"]
    args += ["--out", str(out), "--iterations", "1", "--warm-start", "3", "--train-tasks", "1"]
    args += ["--placements-per-iteration", "2", "--costnet-steps", "5", "--pretrain", "0"]
    args += ["--policy-updates", "1", "--episodes", "2"]
    done = cli(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    model = load_model(out / "model.pt")
    assert model.metadata["backend"]["backend"] == "dmp"
    assert model.metadata["backend"]["rounds"] == 2
    assert model.costnet.comm is None  # the step's exchanges are measured, not modeled
    # steps far below the shipped network's cost scale: fine-tuned with its relative loss
    assert model.metadata["config"]["costnet_loss"] == "log-ratio"
    rows = CostDataset(out / "costs.sqlite").rows()
    assert len(rows) >= 3 and all(record_cost(row).info["terms"] == "step" for row in rows)
    tables = generated_tables(tmp_path / "tables.json", 6)
    placed = cli(*place_command(tables, 2, 1.0, "--model", str(out / "model.pt")))
    assert placed.returncode == 0, placed.stderr[-2000:]


def test_an_evaluations_rounds_cut_into_one_launch_per_task_and_round():
    """The flows' evaluation on dmp: a task's placements of one round are one launch (at most
    `plans_per_launch` each), in the sequence's order."""
    suite = make_suite(parse_suite_name(SUITE, num_train_tasks=2, num_test_tasks=1))
    jobs = list(collection_jobs(suite, 6))
    sequence = [
        (f"{job.task.name}/{job.placement.method}/{r}", Job(job.task, job.placement, r))
        for task in suite.train_tasks
        for r in range(2)
        for job in jobs
        if job.task.name == task.name
    ]
    groups = list(launch_groups(sequence, 2))
    assert [pair for group in groups for pair in group] == sequence
    for group in groups:
        assert len({(job.task.name, job.round) for _, job in group}) == 1 and len(group) <= 2
    # 2 tasks x 2 rounds, each task's 3 placements a round: launches of 2 and 1
    assert [len(group) for group in groups] == [2, 1] * 4
    assert plans_per_launch(BackendSpec("dmp")) == DmpBackend().plans_per_launch > 1
    assert plans_per_launch(BackendSpec("simulated")) == 1
