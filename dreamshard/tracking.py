"""MLflow: where runs go, one experiment per suite, and the model registry placement loads from.

The library's only MLflow module. By default tracking and the registry live in sqlite under the
state folder (`.dreamshard/mlflow.db`, artifacts in `.dreamshard/mlartifacts/`); set
`MLFLOW_TRACKING_URI` (or pass a URI) to use a team's server. A model is registered as an MLflow
pyfunc model wrapping our model file: `mlflow.pyfunc.load_model(...)` places tables for anyone,
and `load_registered_model` gives our own classes back.

MLflow creates and migrates a fresh sqlite store on the first call that opens it; two processes
doing that at once (two main jobs on a fresh state folder) break the migration. So the first
call each process makes to a local sqlite store holds a lock file beside the database
(`mlflow.db.lock`) while it opens the store.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")

import mlflow  # noqa: E402
import mlflow.pyfunc  # noqa: E402
import pandas as pd  # noqa: E402
from filelock import FileLock, Timeout  # noqa: E402
from mlflow import MlflowClient  # noqa: E402
from mlflow.exceptions import MlflowException  # noqa: E402

from dreamshard.costs.dataset import hardware, versions  # noqa: E402
from dreamshard.costs.hardware import load_hardware
from dreamshard.errors import DreamshardError  # noqa: E402
from dreamshard.files import validate  # noqa: E402
from dreamshard.learn.model_file import DreamShardModel, load_model  # noqa: E402
from dreamshard.placement.constraints import Constraints, ConstraintsFile  # noqa: E402
from dreamshard.placement.planner import PlanOptions  # noqa: E402
from dreamshard.placement.registry import place  # noqa: E402
from dreamshard.placement.tasks import Placement, PlacementTask, placement_task  # noqa: E402
from dreamshard.state import state_dir  # noqa: E402
from dreamshard.tables.sources import BIN_COLUMNS, table_from_record  # noqa: E402
from dreamshard.tables.table import Table  # noqa: E402

POLICY_MODEL = "dreamshard-policy"
COSTNET_MODEL = "dreamshard-costnet"
CHAMPION, CANDIDATE = "champion", "candidate"
SETUP_TIMEOUT_S = 300  # waiting for another process to create or migrate the same sqlite store


def default_tracking_uri() -> str:
    return f"sqlite:///{state_dir() / 'mlflow.db'}"


def tracking_uri(uri: str | None = None) -> str:
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()


def is_local(uri: str) -> bool:
    return uri.startswith(("sqlite:", "file:")) or "://" not in uri


def sqlite_file(uri: str) -> Path | None:
    """The database file of a `sqlite:///` URI, else None (a server, a file store, in memory)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri.removeprefix("sqlite:///").split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


_set_up: set[str] = set()  # sqlite URIs this process has opened (MLflow keeps their stores)


@contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Hold `<database>.lock` while this process opens the sqlite store of `uri` the first time.

    MLflow creates and migrates a fresh store when it first opens it; two processes doing that at
    once fail ("Online migration expected to match one row", "duplicate column name"). A server
    URI, or a store this process has opened already, takes no lock. In a folder we cannot write,
    nothing can be created either, so the store is opened without one.
    """
    path = sqlite_file(uri)
    if path is None or uri in _set_up:
        yield
        return
    lock = FileLock(path.with_name(path.name + ".lock"), timeout=SETUP_TIMEOUT_S)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # as MLflow would, to hold the lock there
        lock.acquire()
    except Timeout:
        raise DreamshardError(
            f"MLflow store {path}: another process has been setting it up for over "
            f"{SETUP_TIMEOUT_S} s (lock {lock.lock_file})"
        ) from None
    except OSError:  # a read-only folder: no lock file, and no store can be created there
        lock = None
    try:
        yield
        _set_up.add(uri)
    finally:
        if lock is not None:
            lock.release()


def checked_client(uri: str) -> MlflowClient:
    """A client of `uri` that has answered once (no global MLflow setting is changed).

    A local sqlite store is opened (created and migrated when new) under `store_lock`, tracking
    and registry both, so processes starting on a fresh state folder at once all get a store.
    """
    try:
        with store_lock(uri):
            client = MlflowClient(uri, uri)  # opens the tracking store (creates a fresh one)
            client.search_experiments(max_results=1)
            if sqlite_file(uri) is not None:  # the registry's store opens the same database
                client.search_registered_models(max_results=1)
    except DreamshardError:
        raise
    except Exception as exc:  # noqa: BLE001  (network, auth and schema errors all mean "can't use it")
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise DreamshardError(f"MLflow tracking URI {uri} cannot be used: {first}") from None
    return client


def connect(uri: str | None = None) -> MlflowClient:
    """Point MLflow at `uri` (default: the local sqlite store) and check that it answers."""
    uri = tracking_uri(uri)
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    return checked_client(uri)


def experiment_name(suite: str) -> str:
    return f"dreamshard-{suite}"


def use_experiment(suite: str) -> str:
    """The suite's experiment (created on first use), made the active one; returns its id."""
    name = experiment_name(suite)
    found = mlflow.get_experiment_by_name(name)
    if found is None:
        location = None
        if is_local(mlflow.get_tracking_uri()):  # keep artifacts in the state folder, not ./mlruns
            location = (state_dir() / "mlartifacts" / name).as_uri()
        try:
            experiment_id = mlflow.create_experiment(name, artifact_location=location)
        except MlflowException as exc:  # another job created it since we looked: use theirs
            found = mlflow.get_experiment_by_name(name)
            if exc.error_code != "RESOURCE_ALREADY_EXISTS" or found is None:
                raise
            experiment_id = found.experiment_id
    else:
        experiment_id = found.experiment_id
    mlflow.set_experiment(experiment_id=experiment_id)
    return experiment_id


