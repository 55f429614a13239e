"""The cost dataset and the collector: append-only, resumable, crash-safe."""

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import time
from dataclasses import replace

import pytest

from dreamshard.costs.collect import collect, collection_jobs
from dreamshard.costs.dataset import (
    CostDataset,
    hardware,
    measurement_identity,
    measurement_key,
    record_costs,
    record_task,
)
from dreamshard.costs.fbgemm import FbgemmBackend
from dreamshard.costs.simulated import DEFAULT_PATH, SimulatedBackend, SimulatedModel
from dreamshard.costs.tbe import TimingConfig
from dreamshard.costs.types import COST_TERMS
from dreamshard.learn.costnet_data import load_examples, measured_rows
from dreamshard.learn.train import fitted_measurements, most_measured_machine
from dreamshard.placement.suites import make_suite, parse_suite_name
from tests.conftest import SCRIPT, error_line

FAST = TimingConfig(warmup=1, iterations=2)


@pytest.fixture(scope="module")
def suite():
    return make_suite(parse_suite_name("cpu-12x2", num_train_tasks=3, num_test_tasks=1))


def test_records_round_trip_and_pandas_reads_them(suite, tmp_path):
    dataset = CostDataset(tmp_path / "costs.sqlite")
    jobs = list(collection_jobs(suite, 4))
    summary = collect(jobs, FbgemmBackend(timing=FAST), dataset, "cpu-12x2")
    assert (summary.measured, summary.skipped, summary.errors) == (4, 0, 0)
    frame = dataset.to_frame()
    assert len(frame) == 4 and set(frame["status"]) == {"ok"}
    assert set(frame["comm"]) == {"modeled"} and set(frame["backend"]) == {"fbgemm"}
    assert frame["hardware"].str.len().min() > 0 and "torch" in frame["versions"][0]
    row = dataset.rows()[0]
    task, placement = record_task(row)
    assert task == jobs[0].task and placement.devices == jobs[0].placement.devices
    assert len(record_costs(row)) == task.num_devices


def test_stored_costs_are_what_the_backend_measured(suite, tmp_path):
    dataset = CostDataset(tmp_path / "costs.sqlite")
    backend = SimulatedBackend(SimulatedModel.load(DEFAULT_PATH))  # deterministic
    jobs = list(collection_jobs(suite, 4))
    collect(jobs, backend, dataset, "cpu-12x2")
    rows = dataset.rows()
    assert len(rows) == len(jobs)
    for row, job in zip(rows, jobs):
        task, placement = record_task(row)
        assert task == job.task and placement.devices == job.placement.devices
        cost = backend.measure(job.task, job.placement)
        stored = record_costs(row)
        assert [[c[t] for t in COST_TERMS] for c in stored] == [
            list(d.terms()) for d in cost.devices
        ]
        assert row["overall"] == cost.overall


def test_rerun_skips_what_is_stored(suite, tmp_path):
    dataset = CostDataset(tmp_path / "costs.sqlite")
    backend = FbgemmBackend(timing=FAST)
    collect(list(collection_jobs(suite, 3)), backend, dataset)
    summary = collect(list(collection_jobs(suite, 5)), backend, dataset)
    assert (summary.measured, summary.skipped) == (2, 3)
    assert len(dataset) == 5


def test_failed_measurements_become_error_records_and_are_retried_later(suite, tmp_path):
    dataset = CostDataset(tmp_path / "costs.sqlite")
    broken = FbgemmBackend(timing=TimingConfig(optimizer="ADAM", iterations=1), retries=0)
    jobs = list(collection_jobs(suite, 2))
    summary = collect(jobs, broken, dataset)
    assert summary.errors == 2 and len(dataset.rows(status="error")) == 2
    assert "device" in dataset.rows(status="error")[0]["error"]
    again = collect(jobs, broken, dataset)
    assert again.skipped == 0  # errors are not taken as stored measurements


def test_killed_collector_resumes_without_duplicates(tmp_path):
    path = tmp_path / "costs.sqlite"
    command = [
        str(SCRIPT),
        "collect",
        "--suite",
        "cpu-12x2",
        "--placements",
        "8",
        "--train-tasks",
        "4",
        "--iterations",
        "2",
        "--dataset",
        str(path),
    ]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    stored = 0
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        if path.exists():
            try:
                with sqlite3.connect(path, timeout=5) as db:
                    stored = db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]
            except sqlite3.OperationalError:
                continue  # the table is not created yet
        if stored >= 2:
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=30)
    assert 2 <= stored < 8, "the collector should have been killed mid-run"
    with sqlite3.connect(path) as db:
        before = db.execute("SELECT key, overall FROM measurements").fetchall()
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert f"{len(before)} already stored" in result.stdout
    with sqlite3.connect(path) as db:
        after = db.execute("SELECT key, overall FROM measurements").fetchall()
    assert len(after) == 8 == len({key for key, _ in after})
    assert set(before) <= set(after)  # what was stored is untouched


def record_fields(rows) -> dict:
    """Each record's fields but its row id, by key."""
    return {r["key"]: {k: r[k] for k in r.keys() if k != "id"} for r in rows}


def test_merging_copies_what_is_new_with_every_field(suite, tmp_path):
    backend = SimulatedBackend(SimulatedModel.load(DEFAULT_PATH))
    jobs = list(collection_jobs(suite, 5))
    first, second = CostDataset(tmp_path / "a.sqlite"), CostDataset(tmp_path / "b.sqlite")
    collect(jobs[:3], backend, first)
    collect(jobs[1:], backend, second)  # two placements in common with the first
    merged = CostDataset(tmp_path / "merged.sqlite")
    assert merged.merge_from(first.path) == 3
    assert merged.merge_from(second.path) == 2
    assert merged.merge_from(second.path) == 0
    expected = {**record_fields(second.rows()), **record_fields(first.rows())}
    assert record_fields(merged.rows()) == expected
    assert [r["key"] for r in merged.rows()] == [
        *(r["key"] for r in first.rows()),
        *(r["key"] for r in second.rows()[2:]),
    ]


