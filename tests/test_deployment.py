"""A real Prefect server and process worker on 127.0.0.1: deploy from prefect.yaml and run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port, wait_for_http

ROOT = Path(__file__).resolve().parents[1]
PREFECT = str(Path(sys.executable).parent / "prefect")


def stop(process: subprocess.Popen, signals=(signal.SIGINT, signal.SIGINT)) -> None:
    """Stop by process id: the given signals a few seconds apart, then SIGKILL."""
    for sig in signals:
        if process.poll() is not None:
            return
        os.kill(process.pid, sig)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            continue
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture
def server(tmp_path):
    port = free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DREAMSHARD_HOME": str(tmp_path / "ds"),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        # the worker asks for scheduled runs every second, not every 10 (the default)
        "PREFECT_WORKER_QUERY_SECONDS": "1",
    }
    env.pop("MLFLOW_TRACKING_URI", None)
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115
    command = [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_http(f"{env['PREFECT_API_URL']}/health", 180)
        yield env
    finally:
        stop(process, (signal.SIGTERM,))
        log.close()


def prefect(env: dict, *args: str) -> str:
    done = subprocess.run(
        [PREFECT, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_deploy_from_prefect_yaml_and_run_on_a_worker(server, tmp_path):
    env = server
    prefect(env, "work-pool", "create", "train-cpu", "--type", "process")
    prefect(env, "--no-prompt", "deploy", "--name", "train-cost-model")
    worker_log = open(tmp_path / "worker.log", "w")  # noqa: SIM115
    worker = subprocess.Popen(
        [PREFECT, "worker", "start", "--pool", "train-cpu"],
        env=env,
        cwd=ROOT,
        stdout=worker_log,
        stderr=subprocess.STDOUT,
    )
    try:
        # the cost model needs measurements: collect a few in-process first (no server needed)
        subprocess.run(
            [
                sys.executable,
                "-c",
                "from dreamshard.costs.backends import make_backend\n"
                "from dreamshard.costs.collect import collect, collection_jobs\n"
                "from dreamshard.costs.dataset import CostDataset\n"
                "from dreamshard.placement.suites import make_suite, parse_suite_name\n"
                "from flows.common import work_dir\n"
                "suite = make_suite(parse_suite_name('cpu-10x2', num_test_tasks=1))\n"
                "collect(list(collection_jobs(suite, 12)), make_backend('simulated'),"
                " CostDataset(work_dir('cpu-10x2') / 'costs.sqlite'))",
            ],
            env=env,
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        parameters = json.dumps({"suite": "cpu-10x2", "backend": "simulated", "steps": 20})
        out = prefect(
            env,
            "deployment",
            "run",
            "train-cost-model/train-cost-model",
            "--params",
            parameters,
            "--watch",
            "--watch-timeout",
            "240",
        )
        assert "Completed" in out, out
    finally:
        stop(worker)
        worker_log.close()
    assert (tmp_path / "ds" / "pipeline" / "cpu-10x2" / "costnet.pt").exists()
    assert (tmp_path / "ds" / "mlflow.db").exists()