def run_tags() -> dict[str, str]:
    """Hardware and library versions, for every run."""
    tags = {"hardware": hardware()}
    tags.update({f"version.{k}": v for k, v in versions().items()})
    return tags


# --- the registered model flavour -------------------------------------------------------------

TABLE_COLUMNS = ("name", "rows", "dim", "pooling_factor")  # then, optional, bin_0..bin_16


def tables_from_frame(frame: pd.DataFrame) -> tuple[Table, ...]:
    """Tables from a model input frame: name, rows, dim, pooling_factor and, optional, the
    access histogram's 17 columns bin_0..bin_16 (all or none; none: the default histogram),
    each row checked as a table file's record is."""
    missing = [c for c in TABLE_COLUMNS if c not in frame.columns]
    if missing:
        raise DreamshardError(f"model input lacks column(s) {', '.join(missing)}")
    columns = [c for c in (*TABLE_COLUMNS, *BIN_COLUMNS) if c in frame.columns]
    records = frame[columns].astype(object).where(frame[columns].notna(), None)
    return tuple(
        table_from_record(record, f"model input row {i}")
        for i, record in enumerate(records.to_dict("records"))
    )


def plan_options(model, params: dict) -> tuple[PlanOptions, Constraints | None]:
    """The params as `PlanOptions` (and the constraints), as `place` takes them: a time budget
    of 0 and empty constraints or topology mean the planner's own; a hardware file's name (""
    for cpu) is planned for as `place --hardware` plans for it."""
    constraints = None
    if params["constraints"]:
        try:
            data = json.loads(params["constraints"])
        except ValueError as exc:
            raise DreamshardError(f"params constraints: not JSON ({exc})") from None
        constraints = validate(ConstraintsFile, data, "params constraints").constraints()
    hardware = load_hardware(str(params["hardware"]) or "cpu")  # DreamshardError: one line
    topology = str(params["topology"]) or (hardware.topology_name() if hardware.is_gpu else None)
    options = PlanOptions(
        int(params["seed"]),
        model,
        int(params["samples"]),
        str(params["split"]),
        float(params["time_budget"]) or None,
        constraints,
        topology=topology,
        hardware=hardware,
    )
    return options, constraints


def placement_frame(task: PlacementTask, placement: Placement) -> pd.DataFrame:
    """One row per shard: its table (`name`), the shard (`shard`: the table's own name when
    whole, else `name[c0:c1]`, `name[r0:r1]` or `name[dp r]`), how it is cut (`kind`: "whole",
    "column", "row", "table_row" or "replica") and its `device`."""
    shards = placement_task(task, placement).tables
    return pd.DataFrame(
        {
            "name": [s.shard.of if s.shard else s.name for s in shards],
            "shard": [s.name for s in shards],
            "kind": [s.shard.kind if s.shard else "whole" for s in shards],
            "device": [int(d) for d in placement.devices],
        }
    )


class PlacementModel(mlflow.pyfunc.PythonModel):
    """pyfunc wrapper of a dreamshard model file.

    kind "policy": input one row per table (name, rows, dim, pooling_factor; bin_0..bin_16
    optional), params (`DEFAULT_PARAMS`) num_devices, memory_cap_bytes, precision, optimizer,
    samples, seed, split ("auto" or "none"), time_budget (seconds; 0: the planner's default),
    constraints (a constraints file's JSON; "": none), topology ("": the hardware file's links
    for a GPU file, else the model's own) and hardware (a shipped hardware file's name, as
    `place --hardware`; "": cpu). It
    plans through the registry's `dreamshard` planner, as `dreamshard place --method dreamshard
    --model` and `DreamShardPlanner` do, so its splits, time budget and constraints are theirs:
    the same task and seed give the same plan. Output: one row per shard (`placement_frame`).
    kind "costnet": the tables with a `device` column (whole tables); output the predicted
    per-device costs (ms) and, in every row, the overall cost.
    """

    def __init__(self, kind: str = "policy"):
        self.kind = kind
        self.model: DreamShardModel | None = None

    def load_context(self, context) -> None:
        self.model = load_model(context.artifacts["model"])

    def predict(self, context, model_input: pd.DataFrame, params: dict | None = None):
        params = {**DEFAULT_PARAMS, **(params or {})}
        options, constraints = plan_options(self.model, params)
        task = PlacementTask(
            tables_from_frame(model_input),
            int(params["num_devices"]),
            int(params["memory_cap_bytes"]),
            str(params["precision"]),
            optimizer=str(params["optimizer"]),
            constraints=constraints,
        )
        if self.kind == "policy":
            return placement_frame(task, place(task, "dreamshard", options=options))
        placement = Placement(tuple(int(d) for d in model_input["device"]), "given")
        devices, overall = self.model.costnet.predict_ms(task, placement)
        frame = pd.DataFrame(devices, columns=["fwd_comp", "bwd_comm", "bwd_comp"])
        frame.insert(0, "device", range(len(frame)))
        frame["overall"] = overall
        return frame


