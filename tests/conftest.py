"""Shared helpers: run the real `dreamshard` console script, small hand-made tables, a benchmark
script loaded as a module, and a toy trained model."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dreamshard.tables.table import Table

SCRIPT = Path(sys.executable).parent / "dreamshard"
BENCHMARKS = Path(__file__).parents[1] / "benchmarks"


def give_residual_weights(costnet) -> None:
    """A hybrid cost network's residual starts at zero (the analytic model alone), and so does
    the quantities design's weighing of the quantities: give them random weights (the hybrid's
    heads, linear terms and gains) so tests see every part at work."""
    if costnet.quantity_weight is not None:
        with torch.no_grad():
            costnet.quantity_weight.weight.normal_(0.0, 0.3)
    if costnet.gain is None:
        return
    with torch.no_grad():
        for head in costnet.device_heads:
            head[-1].weight.normal_(0.0, 0.3)
            head[-1].bias.normal_(0.0, 0.1)
        costnet.skip.weight.normal_(0.0, 0.3)
        costnet.gain.normal_(0.0, 0.3)


def load_benchmark(name: str):
    """benchmarks/NAME.py as a module, its sibling modules importable as when run as a script."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def toy_model_path(tmp_path_factory):
    """A model file trained for a few steps on the simulated backend: structure, not quality."""
    from test_learning import small_config

    from dreamshard.learn.model_file import save_model
    from dreamshard.learn.train import train

    path = tmp_path_factory.mktemp("model") / "model.pt"
    config = small_config(path.parent, iterations=1, costnet_steps=20, policy_updates=2)
    save_model(train(config, log=lambda *_: None), path)
    return path


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the installed console script, as a user would."""
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def generated_tables(path: Path, count: int, *options: str) -> Path:
    """`path`, written by `dreamshard tables generate` with `count` tables of the cpu profile."""
    what = ["--profile", "cpu", "--num-tables", str(count), *options]
    result = run_cli("tables", "generate", *what, "--out", str(path))
    assert result.returncode == 0, result.stderr
    return path


def place_command(tables: Path, devices: int, mem_gb: float, *options: str) -> list[str]:
    """The words of `dreamshard place` for a table file on `devices` devices of `mem_gb` GiB."""
    devices_and_memory = ["--devices", str(devices), "--mem-gb", str(mem_gb)]
    return ["place", "--tables", str(tables), *devices_and_memory, *options]


def error_line(result: subprocess.CompletedProcess) -> str:
    """The one line a refused command prints: exit code 2, no traceback, the message."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dreamshard: error: "), result.stderr
    return lines[0].removeprefix("dreamshard: error: ")


@pytest.fixture
def cli():
    assert SCRIPT.exists(), f"the dreamshard console script is not installed at {SCRIPT}"
    return run_cli


def random_tables(
    rng: np.random.Generator,
    count: int,
    rows: tuple[int, int],
    dims: list[int],
    pooling: tuple[float, float] = (1.0, 60.0),
) -> tuple[Table, ...]:
    """`count` tables t0, t1, ... of rows, dim and pooling factor drawn from these ranges."""
    return tuple(
        Table(
            f"t{i}",
            rows=int(rng.integers(*rows)),
            dim=int(rng.choice(dims)),
            pooling_factor=float(rng.uniform(*pooling)),
        )
        for i in range(count)
    )


def table(name: str, rows: int = 1000, dim: int = 16, pooling: float = 2.0) -> Table:
    return Table(name=name, rows=rows, dim=dim, pooling_factor=pooling)


# The tiny real pipeline run (about a minute): test_pipeline.py runs the flow with these options,
# and the dashboard tests read the MLflow store of one run of `python -m flows.pipeline`.
TINY_PIPELINE = dict(
    suite="cpu-12x2",
    backend="simulated",
    warm_start=10,
    iterations=2,
    placements_per_iteration=3,
    costnet_steps=40,
    policy_updates=3,
    episodes=4,
    eval_tasks=2,
    rounds=2,
)


@pytest.fixture(scope="session")
def pipeline_home(tmp_path_factory, worker_id) -> Path:
    """A state folder (DREAMSHARD_HOME) holding a real MLflow store: runs, artifacts and
    registered models from one tiny `python -m flows.pipeline` run in a subprocess, and the
    study runs `python -m benchmarks import` makes of the committed rows files.

    Made once for the whole test run: the dashboard's AppTest and browser tests only read it,
    so pytest-xdist's workers share one (the first to ask makes it under a file lock, the
    others wait for it and read it).
    """
    if worker_id == "master":  # no workers: this process's own
        return make_pipeline_home(tmp_path_factory.mktemp("pipeline-home"))
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent  # the same folder for every worker
    home = shared / "pipeline-home"
    with FileLock(str(shared / "pipeline-home.lock")):
        if not (home / ".made").exists():
            home.mkdir(exist_ok=True)
            make_pipeline_home(home)
            (home / ".made").touch()
    return home


def make_pipeline_home(home: Path) -> Path:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "PREFECT_"))}
    env.update(
        DREAMSHARD_HOME=str(home),
        PREFECT_HOME=str(home / "prefect"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        MLFLOW_DISABLE_TELEMETRY="true",
    )
    options = [
        word
        for key, value in TINY_PIPELINE.items()
        for word in (f"--{key.replace('_', '-')}", str(value))
    ]
    # the tiny pipeline, then the study runs a fresh clone's importer makes from the committed
    # rows files (the Evidence page's)
    for what, words in (
        ("the tiny pipeline", ["flows.pipeline", *options]),
        ("the study import", ["benchmarks", "import"]),
    ):
        done = subprocess.run(
            [sys.executable, "-m", *words],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            cwd=Path(__file__).resolve().parent.parent,
        )
        assert done.returncode == 0, f"{what} failed:\n{done.stderr[-3000:]}"
    return home


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_http(url: str, timeout: float, process: subprocess.Popen | None = None) -> None:
    """Until `url` answers 200; fails when `timeout` passes or `process` exits first."""
    import time
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None:
            assert process.poll() is None, f"the server exited with code {process.returncode}"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"nothing answered at {url} within {timeout:.0f} s")


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny networks: a second torch thread on a busy 2-core host only slows them down."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# The test modules that take longest (a minute or more of a worker's time here), run first:
# pytest-xdist's loadscope hands modules out in collection order, so a long one collected last
# would run alone at the end while the other worker idles.
LONGEST_FIRST = (
    "test_deployment",
    "test_pipeline",
    "test_dmp_collect",
    "test_learning",
    "test_dashboard",
    "test_browser",
    "test_studies",
    "test_host_lock",
    "test_torchrec",
    "test_fanout",
)


def pytest_collection_modifyitems(session, config, items) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: order kept within


def pytest_configure(config) -> None:
    """Under pytest-xdist each of the two workers gets one torch thread: two workers of two
    threads each on a 2-core host only wait on each other (timing a kernel gives the process
    its own count back after, `costs/tbe.py`, so this is set once here)."""
    import os

    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)
