"""The MLflow store: processes that open one fresh sqlite store at once all get a working store."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from dreamshard.tracking import checked_client, sqlite_file

ROOT = Path(__file__).resolve().parent.parent
PROCESSES = 2
TIMEOUT_S = 180

# Each process imports everything first, says it is ready, then spins on the start file so that
# all of them open the store within a millisecond of each other.
CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path

    from dreamshard.tracking import connect

    folder, name, uri = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    (folder / f"ready-{name}").touch()
    deadline = time.monotonic() + 120
    while not (folder / "go").exists():
        if time.monotonic() > deadline:
            sys.exit("no start signal")
        time.sleep(0.001)
    connect(uri)
    """
)


def test_processes_setting_up_one_fresh_store_at_once_all_succeed(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(MLFLOW_DISABLE_TELEMETRY="true", DREAMSHARD_HOME=str(tmp_path / "home"))
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path), str(i), uri],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(PROCESSES)
    ]
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not all((tmp_path / f"ready-{i}").exists() for i in range(PROCESSES)):
            assert all(p.poll() is None for p in processes), "a process exited before the start"
            assert time.monotonic() < deadline, "the processes did not get ready"
            time.sleep(0.05)
        (tmp_path / "go").touch()
        results = [p.communicate(timeout=TIMEOUT_S) for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_, stderr) in zip(processes, results, strict=True):
        assert p.returncode == 0 and "Traceback" not in stderr, stderr[-4000:]

    client = checked_client(uri)  # the store works: tracking and the registry
    experiment_id = client.create_experiment("after-the-race")
    assert client.get_experiment_by_name("after-the-race").experiment_id == experiment_id
    client.create_registered_model("after-the-race")
    assert client.get_registered_model("after-the-race").name == "after-the-race"


def test_sqlite_file_of_a_uri():
    assert sqlite_file("sqlite:////abs/dir/mlflow.db") == Path("/abs/dir/mlflow.db")
    assert sqlite_file("sqlite:///rel/mlflow.db?timeout=20") == Path("rel/mlflow.db")
    assert sqlite_file("sqlite://") is None
    assert sqlite_file("sqlite:///:memory:") is None
    assert sqlite_file("http://mlflow-host:5000") is None
