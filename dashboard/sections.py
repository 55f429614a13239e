"""Page parts every page shares: the empty state, read errors, picking an evaluate run, and a
plan's explanation."""

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


def explanation(task, placement, model, seed: int = 0) -> None:
    """Why the plan puts each table where it does (`dreamshard explain`, the same numbers), in
    an expander: by `model`'s cost network, or the analytic model without one."""
    from dashboard.frames import explanation_frames
    from dreamshard.evaluation.explain import explain_plan

    with st.expander("Why each table sits where it does"):
        try:
            found = explain_plan(task, placement, model, seed)
        except DreamshardError as exc:
            st.warning(f"No explanation: {exc}")
            return
        devices, tables, candidates = explanation_frames(found)
        st.caption(
            f"Predicted by {found.judge}: {found.overall_ms:.3f} ms, the slowest forward plus "
            "the slowest all-to-all and backward. Tables largest key first (key: "
            f"{found.key}); next best: the overall with the table moved there alone."
        )
        st.dataframe(devices, hide_index=True, width="stretch")
        st.dataframe(tables, hide_index=True, width="stretch")
        if not candidates.empty:
            verdict = "is" if found.plan_is_winner else "is not"
            st.caption(
                f"The candidates the model's planner weighed (seed {seed}); the plan {verdict} "
                "the winner."
            )
            st.dataframe(candidates, hide_index=True, width="stretch")
