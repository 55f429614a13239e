"""Page parts every page shares: the empty state, read errors, and picking an evaluate run."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import store
from dreamshard.errors import DreamshardError


def runs_or_stop(uri: str) -> pd.DataFrame:
    """All runs; on an empty store the empty-state message, on a read error the error; then
    the page stops (no traceback either way)."""
    try:
        frame = store.runs(uri)
    except DreamshardError as exc:
        st.error(
            f"{exc}. Set another tracking URI in the sidebar, or unset MLFLOW_TRACKING_URI "
            "to use the local store."
        )
        st.stop()
    if frame.empty:
        st.info(store.EMPTY_HINT)
        st.stop()
    return frame


def evaluations_or_stop(uri: str) -> list[dict]:
    runs_or_stop(uri)
    found = store.evaluations(uri)
    if not found:
        st.info(
            "No finished evaluate run yet (it is the pipeline's last step). " + store.EMPTY_HINT
        )
        st.stop()
    return found


def pick_evaluation(found: list[dict], key: str) -> dict:
    """A select box of evaluate runs, newest first; `?run=<id>` in the URL preselects one."""
    ids = [item["run_id"] for item in found]
    wanted = st.query_params.get("run")
    index = ids.index(wanted) if wanted in ids else 0
    labels = {item["run_id"]: store.evaluation_label(item) for item in found}
    chosen = st.selectbox(
        "Evaluation run", ids, index=index, format_func=labels.__getitem__, key=key
    )
    return found[ids.index(chosen)]
