"""Evidence: every study's latest run, its targets (figure, interval, met or not), how it was
made (host, commit, models) and where it lives (its MLflow run, its report)."""

import pandas as pd
import streamlit as st

from dashboard import store

STUDY_PREFIX = f"{store.EXPERIMENT_PREFIX}study-"
IMPORT_HINT = (
    "No study runs in this MLflow store yet. The studies' results are committed as rows files "
    "(`benchmarks/results/*.rows.json`); `python -m benchmarks import` makes their MLflow runs "
    "(seconds), `python -m benchmarks run NAME` runs one again. Then press **Refresh**."
)
SUFFIXES = (".value", ".low", ".high", ".met")


def targets_of(uri: str, row) -> pd.DataFrame:
    """The run's targets: from its `targets.json` (the names as the report writes them), else
    from its metrics (`NAME.value`, `.low`, `.high`, `.met`)."""
    found = store.artifact_json(uri, row.run_id, "targets.json")
    if isinstance(found, dict) and isinstance(found.get("targets"), list):
        records = found["targets"]
    else:
        names = sorted({k.rsplit(".", 1)[0] for k in row.metrics if k.endswith(SUFFIXES)})
        records = [
            {
                "figure": name.replace("_", " "),
                "wanted": "",
                **{s[1:]: row.metrics.get(f"{name}{s}") for s in SUFFIXES},
            }
            for name in names
        ]
    table = []
    for r in records:
        value, low, high = (r.get(k) for k in ("value", "low", "high"))
        shown = "no figure" if value is None else f"{value:.3f}"
        if value is not None and low is not None and high is not None and low != high:
            shown += f" [{low:.3f}, {high:.3f}]"
        table.append(
            {
                "target": r["figure"],
                "wanted": r.get("wanted", ""),
                "figure [95%]": shown,
                "met": "yes" if r.get("met") else "no",
            }
        )
    return pd.DataFrame(table, columns=["target", "wanted", "figure [95%]", "met"])


def show_study(uri: str, row) -> None:
    name = row.experiment.removeprefix(STUDY_PREFIX)
    params, tags = row.params, row.tags
    st.subheader(name)
    models = ", ".join(
        f"{key.split('.')[1]} {value[:12]}"
        for key, value in sorted(params.items())
        if key.startswith("model.") and key.endswith(".sha256")
    )
    st.caption(
        f"run {row.run_id} · experiment {row.experiment} · commit {params.get('commit', '?')} · "
        f"{tags.get('study.date', f'{row.start:%Y-%m-%d}')} · host {params.get('hardware', '?')}"
        + (f" · models: {models}" if models else "")
    )
    targets = targets_of(uri, row)
    if targets.empty:
        st.write("This study states no targets; its report holds its figures.")
    else:
        st.dataframe(targets, hide_index=True, width="stretch")
    st.markdown(f"Command: `{params.get('command', '?')}`")
    link = f"#/experiments/{row.experiment_id}/runs/{row.run_id}"
    if uri.startswith(("http://", "https://")):
        st.link_button("Open in the MLflow UI", f"{uri.rstrip('/')}/{link}")
    else:
        st.caption(f"In the MLflow UI (`make mlflow-ui`): http://127.0.0.1:5000/{link}")
    report = store.artifact_text(uri, row.run_id, f"{name}.md")
    if report:
        with st.expander("The report"):
            st.markdown(report)


st.title("Evidence")
st.write(
    "Every study's latest run: what it set out to show (its targets), what it measured or "
    "modeled, and where its rows, report and MLflow run are. A target is met when its 95% "
    "interval's far end meets it."
)
uri = store.current_uri()
runs = store.runs(uri)
studies = runs[runs["experiment"].str.startswith(STUDY_PREFIX)] if not runs.empty else runs
if studies.empty:
    st.info(IMPORT_HINT)
    st.stop()
latest = studies.drop_duplicates("experiment")  # newest first: each study's latest run
summary = pd.DataFrame(
    {
        "study": latest["experiment"].str.removeprefix(STUDY_PREFIX),
        "targets met": [
            f"{(t['met'] == 'yes').sum()} of {len(t)}"
            for t in (targets_of(uri, row) for row in latest.itertuples())
        ],
        "commit": [row.params.get("commit", "?") for row in latest.itertuples()],
        "date": [row.tags.get("study.date", "") for row in latest.itertuples()],
    }
)
st.dataframe(summary, hide_index=True, width="stretch")
for row in latest.itertuples():
    show_study(uri, row)
