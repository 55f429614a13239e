"""Reading runs, metrics, artifacts and registered models from MLflow, for the dashboard's pages.

Read-only: nothing here starts, edits or tags a run, and a local sqlite store that does not exist
yet is reported as empty rather than created. Every read is cached with `st.cache_data`, keyed by
the tracking URI, for `TTL_S` seconds; the sidebar's Refresh button clears the cache.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

from dreamshard.tracking import COSTNET_MODEL, POLICY_MODEL, tracking_uri

TTL_S = 60
EXPERIMENT_PREFIX = "dreamshard-"
URI_KEY = "tracking_uri"
EMPTY_HINT = (
    "No runs yet in this MLflow store. Run `make pipeline` (it collects costs, trains and "
    "evaluates, about 10 minutes; `python -m flows.pipeline --help` lists smaller settings), "
    "then press **Refresh** in the sidebar."
)

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
for _noisy in ("mlflow", "alembic"):  # opening the sqlite store logs its set-up at INFO
    logging.getLogger(_noisy).setLevel(logging.WARNING)


def current_uri() -> str:
    """The tracking URI the sidebar chose, else $MLFLOW_TRACKING_URI, else the local store."""
    return st.session_state.get(URI_KEY) or tracking_uri()


def sqlite_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///` URI, else None."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def store_exists(uri: str) -> bool:
    path = sqlite_path(uri)
    return path is None or path.exists()


def _client(uri: str):
    from dreamshard.tracking import checked_client

    return checked_client(uri)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def runs(uri: str) -> pd.DataFrame:
    """One row per run of every `dreamshard-*` experiment, newest first."""
    columns = [
        "run_id",
        "experiment",
        "experiment_id",
        "run_name",
        "flow",
        "suite",
        "status",
        "start",
        "duration_s",
        "parent_run_id",
        "params",
        "metrics",
        "tags",
    ]
    if not store_exists(uri):
        return pd.DataFrame(columns=columns)
    client = _client(uri)
    experiments = {
        e.experiment_id: e.name
        for e in client.search_experiments()
        if e.name.startswith(EXPERIMENT_PREFIX)
    }
    if not experiments:
        return pd.DataFrame(columns=columns)
    rows = []
    for run in client.search_runs(
        list(experiments), max_results=5000, order_by=["attributes.start_time DESC"]
    ):
        info, tags = run.info, run.data.tags
        end = info.end_time or info.start_time
        rows.append(
            {
                "run_id": info.run_id,
                "experiment": experiments[info.experiment_id],
                "experiment_id": info.experiment_id,
                "run_name": info.run_name,
                "flow": tags.get("flow", ""),
                "suite": tags.get(
                    "suite", experiments[info.experiment_id][len(EXPERIMENT_PREFIX) :]
                ),
                "status": info.status,
                "start": pd.Timestamp(info.start_time, unit="ms"),
                "duration_s": (end - info.start_time) / 1000 if info.end_time else None,
                "parent_run_id": tags.get("mlflow.parentRunId", ""),
                "params": dict(run.data.params),
                "metrics": dict(run.data.metrics),
                "tags": dict(tags),
            }
        )
    return pd.DataFrame(rows, columns=columns)


def flow_runs(uri: str, flow: str, finished: bool = True) -> pd.DataFrame:
    frame = runs(uri)
    frame = frame[frame["flow"] == flow]
    if finished:
        frame = frame[frame["status"] == "FINISHED"]
    return frame.reset_index(drop=True)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def metric_history(uri: str, run_id: str, key: str) -> pd.DataFrame:
    """step, value of one metric of one run, in step order."""
    history = _client(uri).get_metric_history(run_id, key)
    frame = pd.DataFrame([(m.step, m.value) for m in history], columns=["step", "value"])
    return frame.sort_values("step", kind="stable").reset_index(drop=True)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def artifact_paths(uri: str, run_id: str) -> list[str]:
    """The paths of a run's top-level artifacts (folders end with /)."""
    found = _client(uri).list_artifacts(run_id)
    return [f.path + ("/" if f.is_dir else "") for f in found]


@st.cache_data(ttl=TTL_S, show_spinner=False)
def artifact_text(uri: str, run_id: str, path: str) -> str | None:
    """A run's text artifact, or None when the run has no such artifact."""
    from mlflow.exceptions import MlflowException

    with tempfile.TemporaryDirectory(prefix="dashboard-") as folder:
        try:
            local = _client(uri).download_artifacts(run_id, path, folder)
        except (MlflowException, OSError):
            return None
        return Path(local).read_text()


def artifact_json(uri: str, run_id: str, path: str) -> dict | None:
    text = artifact_text(uri, run_id, path)
    return json.loads(text) if text else None


@st.cache_data(ttl=TTL_S, show_spinner=False)
def model_versions(uri: str) -> pd.DataFrame:
    """Registered versions of the policy and cost-net models: name, version, aliases, tags."""
    columns = ["name", "version", "aliases", "suite", "backend", "run_id", "created"]
    if not store_exists(uri):
        return pd.DataFrame(columns=columns)
    client = _client(uri)
    rows = []
    # search_model_versions leaves aliases out; the registered model has them
    aliases = {m.name: m.aliases for m in client.search_registered_models()}
    for name in (POLICY_MODEL, COSTNET_MODEL):
        for v in client.search_model_versions(f"name='{name}'"):
            named = [
                a for a, version in aliases.get(name, {}).items() if str(version) == str(v.version)
            ]
            rows.append(
                {
                    "name": name,
                    "version": str(v.version),
                    "aliases": ", ".join(sorted(named)),
                    "suite": v.tags.get("suite", ""),
                    "backend": v.tags.get("backend", ""),
                    "run_id": v.tags.get("run_id", v.run_id or ""),
                    "created": pd.Timestamp(v.creation_timestamp, unit="ms"),
                }
            )
    frame = pd.DataFrame(rows, columns=columns)
    if frame.empty:
        return frame
    frame["order"] = frame["version"].astype(int)
    return frame.sort_values(["name", "order"], ascending=[True, False]).drop(columns="order")


def evaluations(uri: str) -> list[dict]:
    """Finished evaluate runs with their `evaluation.json`, newest first.

    Each: run_id, suite, start, candidate_version, trained_on (the candidate's training suite),
    evaluation (the artifact).
    """
    versions = model_versions(uri)
    trained_on = dict(
        zip(
            versions.loc[versions["name"] == POLICY_MODEL, "version"],
            versions.loc[versions["name"] == POLICY_MODEL, "suite"],
        )
    )
    found = []
    for row in flow_runs(uri, "evaluate").itertuples():
        evaluation = artifact_json(uri, row.run_id, "evaluation.json")
        if not evaluation:
            continue
        candidate = str(row.params.get("candidate_version", ""))
        found.append(
            {
                "run_id": row.run_id,
                "suite": row.suite,
                "start": row.start,
                "candidate_version": candidate,
                "trained_on": trained_on.get(candidate, "") or row.suite,
                "evaluation": evaluation,
            }
        )
    return found


def evaluation_label(item: dict) -> str:
    """How a page names an evaluate run in a select box."""
    zero_shot = item["trained_on"] != item["suite"]
    trained = f", trained on {item['trained_on']} (zero-shot)" if zero_shot else ""
    return (
        f"{item['suite']} · {item['start']:%Y-%m-%d %H:%M} · model v{item['candidate_version']}"
        f"{trained} · {item['evaluation'].get('backend', '?')} costs · {item['run_id'][:8]}"
    )


def clear() -> None:
    st.cache_data.clear()