def test_merge_refuses_a_missing_or_broken_source_in_one_line(cli, tmp_path):
    target = tmp_path / "costs.sqlite"
    collect(
        list(collection_jobs(make_suite(parse_suite_name("cpu-12x2", 2, 1)), 2)),
        SimulatedBackend(),
        CostDataset(target),
    )
    broken = tmp_path / "broken.sqlite"
    broken.write_text("not a database")
    for source, words in (
        (tmp_path / "none.sqlite", "no cost dataset at"),
        (broken, "cannot open cost dataset"),
        (target, "being merged into"),
    ):
        result = cli("merge", str(source), "--dataset", str(target))
        assert result.returncode == 2 and words in error_line(result)
    assert len(CostDataset(target)) == 2  # nothing half-merged


def test_fitting_leaves_out_the_suites_test_tasks(tmp_path):
    """A dataset that holds an evaluation of a suite's test tasks (the main job's does) gives
    the cost network only the training tasks' measurements to fit."""
    suite = make_suite(parse_suite_name("cpu-12x2", num_train_tasks=3, num_test_tasks=2))
    dataset = CostDataset(tmp_path / "costs.sqlite")
    backend = SimulatedBackend()
    collect(list(collection_jobs(suite, 4)), backend, dataset)
    held = replace(suite, train_tasks=suite.test_tasks)
    collect(list(collection_jobs(held, 3)), backend, dataset)
    everything = load_examples(dataset)
    fitted = load_examples(dataset, fitting=True)
    assert len(everything) == 7 and {e.task for e in everything} >= {
        t.name for t in suite.test_tasks
    }
    assert len(fitted) == 4 and all("/train/" in e.task for e in fitted)
    assert len(measured_rows(dataset, backend.config(), fitting=True)) == 4


ANOTHER_GPU = "NVIDIA H100 80GB HBM3"  # a record merged in from a host with that GPU


def test_measurements_of_two_machines_coexist_and_each_fits_its_own(suite, tmp_path):
    """A placement another machine measured (a merged file) is measured here too, and both
    records stay; a second run skips it; a training run fits on this machine's only."""
    dataset = CostDataset(tmp_path / "costs.sqlite")
    backend = FbgemmBackend(timing=FAST)
    job = next(iter(collection_jobs(suite, 1)))
    theirs = backend.measure(job.task, job.placement)
    key = measurement_key(job.task, job.placement, backend.config(), job.round, ANOTHER_GPU)
    dataset.append(key, job.task, job.placement, theirs, backend.config(), measured_on=ANOTHER_GPU)
    first = collect([job], backend, dataset)
    again = collect([job], backend, dataset)
    assert (first.measured, again.measured, again.skipped) == (1, 0, 1)
    assert dataset.machines("fbgemm") == {ANOTHER_GPU: 1, hardware(): 1}
    told = []
    config, machines = fitted_measurements(backend, None, dataset, told.append)
    assert machines == {hardware()} and ANOTHER_GPU in told[0]
    fitted = measured_rows(dataset, config, machines=machines)
    assert [r["hardware"] for r in fitted] == [hardware()]
    # a network fitted on the file alone learns the machine that measured most of it
    other = list(collection_jobs(suite, 2))[1]
    key = measurement_key(other.task, other.placement, backend.config(), 0, ANOTHER_GPU)
    cost = backend.measure(other.task, other.placement)
    dataset.append(
        key, other.task, other.placement, cost, backend.config(), measured_on=ANOTHER_GPU
    )
    assert most_measured_machine(backend.config(), dataset, told.append) == {ANOTHER_GPU}
    assert "2 measurements made on " + ANOTHER_GPU in told[-1]
    # the simulated backend's costs are the same on every machine: one key, every record fits
    assert fitted_measurements(SimulatedBackend(), None, dataset, told.append)[1] == set()


def test_an_older_file_is_rekeyed_on_open_and_a_rerun_measures_nothing(suite, tmp_path):
    """A file written before keys named the machine: opening it gives every record the key of
    its own identity and machine (an error record keeps its suffix), once."""
    path = tmp_path / "old.sqlite"
    backend = FbgemmBackend(timing=FAST)
    jobs = list(collection_jobs(suite, 3))
    collect(jobs, backend, CostDataset(path))
    keys = {r["id"]: r["key"] for r in CostDataset(path).rows()}
    with sqlite3.connect(path) as db:  # the keys as a file of KEY_VERSION 0 held them
        for row in CostDataset(path).rows():
            task, placement = record_task(row)
            old = old_form_key(task, placement, json.loads(row["config"]), row["round"])
            db.execute("UPDATE measurements SET key = ? WHERE id = ?", (old, row["id"]))
        db.execute("UPDATE measurements SET key = key || ':error:7' WHERE id = 1")
        db.execute("PRAGMA user_version = 0")
    reopened = CostDataset(path)
    rekeyed = {r["id"]: r["key"] for r in reopened.rows()}
    assert rekeyed == {**keys, 1: f"{keys[1]}:error:7"}
    rerun = collect(jobs[1:], backend, reopened)
    assert (rerun.measured, rerun.skipped) == (0, 2)


def old_form_key(task, placement, config: dict, round_: int) -> str:
    """A key as files before KEY_VERSION 1 made it: the identity's hash, without the machine."""
    identity = measurement_identity(task, placement, config, round_)
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
