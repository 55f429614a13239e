"""Flow `collect-costs`: measure placements of a suite's training tasks into the cost dataset."""

from __future__ import annotations

import mlflow
from prefect import flow

from dreamshard.costs.collect import Job, collect, collection_jobs
from dreamshard.costs.dataset import CostDataset
from dreamshard.costs.fanout import BackendSpec
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.report import markdown_table
from flows.common import (
    TaskFanout,
    backend_for,
    mlflow_run,
    publish,
    work_dir,
)


@flow(name="collect-costs", log_prints=True)
def collect_costs(
    suite: str = "cpu-50x4",
    backend: str = "fbgemm",
    placements: int = 20,
    mix: str = "mixed",
    out: str | None = None,
    parent_run_id: str | None = None,
    cluster: str | None = None,
    train_tasks: int = 50,
) -> dict:
    """Measure `placements` heuristic and random placements (each one a retried task).

    What the dataset holds already is read back, not measured again, so a re-run after a crash
    measures only what is missing. With `cluster` (run it through `flows.common.on_cluster`,
    which gives it Prefect's Dask task runner) the measuring tasks run on the cluster's
    workers and this flow alone writes what they return.
    """
    dataset = str(work_dir(suite, out) / "costs.sqlite")
    params = {
        "suite": suite,
        "backend": backend,
        "placements": placements,
        "mix": mix,
        "dataset": dataset,
        "train_tasks": train_tasks,
    }
    with mlflow_run("collect-costs", suite, params, parent_run_id):
        spec = parse_suite_name(suite, num_train_tasks=train_tasks, num_test_tasks=1)
        jobs = list(collection_jobs(make_suite(spec), placements, mix))
        counts = measured(jobs, backend, dataset, suite, bool(cluster))
        mlflow.log_metrics({f"placements_{k}": v for k, v in counts.items()})
        print(
            f"collect-costs {suite}: {counts['measured']} measured, {counts['stored']} "
            f"already stored, {counts['failed']} failed after retries"
        )
        publish(
            f"collect-costs-{suite}",
            f"Cost collection, {suite} on {backend}",
            markdown_table(
                ["placements", "measured now", "already stored", "failed", "workers"],
                [[len(jobs), *counts.values()]],
            ),
        )
    return {"dataset": dataset, **counts}


def measured(jobs: list[Job], backend: str, dataset: str, suite: str, on_cluster: bool) -> dict:
    """Every job not stored yet measured by a retried task (`flows.common.TaskFanout`): here
    one after another, or all at once on the cluster's workers; what comes back written here,
    one record each (`collect`). A measurement that failed after its retries counts as failed
    and is stored nowhere, so the next run tries it again."""
    fanout = TaskFanout(BackendSpec(backend), on_cluster)
    store = CostDataset(dataset)
    try:
        summary = collect(jobs, backend_for(backend), store, suite, fanout)
    finally:
        store.close()
    return {
        "measured": summary.measured,
        "stored": summary.skipped,
        "failed": fanout.failed + summary.errors,
        "workers": len(fanout.workers),
    }
