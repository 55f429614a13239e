"""What every flow shares: its MLflow run, its Prefect artifact, the measuring task."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import dask
import mlflow
from prefect import get_client, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.sync import concurrency
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
from prefect.settings import get_current_settings
from prefect.tasks import exponential_backoff

from dreamshard.costs.backends import make_backend
from dreamshard.costs.collect import Job
from dreamshard.costs.fanout import (
    BackendSpec,
    Measured,
    Measurer,
    asked,
    dask_client,
    is_local,
    launch_groups,
    launches,
    local_cluster_options,
    measure_launch,
    measurer,
    plans_per_launch,
    worker_measurers,
    worker_resources,
)
from dreamshard.costs.fanout import measure_one as measure_here
from dreamshard.costs.host_lock import host_name, occupies_host
from dreamshard.costs.types import CostBackend
from dreamshard.errors import DreamshardError
from dreamshard.state import state_dir
from dreamshard.tracking import connect, run_tags, use_experiment

MEASURE_RETRIES = 2
MEASURE_TIMEOUT_S = 600
HOST_SLOT_LEASE_S = 60  # a crashed holder's slot returns after this (the server's minimum)


def work_dir(suite: str, out: str | None = None) -> Path:
    """A pipeline's dataset and models (default .dreamshard/pipeline/SUITE)."""
    path = Path(out) if out else state_dir() / "pipeline" / suite
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


@contextmanager
def mlflow_run(
    name: str, suite: str, params: dict, parent_run_id: str | None = None
) -> Iterator[mlflow.ActiveRun]:
    """An MLflow run in the suite's experiment, nested under `parent_run_id` when given."""
    connect()
    use_experiment(suite)
    tags = {**run_tags(), "suite": suite, "flow": name}
    with mlflow.start_run(
        run_name=name, nested=parent_run_id is not None, parent_run_id=parent_run_id, tags=tags
    ) as run:
        mlflow.log_params(params)
        yield run


def publish(key: str, title: str, markdown: str) -> None:
    """A Prefect markdown artifact, and the same text as an MLflow artifact of the active run."""
    text = f"## {title}\n\n{markdown}\n"
    create_markdown_artifact(key=key, markdown=text, description=title)
    mlflow.log_text(text, f"{key}.md")


# a measuring task: retried with backoff, stopped after MEASURE_TIMEOUT_S, never cached
MEASURING = dict(
    retries=MEASURE_RETRIES,
    retry_delay_seconds=exponential_backoff(backoff_factor=1),
    timeout_seconds=MEASURE_TIMEOUT_S,
    cache_policy=NO_CACHE,
    task_run_name="measure {job.task.name} {job.placement.method} round {job.round}",
)


@cache
def backend_for(name: str, iterations: int | None = None) -> CostBackend:
    """One backend object per process and settings (the fbgemm one warms up once)."""
    return make_backend(name, iterations)


@task(**MEASURING)
def measure_placement(key: str, job: Job, spec: BackendSpec, host_slot: bool = False) -> Measured:
    """The job measured where the task runs (this process, or a Dask worker on a cluster),
    under that host's lock and, with `host_slot`, its Prefect slot; nothing is written there:
    the flow stores what comes back. A failed measurement raises, so Prefect retries it."""
    with host_turn(spec.name) if host_slot else nullcontext():
        measured = measure_here(key, job, spec)
    if measured.cost is None:
        raise DreamshardError(f"{job.task.name} {job.placement.method}: {measured.error}")
    return measured


@task(**{**MEASURING, "task_run_name": "measure {keyed[0][1].task.name}, its rounds"})
def measure_in_order(
    keyed: list[tuple[str, Job]], spec: BackendSpec, host_slot: bool = False
) -> list[Measured]:
    """An evaluation task's placements measured round after round where the task runs (one
    worker: the rounds stay paired), each as `measure_placement` does; nothing is written
    there; where the backend measures many placements in one launch, each round's are one
    (`measure_batch`). Its timeout is set per call."""
    size = plans_per_launch(spec)
    if size > 1:
        groups = launch_groups(keyed, size)
        return [m for group in groups for m in measure_batch.fn(group, spec, host_slot)]
    return [measure_placement.fn(key, job, spec, host_slot) for key, job in keyed]


