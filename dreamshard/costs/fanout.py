"""Measuring many placements: in this process, or fanned out over a Dask cluster.

`measure_many` is the one way placements get measured in bulk. Where each job runs, a backend
made there from a `BackendSpec` measures it under the host's measurement lock
(`costs/host_lock.py`: two workers on one host take turns, as two collectors do) and returns a
`Measured` record stamped with that machine's hardware and the wall-clock span of the
measurement. Nothing is written where a job runs: the caller alone appends to the cost dataset
(`costs.collect.collect`), so no SQLite file crosses the network and a job that a dying worker
leaves behind is simply run again elsewhere (Dask's scheduler does that) with nothing stored
twice.

The cluster is Dask `distributed`: an embedded `LocalCluster` ("local", one worker with one
thread unless asked: measurements never overlap on this host) or a running scheduler's address
(`tcp://HOST:8786`; `DREAMSHARD_DASK_ADDRESS` when no address is given). `distributed` is
imported only when a cluster is asked for.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache

from dreamshard.costs.backends import make_backend
from dreamshard.costs.dataset import hardware
from dreamshard.costs.host_lock import measurement_lock, occupies_host
from dreamshard.costs.types import CostBackend, PlacementCost
from dreamshard.errors import DreamshardError

ADDRESS_ENV = "DREAMSHARD_DASK_ADDRESS"
LOCAL = "local"  # an embedded LocalCluster; "local:N" for N workers
CONNECT_TIMEOUT_S = 10  # how long to wait for a scheduler; $DREAMSHARD_DASK_CONNECT_S to change
CONNECT_ENV = "DREAMSHARD_DASK_CONNECT_S"
# Dask worker resources a measurement occupies (`dask worker --resources "GPU=8,host=1"`;
# dask-cuda-worker declares none by itself: pass --resources there too)
GPU = "GPU"  # one per device of a placement run under torchrun or DMP
HOST = "host"  # a whole host, for an in-process fbgemm job that times its devices in turn


@dataclass(frozen=True)
class BackendSpec:
    """How to make a backend where a job runs (`make_backend`'s arguments): each worker makes
    and keeps its own, so a warmed-up backend is never shipped."""

    name: str
    iterations: int | None = None
    launcher: str = "inprocess"
    topology: str = "auto"
    rounds: int | None = None  # the dmp backend's interleaved rounds a launch (None: its own)
    hardware: str | None = None  # a hardware file's name or path (None: the backend's own)
    # seconds each job waits, holding the lock, before it is measured: a stand-in for a slow
    # measurement (the fan-out benchmark's and tests' fixed-time jobs); 0 for real work
    delay_s: float = 0.0
    # fbgemm: time the reference group inside each measurement (costs/reference.py), which
    # makes labels of different runs comparable; an evaluation, whose rounds are compared
    # within the run, pairs without it (a quarter less time a measurement here)
    reference: bool = True

    def make(self) -> CostBackend:
        """This process's backend for these settings (made once, then kept)."""
        return _backend(self)

    def build(self) -> CostBackend:
        """A new backend with these settings."""
        return make_backend(
            self.name,
            self.iterations,
            self.launcher,
            self.topology,
            self.rounds,
            self.hardware,
            self.reference,
        )

    def resources(self, job) -> dict[str, int]:
        """What one job occupies where it runs: a GPU per device of a placement run under
        torchrun or DMP (a process per device), the whole host for in-process fbgemm, nothing
        for a backend that times nothing (simulated)."""
        if self.name == "dmp" or self.launcher == "torchrun":
            return {GPU: job.task.num_devices}
        return {HOST: 1} if occupies_host(self.name) else {}


@cache
def _backend(spec: BackendSpec) -> CostBackend:  # one per worker process and settings
    return spec.build()


@dataclass(frozen=True)
class Measured:
    """One job's outcome where it ran: its cost, or the one-line error that stopped it."""

    key: str
    job: object  # costs.collect.Job
    cost: PlacementCost | None
    error: str
    config: dict  # the backend's settings, as the dataset stores them
    hardware: str  # of the machine that measured
    worker: str  # host name and process id
    started: float  # wall clock (time.time) around the measurement, under the lock
    finished: float

    def told(self) -> str:
        """The one progress line of what came back: the placement, its cost or error, where."""
        job, cost = self.job, self.cost
        outcome = f"error: {self.error}" if cost is None else f"{cost.overall:.2f} ms"
        return f"{job.task.name} {job.placement.method}: {outcome} ({self.worker})"


@dataclass(frozen=True)
class Fanout:
    """Where `costs.collect.collect` sends its jobs: a Dask client, and the backend each worker
    makes for them. Anything with the same `measure` serves (the flows' Prefect task runner:
    `flows/common.TaskFanout`)."""

    client: object  # distributed.Client
    spec: BackendSpec

    def measure(self, jobs: Iterable[tuple[str, object]]) -> Iterator[Measured]:
        return measure_many(jobs, self.spec, self.client)

    def measure_sequences(self, sequences) -> Iterator[tuple[int, list[Measured]]]:
        return measure_sequences(sequences, self.spec, self.client)

    def measurers(self) -> set[Measurer]:
        """What the cluster's workers' records will name (`Measurer`), now."""
        return worker_measurers(self.client, self.spec)


# what a record's key names of where it was measured: (the machine's hardware, the backend's
# settings there as sorted JSON; a GPU worker's differ from a CPU coordinator's)
Measurer = tuple[str, str]


def measurer(spec: BackendSpec) -> Measurer:
    """This process as a measurer with the backend `spec` makes here."""
    return hardware(), json.dumps(spec.make().config(), sort_keys=True)


def worker_measurers(client, spec: BackendSpec) -> set[Measurer]:
    """Every worker of the Dask `client`'s cluster as a measurer."""
    return set(client.run(measurer, spec).values())


def measuring_setups(fanout, backend: CostBackend) -> list[tuple[str, dict]]:
    """(machine, backend settings) of each kind of measurer that measures with `fanout` (its
    workers') or, without one, of this process with `backend`; a cluster with no worker yet
    names none, so nothing counts as stored."""
    if fanout is None:
        return [(hardware(), backend.config())]
    return [(machine, json.loads(config)) for machine, config in sorted(fanout.measurers())]


def measure_one(key: str, job, spec: BackendSpec) -> Measured:
    """Measure one job here, under this host's measurement lock; never writes anything."""
    backend = spec.make()
    with measurement_lock(backend):
        started = time.time()
        time.sleep(spec.delay_s)
        try:
            cost, error = backend.measure(job.task, job.placement), ""
        except DreamshardError as exc:
            cost, error = None, str(exc)
        finished = time.time()
    worker = f"{socket.gethostname()}:{os.getpid()}"
    return Measured(key, job, cost, error, backend.config(), hardware(), worker, started, finished)


def measure_launch(keyed: Sequence[tuple[str, object]], spec: BackendSpec) -> list[Measured]:
    """One task's placements measured here in one launch (the backend's `measure_batch`),
    under this host's lock; never writes anything. A failed launch gives each its error."""
    backend = spec.make()
    task = keyed[0][1].task
    with measurement_lock(backend):
        started = time.time()
        try:
            costs, error = backend.measure_batch(task, [job.placement for _, job in keyed]), ""
        except DreamshardError as exc:
            costs, error = [None] * len(keyed), str(exc)
        finished = time.time()
    worker = f"{socket.gethostname()}:{os.getpid()}"
    config, machine = backend.config(), hardware()
    return [
        Measured(key, job, cost, error, config, machine, worker, started, finished)
        for (key, job), cost in zip(keyed, costs, strict=True)
    ]


def plans_per_launch(spec: BackendSpec) -> int:
    """How many placements of one task the backend measures in one launch (1: one at a time)."""
    return getattr(spec.make(), "plans_per_launch", 1)


def launches(keyed: Iterable[tuple[str, object]], size: int) -> Iterator[list[tuple[str, object]]]:
    """The (key, job) pairs grouped by task (in the order tasks first come), in launches of at
    most `size` placements of one task each."""
    by_task: dict[tuple[str, int], list[tuple[str, object]]] = {}
    for key, job in keyed:
        by_task.setdefault((job.task.name, job.task.num_devices), []).append((key, job))
    for jobs in by_task.values():
        for start in range(0, len(jobs), size):
            yield jobs[start : start + size]


def measure_many(jobs: Iterable[tuple[str, object]], spec: BackendSpec, client=None) -> Iterator:
    """Each (key, job) measured, in this process one after another (`client` None), or on the
    cluster `client` is connected to (each job anywhere), yielded as they finish."""
    for _, (measured,) in measure_sequences([[job] for job in jobs], spec, client):
        yield measured


def measure_sequence(keyed: Sequence[tuple[str, object]], spec: BackendSpec) -> list[Measured]:
    """The jobs measured here one after another, in their order (each under the host's lock);
    where the backend measures many placements in one launch, each run of one task's jobs of
    one round is one launch (`launch_groups`)."""
    size = plans_per_launch(spec)
    if size > 1:
        return [m for group in launch_groups(keyed, size) for m in measure_launch(group, spec)]
    return [measure_one(key, job, spec) for key, job in keyed]


def launch_groups(
    keyed: Sequence[tuple[str, object]], size: int
) -> Iterator[list[tuple[str, object]]]:
    """A sequence of (key, job) cut, in its order, into runs of at most `size` jobs of one
    task and one round (an evaluation task's round: one launch)."""
    group: list[tuple[str, object]] = []
    for key, job in keyed:
        if group and (len(group) == size or not _same_launch(group[0][1], job)):
            yield group
            group = []
        group.append((key, job))
    if group:
        yield group


def _same_launch(first, job) -> bool:
    return (first.task.name, first.task.num_devices, first.round) == (
        job.task.name,
        job.task.num_devices,
        job.round,
    )


def measure_sequences(
    sequences: Sequence[Sequence[tuple[str, object]]], spec: BackendSpec, client=None
) -> Iterator[tuple[int, list[Measured]]]:
    """Each sequence of (key, job) measured in its order on one worker (an evaluation's task:
    its interleaved rounds stay paired), yielded as (its index, its records) when it finishes;
    in this process one after another when `client` is None. Empty sequences are skipped."""
    todo = [(n, keyed) for n, keyed in enumerate(sequences) if keyed]
    if client is None:
        for n, keyed in todo:
            yield n, measure_sequence(keyed, spec)
        return
    declared = worker_resources(client)
    asks = [asked(spec, keyed[0][1], declared) for _, keyed in todo]
    calls = [
        client.submit(measure_sequence, keyed, spec, pure=False, resources=resources)
        for (_, keyed), resources in zip(todo, asks, strict=True)
    ]
    for position, measured in _completed(calls):
        yield todo[position][0], measured


def _completed(futures: list) -> Iterator[tuple[int, object]]:
    """(position, result) of each Dask future as it finishes; every future is released at the
    end, however the caller stops."""
    from distributed import KilledWorker, as_completed

    position = {future.key: n for n, future in enumerate(futures)}
    try:
        for future in as_completed(futures):
            try:
                yield position[future.key], future.result()
            except KilledWorker as exc:  # the job took down every worker it was given
                raise DreamshardError(
                    f"a measurement killed the Dask workers it ran on ({exc}); what came back "
                    "before it is stored, and a rerun measures the rest"
                ) from None
    finally:
        for future in futures:
            future.release()


def worker_resources(client) -> dict[str, float]:
    """The most of each resource that any one of the cluster's workers declares."""
    most: dict[str, float] = {}
    for info in client.scheduler_info(n_workers=-1)["workers"].values():
        for name, amount in (info.get("resources") or {}).items():
            most[name] = max(most.get(name, 0), amount)
    return most


def asked(spec: BackendSpec, job, declared: dict[str, float]) -> dict[str, int] | None:
    """The resources a job asks the scheduler for: those of `spec.resources` that some worker
    declares (on a cluster that counts none, the host lock alone keeps turns). A job that needs
    more than any worker has is an error here, not a job that waits forever."""
    wanted = {name: n for name, n in spec.resources(job).items() if name in declared}
    for name, amount in wanted.items():
        if amount > declared[name]:
            raise DreamshardError(
                f"{job.task.name} needs {name}={amount} on one worker and the most any worker "
                f"declares is {declared[name]:g}; start workers with --resources "
                f"{name}={amount}, or plan for fewer devices"
            )
    return wanted or None


def cluster_address(given: str | None) -> str | None:
    """The cluster a command measures on: `given`, else $DREAMSHARD_DASK_ADDRESS, else None
    (this process)."""
    return given or os.environ.get(ADDRESS_ENV) or None


@contextmanager
def dask_client(address: str) -> Iterator:
    """A Dask client: of an embedded LocalCluster for "local" or "local:N" (N workers of one
    thread each, in their own processes), else of the scheduler at `address`. A scheduler that
    cannot be reached is a DreamshardError naming it."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:  # pragma: no cover - a core dependency
        raise DreamshardError(
            "measuring on a Dask cluster needs `distributed`; pip install distributed"
        ) from None
    if is_local(address):
        cluster = LocalCluster(**local_cluster_options(address))
        try:
            with Client(cluster) as client:
                yield client
        finally:
            cluster.close()
        return
    try:
        client = Client(address, timeout=connect_seconds())
    except (OSError, TimeoutError, ValueError) as exc:
        raise DreamshardError(
            f"cannot reach the Dask scheduler at {address} ({type(exc).__name__}); start one "
            f"(`dask scheduler`) or pass another --cluster (or {ADDRESS_ENV})"
        ) from None
    with client:
        yield client


@contextmanager
def fanout_for(cluster: str, spec: BackendSpec) -> Iterator[Fanout | None]:
    """The fan-out a command measures with: over `cluster` (else $DREAMSHARD_DASK_ADDRESS),
    connected for the block, or None (this process) when neither names one."""
    address = cluster_address(cluster)
    if not address:
        yield None
        return
    with dask_client(address) as client:
        yield Fanout(client, spec)


def connect_seconds() -> float:
    """How long to wait for a scheduler to answer: $DREAMSHARD_DASK_CONNECT_S, else 10 s."""
    given = os.environ.get(CONNECT_ENV) or str(CONNECT_TIMEOUT_S)
    try:
        seconds = float(given)
    except ValueError:
        seconds = 0.0
    if seconds <= 0:
        raise DreamshardError(f"{CONNECT_ENV}={given}: say how many seconds, above 0")
    return seconds


def is_local(address: str) -> bool:
    """Whether `address` asks for an embedded cluster ("local" or "local:N")."""
    return address == LOCAL or address.startswith(f"{LOCAL}:")


def local_cluster_options(address: str) -> dict:
    """LocalCluster's settings for "local" or "local:N": N worker processes (default 1) of one
    thread each, on 127.0.0.1, no dashboard."""
    count = address.partition(":")[2] or "1"
    if not count.isdigit() or int(count) < 1:
        raise DreamshardError(f"--cluster {address}: say local or local:N with N >= 1 workers")
    return dict(
        n_workers=int(count),
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        host="127.0.0.1",
        resources={HOST: 1},
    )
