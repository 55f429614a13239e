"""Measuring on a Dask cluster (costs/fanout.py): real LocalClusters, real worker processes."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from dreamshard.costs.backends import make_backend
from dreamshard.costs.collect import Job, collect, collection_jobs
from dreamshard.costs.dataset import CostDataset, hardware, measurement_key
from dreamshard.costs.fanout import (
    CONNECT_ENV,
    BackendSpec,
    Fanout,
    dask_client,
    measure_many,
)
from dreamshard.costs.host_lock import LOCK_ENV
from dreamshard.errors import DreamshardError
from dreamshard.evaluation.evaluate import evaluate
from dreamshard.placement.registry import baseline_planners
from dreamshard.placement.suites import make_suite, parse_suite_name
from tests.conftest import error_line

distributed = pytest.importorskip("distributed")


def suite_jobs(count: int, suite: str = "cpu-10x2") -> tuple[str, list[Job]]:
    spec = parse_suite_name(suite, num_train_tasks=8, num_test_tasks=1)
    return spec.name, list(collection_jobs(make_suite(spec), count))


def stored(path) -> dict[str, tuple]:
    """key -> (task, placement, per-device costs) of every record."""
    dataset = CostDataset(path)
    try:
        return {r["key"]: (r["task"], r["placement"], r["costs"]) for r in dataset.rows()}
    finally:
        dataset.close()


def test_two_workers_collect_and_train_as_this_process_does(tmp_path):
    """20 placements collected on 2 workers equal those collected here; a training run whose
    measurements fan out (`train --cluster`) stores what the same run stores here."""
    from test_learning import small_config

    from dreamshard.learn.train import train

    name, jobs = suite_jobs(20)
    backend = make_backend("simulated")
    collect(jobs, backend, CostDataset(tmp_path / "here.sqlite"), name)
    quiet = lambda *_: None  # noqa: E731
    train(small_config(tmp_path / "train-here", iterations=1), log=quiet)
    with dask_client("local:2") as client:
        fanout = Fanout(client, BackendSpec("simulated"))
        summary = collect(jobs, backend, CostDataset(tmp_path / "cluster.sqlite"), name, fanout)
        slow = BackendSpec("simulated", delay_s=0.3)
        workers = {m.worker for m in measure_many(keyed(jobs[:6]), slow, client)}
        address = client.scheduler.address  # the same cluster, reached by its address
        train(small_config(tmp_path / "train-cluster", iterations=1, cluster=address), log=quiet)
    assert summary.measured == 20 and summary.errors == 0
    assert stored(tmp_path / "cluster.sqlite") == stored(tmp_path / "here.sqlite")
    assert len(workers) == 2  # both workers measured
    trained = [
        stored(tmp_path / f"train-{w}" / "run" / "costs.sqlite") for w in ("here", "cluster")
    ]
    assert trained[0] == trained[1] and len(trained[0]) > 12


WHERE = ("here", "cluster")


def keyed(jobs: list[Job]) -> list[tuple[str, Job]]:
    config = make_backend("simulated").config()
    return [(measurement_key(j.task, j.placement, config, j.round, hardware()), j) for j in jobs]


def test_a_worker_killed_mid_job_loses_nothing_and_counts_each_job_once(tmp_path):
    """Jobs of a fixed 1.5 s each; one worker is killed while it holds one: the scheduler runs
    that job again on a worker that lives, the collector counts it once, and the dataset ends
    with every job's record and no failed one. (A record's key is unique in the dataset, so a
    job redone can never be stored twice: that is the schema's guarantee, not tested here.)"""
    name, jobs = suite_jobs(4)
    path = tmp_path / "costs.sqlite"
    with dask_client("local:2") as client:
        pids = client.run(os.getpid)  # worker address -> its process id
        fanout = Fanout(client, BackendSpec("simulated", delay_s=1.5))
        victim = {}

        def kill_when_busy():
            while not victim:
                busy = {w: tasks for w, tasks in client.processing().items() if tasks}
                if busy:
                    address = sorted(busy)[0]
                    victim[address] = pids[address]
                    os.kill(pids[address], signal.SIGKILL)
                time.sleep(0.05)

        killer = threading.Thread(target=kill_when_busy, daemon=True)
        killer.start()
        summary = collect(jobs, make_backend("simulated"), CostDataset(path), name, fanout)
        killer.join(timeout=10)
    assert victim, "no worker was killed"
    assert summary.measured == len(jobs) and summary.errors == 0
    dataset = CostDataset(path)
    try:
        keys = [r["key"] for r in dataset.rows()]
        failed = dataset.rows(status="error")
    finally:
        dataset.close()
    assert sorted(keys) == sorted(k for k, _ in keyed(jobs)) and failed == []  # none lost