@task(**{**MEASURING, "task_run_name": "measure {keyed[0][1].task.name}, one launch"})
def measure_batch(
    keyed: list[tuple[str, Job]], spec: BackendSpec, host_slot: bool = False
) -> list[Measured]:
    """Placements of one task measured in one launch where the task runs (`measure_launch`);
    nothing is written there. A failed launch raises, so Prefect retries it whole."""
    with host_turn(spec.name) if host_slot else nullcontext():
        measured = measure_launch(keyed, spec)
    if measured[0].cost is None:
        raise DreamshardError(f"a launch of {keyed[0][1].task.name}: {measured[0].error}")
    return measured


def _measuring(keyed: list, size: int) -> tuple:
    """The retried task that measures `keyed` and its arguments before the spec: one launch
    (`measure_batch`, timed out for its placements) where the backend measures `size` > 1
    placements in one, else its one job (`measure_placement`)."""
    if size > 1:
        return measure_batch.with_options(timeout_seconds=MEASURE_TIMEOUT_S * len(keyed)), (keyed,)
    return measure_placement, keyed[0]


def _records(result: Measured | list[Measured]) -> list[Measured]:
    """What a `_measuring` task returned, as a list: a launch's records, or the one job's."""
    return result if isinstance(result, list) else [result]


@dataclass
class TaskFanout:
    """How a flow measures: `costs.collect.collect`'s and `evaluation.evaluate`'s fan-out
    through Prefect tasks that return their records; only the flow writes.

    In this process (`on_cluster` False) each job is a retried `measure_placement` task, run
    one after another, holding the host's Prefect slot as it measures (an evaluation task's
    rounds too: each comes back, and is stored, as it is measured). On a cluster (the flow run
    through `on_cluster`) every job, or every evaluation task's rounds as one `measure_in_order`
    task, is submitted to Prefect's Dask task runner at once, asking Dask for the resources it
    occupies where workers declare them (`costs.fanout.asked`), which take the place of the
    Prefect slot: workers need no Prefect API. What fails after its retries is counted and
    never stored: a collection goes on; an evaluation, which needs every round, stops once
    all that did come back is stored. Where the backend measures many placements of a task
    in one launch (dmp), a collection's task's placements, and an evaluation task's round,
    are one launch each (`measure_batch`).
    """

    spec: BackendSpec
    on_cluster: bool = False
    failed: int = 0
    workers: set = field(default_factory=set)  # processes that measured

    def measure(self, jobs: Iterable[tuple[str, Job]]) -> Iterator[Measured]:
        """Each job measured by a retried task, or, where the backend measures many placements
        of a task in one launch (dmp), each launch by one retried `measure_batch` task."""
        size = plans_per_launch(self.spec)
        batches = list(launches(jobs, size)) if size > 1 else [[keyed] for keyed in jobs]
        calls = [(*_measuring(keyed, size), keyed[0][1]) for keyed in batches]
        for keyed, state in zip(batches, self._states(calls), strict=True):
            if not state.is_completed():
                self.failed += len(keyed)
                continue
            for measured in _records(state.result()):
                self.workers.add(measured.worker)
                yield measured

    def measure_sequences(self, sequences) -> Iterator[tuple[int, list[Measured]]]:
        """(index, records) as they come back, a sequence's records in order: here one job at
        a time, on a cluster each sequence whole (one task on one worker)."""
        if not self.on_cluster:
            size = plans_per_launch(self.spec)
            for n, keyed in enumerate(sequences):
                for group in launch_groups(keyed, size):
                    measuring, args = _measuring(group, size)
                    state = measuring(*args, self.spec, True, return_state=True)
                    if not state.is_completed():
                        self.failed += 1
                        what = f"{group[0][1].placement.method}: {state.message}"
                        raise self._stopped(keyed, what)
                    measured = _records(state.result())
                    self.workers.update(m.worker for m in measured)
                    yield n, measured
            return
        todo = [(n, keyed) for n, keyed in enumerate(sequences) if keyed]
        calls = [
            (
                measure_in_order.with_options(timeout_seconds=MEASURE_TIMEOUT_S * len(keyed)),
                (keyed,),
                keyed[0][1],
            )
            for _, keyed in todo
        ]
        stopped = None
        for (n, keyed), state in zip(todo, self._states(calls), strict=True):
            if not state.is_completed():
                self.failed += 1
                stopped = stopped or self._stopped(
                    keyed, f"its rounds ({state.message or state.name})"
                )
                continue
            measured = state.result()
            self.workers.update(m.worker for m in measured)
            yield n, measured
        if stopped:
            raise stopped

    @staticmethod
    def _stopped(keyed: list, what: str) -> DreamshardError:
        return DreamshardError(
            f"measuring {keyed[0][1].task.name} failed ({what}) after {MEASURE_RETRIES} "
            "retries; what came back is stored, and a rerun measures the rest"
        )

    def _states(self, calls: list[tuple]) -> Iterator:
        """The final state of each (task, its arguments before the spec, a job it measures)
        call, in their order: run here one after another, holding the host's Prefect slot,
        or all submitted to the cluster first."""
        if not self.on_cluster:
            for measuring, args, _ in calls:
                yield measuring(*args, self.spec, True, return_state=True)
            return
        declared = worker_resources(self._client())
        asks = [asked(self.spec, job, declared) for _, _, job in calls]  # all before any is sent
        futures = []
        for (measuring, args, _), resources in zip(calls, asks, strict=True):
            with dask.annotate(resources=resources) if resources else nullcontext():
                futures.append(measuring.submit(*args, self.spec))
        for future in futures:
            future.wait()
            yield future.state

    def measurers(self) -> set[Measurer]:
        """What the records will name: the flow's Dask workers, or this process."""
        if not self.on_cluster:
            return {measurer(self.spec)}
        return worker_measurers(self._client(), self.spec)

    @staticmethod
    def _client():
        """The Dask client of the running flow's task runner (started here if no task has
        been submitted yet)."""
        from prefect.context import FlowRunContext
        from prefect_dask import DaskTaskRunner

        context = FlowRunContext.get()
        runner = context.task_runner if context is not None else None
        if not isinstance(runner, DaskTaskRunner):
            raise DreamshardError(
                "measuring on a cluster needs the flow run on Prefect's Dask task runner: run "
                "it through flows.common.on_cluster (or python -m flows.pipeline --cluster)"
            )
        return runner.client