DEFAULT_PARAMS = {
    "num_devices": 4,
    "memory_cap_bytes": 2**30,
    "precision": "fp16",
    "optimizer": "sgd",
    "samples": 8,
    "seed": 0,
    "split": "auto",
    "time_budget": 0.0,
    "constraints": "",
    "topology": "",
    "hardware": "",
}


def _example(kind: str) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "name": ["t0", "t1"],
            "rows": [100000, 5000],
            "dim": [64, 16],
            "pooling_factor": [12.0, 1.0],
        }
    )
    for j, column in enumerate(BIN_COLUMNS):  # half once, half twice: a valid histogram
        frame[column] = [0.5 if j < 2 else 0.0] * 2
    if kind == "costnet":
        frame["device"] = [0, 1]
    return frame


def model_signature(kind: str, wrapper: PlacementModel):
    """The signature: the example's columns, the histogram's optional, and the params."""
    from mlflow.models import infer_signature
    from mlflow.models.signature import ModelSignature
    from mlflow.types.schema import ColSpec, Schema

    example = _example(kind)
    inferred = infer_signature(example, wrapper.predict(None, example), params=DEFAULT_PARAMS)
    inputs = Schema(
        [
            ColSpec(spec.type, spec.name, required=spec.name not in BIN_COLUMNS)
            for spec in inferred.inputs.inputs
        ]
    )
    return ModelSignature(inputs, inferred.outputs, inferred.params), example


def log_registered_model(model_path: str | Path, name: str, kind: str, tags: dict) -> str:
    """Log the model file under the active run, register it as `name`; returns the version."""
    wrapper = PlacementModel(kind)
    wrapper.model = load_model(model_path)
    signature, example = model_signature(kind, wrapper)
    requirements = [f"{p}=={version(p)}" for p in ("torch", "numpy", "pandas", "mlflow")]
    info = mlflow.pyfunc.log_model(
        name=kind,
        python_model=wrapper,
        artifacts={"model": str(model_path)},
        pip_requirements=requirements,
        signature=signature,
        input_example=(example, DEFAULT_PARAMS),
        registered_model_name=name,
    )
    model_version = str(info.registered_model_version)
    tag_version(name, model_version, tags)
    return model_version


def tag_version(name: str, model_version: str, tags: dict) -> None:
    client = MlflowClient()
    for key, value in tags.items():
        client.set_model_version_tag(name, model_version, key, str(value))


def alias_version(name: str, alias: str) -> str | None:
    """The version `name@alias` points at, or None."""
    try:
        return str(MlflowClient().get_model_version_by_alias(name, alias).version)
    except MlflowException:
        return None


def set_alias(name: str, alias: str, model_version: str, tries: int = 3) -> None:
    """Point `name@alias` at `model_version`.

    MLflow looks the alias up, then inserts or updates it; two jobs setting the same new alias at
    once can both insert, and one fails on the unique key. It tries again (then it updates).
    """
    client = MlflowClient()
    for attempt in range(tries):
        try:
            client.set_registered_model_alias(name, alias, model_version)
            return
        except MlflowException as exc:
            if "IntegrityError" not in str(exc) or attempt == tries - 1:
                raise
            time.sleep(0.2 * (attempt + 1))


def load_registered_model(uri: str, tracking: str | None = None) -> DreamShardModel:
    """Our model classes from `models:/name@alias`, `models:/name/3` or `runs:/id/policy`."""
    for noisy in ("mlflow", "alembic"):  # placing tables should print the plan, not DB set-up
        logging.getLogger(noisy).setLevel(logging.WARNING)
    connect(tracking)
    try:
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri))
    except MlflowException as exc:
        first = exc.message.strip().splitlines()[0][:200]
        raise DreamshardError(
            f"{uri}: no such registered model, version or alias ({first})"
        ) from None
    found = sorted(local.rglob("*.pt"))
    if not found:
        raise DreamshardError(f"{uri} holds no model file: is it a dreamshard model?")
    return load_model(found[0])
