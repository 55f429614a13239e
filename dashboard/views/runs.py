"""Runs: every experiment's runs with their key numbers; open one for its details."""

import pandas as pd
import streamlit as st

from dashboard import sections, store

FLOWS = ("pipeline", "collect-costs", "train-cost-model", "train-policy", "evaluate")


def key_numbers(row) -> str:
    """The one or two numbers that say how a run went, by flow."""
    m, tags = row.metrics, row.tags
    if row.flow == "collect-costs" and "placements_measured" in m:
        return f"{m['placements_measured']:.0f} placements measured"
    if row.flow == "train-cost-model" and "heldout_overall_mape" in m:
        return (
            f"held-out overall MAPE {100 * m['heldout_overall_mape']:.1f}% "
            f"on {m.get('dataset_size', 0):.0f} measurements"
        )
    if row.flow == "train-policy" and "registered_version" in tags:
        return f"registered model v{tags['registered_version']}"
    ratio = m.get("candidate.vs_per_task_best_heuristic", m.get("candidate.vs_best_heuristic"))
    if row.flow == "evaluate" and ratio is not None:
        return (
            f"candidate {ratio:.3f}× the per-task best heuristic "
            f"({row.params.get('backend', '?')} costs); now {tags.get('alias', '?')}"
        )
    return ""


def run_label(row) -> str:
    started = f"{row.start:%Y-%m-%d %H:%M:%S}"
    return f"{row.suite} · {row.flow or row.run_name} · {started} · {row.run_id[:8]}"


def show_run(uri: str, row) -> None:
    st.subheader(f"{row.flow or row.run_name} on {row.suite}")
    st.caption(
        f"run {row.run_id} · experiment {row.experiment} · {row.status} · started "
        f"{row.start:%Y-%m-%d %H:%M:%S}"
        + (f" · child of {row.parent_run_id[:8]}" if row.parent_run_id else "")
    )
    if row.flow == "evaluate":
        st.page_link(
            "views/placement.py",
            label="See its placements",
            icon=":material/grid_view:",
            query_params={"run": row.run_id},
        )
    if uri.startswith(("http://", "https://")):
        st.link_button(
            "Open in the MLflow UI",
            f"{uri.rstrip('/')}/#/experiments/{row.experiment_id}/runs/{row.run_id}",
        )
    left, right = st.columns(2)
    with left:
        st.markdown("**Metrics** (last value)")
        metrics = pd.DataFrame(sorted(row.metrics.items()), columns=["metric", "value"])
        st.dataframe(metrics, hide_index=True, width="stretch")
        st.markdown("**Artifacts**")
        st.write(", ".join(store.artifact_paths(uri, row.run_id)) or "none")
    with right:
        st.markdown("**Parameters**")
        params = pd.DataFrame(sorted(row.params.items()), columns=["parameter", "value"])
        st.dataframe(params, hide_index=True, width="stretch")
        tags = {k: v for k, v in row.tags.items() if not k.startswith("mlflow.")}
        st.markdown("**Tags**")
        st.dataframe(
            pd.DataFrame(sorted(tags.items()), columns=["tag", "value"]),
            hide_index=True,
            width="stretch",
        )
    report = store.artifact_text(uri, row.run_id, f"{row.flow}-{row.suite}.md")
    if report:
        with st.expander("The run's report", expanded=True):
            st.markdown(report)


st.title("Runs")
uri = store.current_uri()
frame = sections.runs_or_stop(uri)
versions = store.model_versions(uri)

suites = sorted(frame["suite"].unique())
experiments, total, champion = st.columns(3)
experiments.metric("Suites (experiments)", len(suites))
total.metric("Runs", len(frame))
champions = versions[
    (versions["name"] == "dreamshard-policy") & versions["aliases"].str.contains("champion")
]
champion.metric("Champion policy", f"v{champions['version'].iloc[0]}" if len(champions) else "none")

left, right = st.columns(2)
chosen_suites = left.multiselect("Suites", suites, default=suites)
chosen_flows = right.multiselect("Flows", FLOWS, default=list(FLOWS))
shown = frame[frame["suite"].isin(chosen_suites) & frame["flow"].isin(chosen_flows)]

table = pd.DataFrame(
    {
        "open": "?run=" + shown["run_id"],
        "suite": shown["suite"],
        "flow": shown["flow"],
        "status": shown["status"],
        "started": shown["start"],
        "seconds": shown["duration_s"].round(1),
        "key numbers": [key_numbers(r) for r in shown.itertuples()],
        "run id": shown["run_id"],
    }
)
st.dataframe(
    table,
    hide_index=True,
    width="stretch",
    column_config={
        "open": st.column_config.LinkColumn("open", display_text="open"),
        "started": st.column_config.DatetimeColumn("started (UTC)", format="YYYY-MM-DD HH:mm:ss"),
    },
)

if not versions.empty:
    with st.expander("Registered models"):
        st.dataframe(versions, hide_index=True, width="stretch")

ids = list(shown["run_id"])
if ids:
    wanted = st.query_params.get("run")
    rows = {r.run_id: r for r in shown.itertuples()}
    chosen = st.selectbox(
        "Open a run",
        ids,
        index=ids.index(wanted) if wanted in ids else 0,
        format_func=lambda i: run_label(rows[i]),
        key="open_run",
    )
    st.query_params["run"] = chosen
    show_run(uri, rows[chosen])