def test_fbgemm_workers_on_one_host_never_measure_at_once(tmp_path, monkeypatch):
    """(The lock file is this test's own, as every measurement on a host would share one; the
    workers inherit it.)"""
    pytest.importorskip("fbgemm_gpu")
    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "host.lock"))
    _, jobs = suite_jobs(4, "cpu-8x2")
    spec = BackendSpec("fbgemm", iterations=3)
    config = make_backend("fbgemm", 3).config()
    work = [(measurement_key(j.task, j.placement, config, j.round, hardware()), j) for j in jobs]
    with dask_client("local:2") as client:
        done = list(measure_many(work, spec, client))
    assert len(done) == 4 and all(m.cost is not None for m in done)
    assert len({m.worker for m in done}) == 2  # both workers measured
    spans = sorted((m.started, m.finished) for m in done)
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end  # the host lock: one measurement at a time


def test_a_scheduler_that_cannot_be_reached_is_one_line_and_writes_nothing(
    cli, tmp_path, monkeypatch
):
    monkeypatch.setenv(CONNECT_ENV, "2")  # not the 10 s a user waits by default
    dataset = tmp_path / "costs.sqlite"
    what = ["--suite", "cpu-10x2", "--placements", "3", "--backend", "simulated"]
    result = cli("collect", *what, "--dataset", str(dataset), "--cluster", "tcp://127.0.0.1:9")
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in error_line(result)
    assert not dataset.exists()


def test_jobs_ask_the_workers_for_the_gpus_they_occupy():
    """A placement run under torchrun holds one GPU per device: on a worker declaring 2 GPUs
    (and 2 threads) two 2-device jobs never run at once; a 4-device job is one line, not a job
    that waits forever. (Simulated costs stand in for the run, under torchrun's resources.)"""
    _, jobs = suite_jobs(3)
    _, wide = suite_jobs(1, "cpu-10x4")
    spec = BackendSpec("simulated", launcher="torchrun", delay_s=0.4)
    options = dict(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None)
    with distributed.LocalCluster(resources={"GPU": 2}, **options) as cluster:
        with distributed.Client(cluster) as client:
            done = list(measure_many(keyed(jobs), spec, client))
            with pytest.raises(DreamshardError, match="needs GPU=4 on one worker .* is 2"):
                list(measure_many(keyed(wide), spec, client))
    spans = sorted((m.started, m.finished) for m in done)
    assert len(spans) == 3 and all(m.cost is not None for m in done)
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end


def test_an_evaluation_measures_a_task_a_job_as_this_process_does(tmp_path):
    """Each held-out task's interleaved rounds go to one worker as one job: the costs equal
    those measured here (simulated: exact), each is stored once, and a second run reads them
    back instead of measuring."""
    spec = parse_suite_name("cpu-10x2", num_train_tasks=1, num_test_tasks=4)
    tasks, planners = make_suite(spec).test_tasks, baseline_planners()
    backend = make_backend("simulated")
    here = evaluate(tasks, planners, backend, rounds=2)
    dataset = CostDataset(tmp_path / "costs.sqlite")
    with dask_client("local:2") as client:
        fanout = Fanout(client, BackendSpec("simulated"))
        there = evaluate(tasks, planners, backend, dataset, 2, "t", fanout=fanout)
        stored = len(dataset)
        again = evaluate(tasks, planners, backend, dataset, 2, "t", fanout=fanout)
    assert np.array_equal(there.costs, here.costs, equal_nan=True)
    assert stored == 2 * len({(t, p.devices) for t, row in enumerate(here.placements) for p in row})
    assert len(dataset) == stored and np.array_equal(again.costs, here.costs, equal_nan=True)
