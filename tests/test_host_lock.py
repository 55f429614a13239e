"""One measurement at a time per host: real processes measuring tiny tables take turns."""

from __future__ import annotations

import contextvars
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dreamshard.costs.collect import collect, collection_jobs
from dreamshard.costs.dataset import CostDataset
from dreamshard.costs.host_lock import LOCK_ENV, host_lock
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.placement.suites import make_suite, parse_suite_name
from tests.conftest import SCRIPT

ROOT = Path(__file__).resolve().parent.parent
PLACEMENTS = 4  # simulated ones

# One collector: waits for the go file (so that both start measuring together), then collects
# 4 of the first 6 tiny placements of cpu-12x2, from the one given on, and prints its summary.
COLLECTOR = """
import json, sys, time
from pathlib import Path
from dreamshard.costs.collect import collect, collection_jobs
from dreamshard.costs.dataset import CostDataset
from dreamshard.costs.fbgemm import FbgemmBackend
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.costs.tbe import TimingConfig

dataset, ready, go, first = sys.argv[1:]
suite = make_suite(parse_suite_name("cpu-12x2", num_train_tasks=2, num_test_tasks=1))
jobs = list(collection_jobs(suite, 6))[int(first) : int(first) + 4]
backend = FbgemmBackend(timing=TimingConfig(warmup=1, iterations=2))
backend.config()  # torch and the kernels loaded before the start
Path(ready).touch()
while not Path(go).exists():
    time.sleep(0.01)
print(json.dumps(collect(jobs, backend, CostDataset(dataset), "cpu-12x2").__dict__))
"""


@pytest.fixture
def lock_env(tmp_path, monkeypatch):
    """A lock file of this test's own, so that other measurements on the host do not delay it."""
    path = tmp_path / "measure.lock"
    monkeypatch.setenv(LOCK_ENV, str(path))
    return {**os.environ, LOCK_ENV: str(path)}


def intervals(dataset: Path) -> list[tuple[float, float]]:
    with sqlite3.connect(dataset) as db:
        infos = [json.loads(r[0]) for r in db.execute("SELECT info FROM measurements")]
    return [(i["started"], i["finished"]) for i in infos]


def test_two_collections_started_together_take_turns(lock_env, tmp_path):
    # on one dataset: a collects placements 0-3, b 2-5; each has some only it collects
    dataset, go = tmp_path / "costs.sqlite", tmp_path / "go"
    children = []
    for name, first in (("a", 0), ("b", 2)):
        ready = tmp_path / f"ready-{name}"
        command = [sys.executable, "-c", COLLECTOR, str(dataset), str(ready), str(go), str(first)]
        child = subprocess.Popen(
            command, env=lock_env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        children.append((child, ready))
    deadline = time.monotonic() + 240
    while not all(ready.exists() for _, ready in children) and time.monotonic() < deadline:
        assert all(child.poll() is None for child, _ in children), "a collector exited early"
        time.sleep(0.05)
    go.touch()
    outputs = [child.communicate(timeout=240) for child, _ in children]
    # the tracebacks without the progress lines (which crowd them out of pytest's message)
    failures = [
        "\n".join(line for line in e.decode().splitlines() if not line.startswith("measuring"))
        for _, e in outputs
    ]
    assert all(child.returncode == 0 for child, _ in children), failures
    a, b = (json.loads(out.strip().splitlines()[-1]) for out, _ in outputs)

    # every placement measured once: the two shared ones by whichever came first
    assert a["measured"] + b["measured"] == len(CostDataset(dataset)) == 6
    assert a["measured"] + a["skipped"] == b["measured"] + b["skipped"] == 4
    # every measurement is stored with when it ran: no two overlapped
    spans = sorted(intervals(dataset))
    assert len(spans) == 6
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert end <= start
    # whoever waited said so, once, naming the holder
    for _, err in outputs:
        waits = [line for line in err.decode().splitlines() if "waiting:" in line]
        assert len(waits) <= 1
        assert all("another measurement holds this host (pid " in line for line in waits)


def test_a_collection_waits_while_the_host_is_held_and_says_by_whom(lock_env, tmp_path):
    dataset = tmp_path / "costs.sqlite"
    command = [
        str(SCRIPT),
        "collect",
        "--suite",
        "cpu-12x2",
        "--train-tasks",
        "2",
        "--placements",
        "2",
        "--iterations",
        "2",
        "--dataset",
        str(dataset),
    ]
    with host_lock():
        child = subprocess.Popen(
            command, env=lock_env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        line = ""
        while "waiting:" not in line and child.poll() is None:
            line = child.stderr.readline().decode()  # blocks until the child says something
        assert line.startswith("dreamshard: waiting: another measurement holds this host")
        assert f"(pid {os.getpid()}: " in line and str(tmp_path / "measure.lock") in line
        assert not dataset.exists() or len(CostDataset(dataset)) == 0
        released = time.time()
    out, err = child.communicate(timeout=240)
    assert child.returncode == 0, err.decode()[-2000:]
    assert out.decode().startswith("2 measured")
    assert all(start >= released for start, _ in intervals(dataset))


def test_the_simulated_backend_measures_while_the_host_is_held(lock_env, tmp_path):
    suite = make_suite(parse_suite_name("cpu-12x2", num_train_tasks=2, num_test_tasks=1))
    jobs = list(collection_jobs(suite, PLACEMENTS))
    done = []

    def simulate():
        dataset = CostDataset(tmp_path / "costs.sqlite")
        done.append(collect(jobs, SimulatedBackend(), dataset, "cpu-12x2"))

    with host_lock():  # another thread waits on it as another process would
        worker = threading.Thread(target=simulate)
        worker.start()
        worker.join(timeout=120)
        assert done and done[0].measured == PLACEMENTS


@pytest.fixture
def prefect_server(tmp_path, monkeypatch):
    from prefect.testing.utilities import prefect_test_harness

    monkeypatch.setenv("DREAMSHARD_HOME", str(tmp_path / "home"))
    with prefect_test_harness():
        yield


def test_a_flow_measurement_waits_for_the_hosts_prefect_slot(lock_env, prefect_server, tmp_path):
    from prefect import get_client
    from prefect.concurrency.sync import concurrency

    from dreamshard.costs.fanout import BackendSpec
    from flows.common import host_limit, measure_placement

    suite = make_suite(parse_suite_name("cpu-12x2", num_train_tasks=2, num_test_tasks=1))
    job = next(collection_jobs(suite, 1))
    spec = BackendSpec("fbgemm", 2)
    spec.make().config()  # torch loaded before the slot is taken
    name = host_limit()
    assert name is not None and name.startswith("dreamshard-measure-")
    results = []

    def measure():
        results.append(measure_placement.fn("key", job, spec, host_slot=True))

    with concurrency(name, occupy=1, strict=True):
        # the worker sees the same Prefect server (a thread does not inherit context by itself)
        context = contextvars.copy_context()
        worker = threading.Thread(target=context.run, args=(measure,))
        worker.start()
        time.sleep(3)  # time enough to measure, were the slot not respected
        assert not results
        released = time.time()
    worker.join(timeout=240)
    assert results[0].cost is not None and results[0].started >= released
    with get_client(sync_client=True) as client:
        limit = client.read_global_concurrency_limit_by_name(name)
    assert limit.limit == 1 and limit.active_slots == 0
