"""The Prefect pipeline with real MLflow (sqlite): runs, registry, promotion, faults, resume."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dreamshard.errors import DreamshardError
from tests.conftest import SCRIPT, TINY_PIPELINE, generated_tables, place_command, run_cli


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A fresh state folder (MLflow sqlite, datasets) for this module's pipeline runs."""
    path = tmp_path_factory.mktemp("home")
    saved = {k: os.environ.get(k) for k in ("DREAMSHARD_HOME", "MLFLOW_TRACKING_URI")}
    os.environ["DREAMSHARD_HOME"] = str(path)
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    yield path
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="module")
def harness(home):
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness():
        yield


@pytest.fixture(scope="module")
def first_run(harness):
    from flows.pipeline import pipeline

    return pipeline(**TINY_PIPELINE)


def dataset_keys(path: Path, status: str = "ok") -> list[str]:
    with sqlite3.connect(path) as db:
        return [
            r[0] for r in db.execute("SELECT key FROM measurements WHERE status = ?", (status,))
        ]


def stored_so_far(path: Path) -> int:
    """Measurements stored by a collector still running (0 before it has made its table)."""
    try:
        return len(dataset_keys(path)) if path.exists() else 0
    except sqlite3.OperationalError:
        return 0


def test_pipeline_tracks_runs_and_registers_a_champion(first_run, home):
    from mlflow import MlflowClient

    from dreamshard.tracking import tracking_uri

    assert first_run["alias"] == "champion" and first_run["champion_before"] is None
    assert "Costs: simulated backend (not measured)" in first_run["note"]  # what main prints
    client = MlflowClient(tracking_uri())
    experiment = client.get_experiment_by_name("dreamshard-cpu-12x2")
    runs = client.search_runs([experiment.experiment_id])
    by_flow = {r.data.tags["flow"]: r for r in runs}
    assert set(by_flow) == {
        "pipeline",
        "collect-costs",
        "train-cost-model",
        "train-policy",
        "evaluate",
    }
    parent = by_flow["pipeline"].info.run_id
    for name, run in by_flow.items():
        assert run.info.status == "FINISHED"
        assert "hardware" in run.data.tags and "version.torch" in run.data.tags
        if name != "pipeline":
            assert run.data.tags["mlflow.parentRunId"] == parent
    losses = client.get_metric_history(by_flow["train-cost-model"].info.run_id, "costnet_loss")
    assert len(losses) == TINY_PIPELINE["costnet_steps"]
    rewards = client.get_metric_history(by_flow["train-policy"].info.run_id, "policy_reward_ms")
    assert len(rewards) == TINY_PIPELINE["iterations"] * TINY_PIPELINE["policy_updates"]
    evaluation = client.list_artifacts(by_flow["evaluate"].info.run_id)
    assert {"evaluation.json", "predictions.json"} <= {a.path for a in evaluation}
    assert by_flow["evaluate"].data.metrics["size_lookup.mean_cost_ms"] > 0
    tags = by_flow["evaluate"].data.tags
    assert tags["costs"].startswith("simulated backend (not measured)")
    picked = tags["candidate.picked"]  # e.g. "policy 1, lookup 1": one per held-out task
    assert sum(int(part.rsplit(" ", 1)[1]) for part in picked.split(", ")) == 2, picked
    version = client.get_model_version_by_alias("dreamshard-policy", "champion")
    assert version.tags["suite"] == "cpu-12x2"
    assert client.get_model_version_by_alias("dreamshard-costnet", "champion")


def test_the_champion_places_tables_from_the_registry(first_run, home, tmp_path):
    tables = generated_tables(tmp_path / "tables.json", 12)
    plan = tmp_path / "plan.json"
    champion = ["--model", "models:/dreamshard-policy@champion", "--out", str(plan)]
    done = run_cli(*place_command(tables, 2, 1, "--method", "dreamshard", *champion))
    assert done.returncode == 0, done.stderr
    # the dreamshard planner names its pick (a heuristic it kept keeps that heuristic's name as
    # its method); a heuristic run on its own names none
    picked = json.loads(plan.read_text())
    assert picked["candidate"], picked
    assert (
        picked["method"] == "dreamshard" or picked["candidate"] == "heuristic " + picked["method"]
    ), picked

    from dreamshard import PlacementTask, place
    from dreamshard.placement.tasks import is_legal
    from dreamshard.tables.synthetic import generate_tables

    task = PlacementTask(tuple(generate_tables("cpu", 20, seed=5)), 3, 2**30)
    placement = place(task, "dreamshard", model="models:/dreamshard-policy@champion")
    assert is_legal(task, placement)