def task_runner(cluster: str):
    """Prefect's Dask task runner for `cluster`: an embedded LocalCluster for "local" or
    "local:N" (N workers of one thread), else the scheduler at the address, which is reached
    first so that one that is not there is a one-line error before anything runs."""
    from prefect_dask import DaskTaskRunner

    if is_local(cluster):
        options = local_cluster_options(cluster)
        return DaskTaskRunner(cluster_class="distributed.LocalCluster", cluster_kwargs=options)
    with dask_client(cluster):
        pass
    return DaskTaskRunner(address=cluster)


def on_cluster(flow, cluster: str | None):
    """`flow` with its measuring tasks on `cluster` (Prefect's Dask task runner), or as it is
    without one."""
    return flow.with_options(task_runner=task_runner(cluster)) if cluster else flow


def host_limit_name() -> str:
    return f"dreamshard-measure-{host_name()}"


def host_limit() -> str | None:
    """This host's Prefect global concurrency limit (one slot, created when missing), or None
    where flows run in Prefect's ephemeral mode.

    Ephemeral mode gives every process its own short-lived server over one database: a slot's
    lease lives in that server's memory and no service revokes expired leases there, so a
    killed flow would keep the host's slot forever. There the file lock alone keeps turns.
    """
    url = get_current_settings().api.url
    return _ensure_limit(url, host_limit_name()) if url else None


@cache
def _ensure_limit(url: str, name: str) -> str:
    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            try:  # an operator may change or disable it later; it is only ever created here
                client.create_global_concurrency_limit(
                    GlobalConcurrencyLimitCreate(name=name, limit=1)
                )
            except ObjectAlreadyExists:  # another flow created it just now
                pass
    return name


@contextmanager
def host_turn(backend: str) -> Iterator[None]:
    """This host's Prefect slot for measuring with `backend` (a name), where flows have a
    Prefect server: it shows waiting measurements in Prefect's UI. The host's file lock, which
    also keeps out CLI runs and flows of other servers or state folders, is taken where the
    measurement is made (`costs.fanout.measure_one`). Nothing is taken for a backend that times
    nothing (simulated).
    """
    name = host_limit() if occupies_host(backend) else None
    slot = concurrency(name, occupy=1, lease_duration=HOST_SLOT_LEASE_S) if name else nullcontext()
    with slot:
        yield