def test_a_rerun_measures_nothing_it_has_stored(first_run, home):
    from flows.pipeline import pipeline

    dataset = Path(first_run["work_dir"]) / "costs.sqlite"
    before = dataset_keys(dataset)
    second = pipeline(**TINY_PIPELINE)
    after = dataset_keys(dataset)
    assert sorted(after) == sorted(before) and len(set(after)) == len(after)
    # the same weights registered again cannot beat the champion: it stays a candidate
    assert second["champion_before"] == first_run["candidate"]["policy"]
    assert second["alias"] == "candidate"


class FlakyBackend:
    """The simulated backend, except that its first measurement fails."""

    def __init__(self):
        from dreamshard.costs.backends import make_backend

        self.inner, self.calls = make_backend("simulated"), 0
        self.name = self.inner.name

    def config(self):
        return self.inner.config()

    def measure(self, task, placement):
        from dreamshard.costs.fbgemm import MeasurementError

        self.calls += 1
        if self.calls == 1:
            raise MeasurementError("injected failure")
        return self.inner.measure(task, placement)


def test_a_failed_measurement_is_retried(harness, monkeypatch, tmp_path):
    import dreamshard.costs.fanout
    from flows.collect_costs import collect_costs

    flaky = FlakyBackend()  # what each measuring task makes from its BackendSpec
    monkeypatch.setattr(dreamshard.costs.fanout, "_backend", lambda spec: flaky)
    result = collect_costs("cpu-10x2", "simulated", 6, out=str(tmp_path))
    assert result["failed"] == 0 and result["measured"] + result["stored"] == 6
    keys = dataset_keys(tmp_path / "costs.sqlite")
    assert len(keys) == result["measured"] == len(set(keys))
    assert dataset_keys(tmp_path / "costs.sqlite", status="error") == []
    assert flaky.calls == result["measured"] + 1


def test_the_collect_flow_measures_on_dask_workers_and_writes_once(harness, tmp_path):
    """Prefect's Dask task runner on an embedded cluster of 2 workers: both measure, the flow
    alone writes, and the dataset equals the one the flow collects in process."""
    from flows.collect_costs import collect_costs
    from flows.common import on_cluster

    run = on_cluster(collect_costs, "local:2")
    result = run("cpu-10x2", "simulated", 8, out=str(tmp_path / "dask"), cluster="local:2")
    assert result["measured"] == 8 and result["failed"] == 0 and result["workers"] == 2
    collect_costs("cpu-10x2", "simulated", 8, out=str(tmp_path / "here"))
    cluster, here = (sorted(dataset_keys(tmp_path / d / "costs.sqlite")) for d in ("dask", "here"))
    assert cluster == here and len(cluster) == 8


def test_an_evaluation_in_a_flow_measures_a_task_a_job_on_dask_workers(harness, tmp_path):
    """The evaluate flow's measuring on a cluster: each task's rounds one `measure_in_order`
    task on a worker of Prefect's Dask runner; the costs equal those measured in process."""
    from prefect import flow

    from dreamshard.costs.backends import make_backend
    from dreamshard.costs.dataset import CostDataset
    from dreamshard.costs.fanout import BackendSpec
    from dreamshard.evaluation.evaluate import evaluate
    from dreamshard.placement.registry import baseline_planners
    from dreamshard.placement.suites import make_suite, parse_suite_name
    from flows.common import TaskFanout, on_cluster

    spec = parse_suite_name("cpu-10x2", num_train_tasks=1, num_test_tasks=4)
    tasks, planners = make_suite(spec).test_tasks, baseline_planners()
    backend = make_backend("simulated")

    @flow
    def rounds_on_workers(dataset: str) -> tuple[list, int, int]:
        fanout = TaskFanout(BackendSpec("simulated"), on_cluster=True)
        # the runner's workers, asked before any task is submitted (what is stored is keyed by)
        seen = len(fanout._client().scheduler_info(n_workers=-1)["workers"])
        store = CostDataset(dataset)
        evaluation = evaluate(tasks, planners, backend, store, 2, "t", fanout=fanout)
        return evaluation.costs.tolist(), len(fanout.workers), seen

    costs, workers, seen = on_cluster(rounds_on_workers, "local:2")(str(tmp_path / "c.sqlite"))
    here = evaluate(tasks, planners, backend, rounds=2)
    assert costs == here.costs.tolist() and workers == seen == 2

    @flow
    def not_on_dask() -> None:
        TaskFanout(BackendSpec("simulated"), on_cluster=True).measurers()

    with pytest.raises(DreamshardError, match="run it through flows.common.on_cluster"):
        not_on_dask()


def test_a_killed_collection_resumes_without_duplicates(harness, tmp_path):
    from flows.collect_costs import collect_costs

    dataset = tmp_path / "costs.sqlite"
    program = (
        "from flows.collect_costs import collect_costs; "
        f"collect_costs('cpu-12x2', 'fbgemm', 6, out={str(tmp_path)!r})"
    )
    env = {**os.environ, "DREAMSHARD_HOME": str(tmp_path / "home")}
    # its own session, so that killing it also kills its ephemeral Prefect server
    child = subprocess.Popen(
        [sys.executable, "-c", program],
        env=env,
        cwd=Path.cwd(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and child.poll() is None:
            if stored_so_far(dataset) >= 2:
                break
            time.sleep(0.2)
        assert child.poll() is None, "the collection finished before it could be killed"
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    stored = len(dataset_keys(dataset))
    assert 2 <= stored < 6
    result = collect_costs("cpu-12x2", "fbgemm", 6, out=str(tmp_path))
    keys = dataset_keys(dataset)
    assert len(keys) == len(set(keys)) == stored + result["measured"]
    assert result["stored"] >= stored and result["failed"] == 0


def test_unusable_tracking_or_registry_gives_one_line(cli, tmp_path):
    tables = generated_tables(tmp_path / "tables.json", 6)
    place = place_command(tables, 2, 1, "--method", "dreamshard", "--model")
    env_home = {"DREAMSHARD_HOME": str(tmp_path / "home")}
    cases = [
        ({"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"}, "models:/dreamshard-policy@champion"),
        (env_home, "models:/dreamshard-policy@champion"),
        (env_home, "models:/no-such-model/3"),
    ]
    # mlflow.set_tracking_uri exports MLFLOW_TRACKING_URI: earlier tests' stores must not leak
    clean = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    for env, uri in cases:
        done = subprocess.run(
            [str(SCRIPT), *place, uri], capture_output=True, text=True, env={**clean, **env}
        )
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "flows.pipeline"],
        capture_output=True,
        text=True,
        env={**os.environ, "MLFLOW_TRACKING_URI": "http://127.0.0.1:9"},
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot be used" in lines[0]


def evaluate_first_run(first_run, out: Path, **options) -> dict:
    """The evaluate flow on the first run's candidate (trained on simulated costs)."""
    from flows.evaluate import evaluate_models

    candidate = first_run["candidate"]
    return evaluate_models(
        suite=TINY_PIPELINE["suite"],
        backend="simulated",
        candidate=candidate,
        out=str(out),
        **options,
    )


def test_the_evaluate_flow_adds_a_refined_row_on_request(first_run, tmp_path):
    refine = dict(refine_backend="simulated", refine_seconds=5)
    result = evaluate_first_run(first_run, tmp_path, tasks=2, rounds=2, **refine)
    rows = {row["planner"]: row for row in result["summary"]}
    refined, plain = rows["candidate_refined"], rows["candidate"]
    assert refined["tasks_placed"] == 2 and refined["picked"]  # which candidates won, by name
    # exact costs: refinement leaves the candidate's own pick only for a cheaper placement
    assert refined["mean_cost_ms"] <= plain["mean_cost_ms"]


def test_the_evaluate_flow_measures_on_its_eval_backend(first_run, tmp_path):
    # the models learnt simulated costs; the evaluation times real kernels (as `dmp` would)
    result = evaluate_first_run(first_run, tmp_path, tasks=1, rounds=1, eval_backend="fbgemm")
    assert "fbgemm backend (measured)" in result["note"]
    with sqlite3.connect(tmp_path / "costs.sqlite") as db:
        backends = {r[0] for r in db.execute("SELECT DISTINCT backend FROM measurements")}
    assert backends == {"fbgemm"}
    assert all(row["mean_cost_ms"] > 0 for row in result["summary"])
