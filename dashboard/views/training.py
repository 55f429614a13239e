"""Training: cost-net loss and policy reward across the alternating iterations; dataset growth."""

import pandas as pd
import streamlit as st

from dashboard import frames, plots, sections, store


def curves(uri: str, run_ids: list[str], labels: dict, key: str) -> pd.DataFrame:
    parts = []
    for run_id in run_ids:
        history = store.metric_history(uri, run_id, key)
        parts.append(history.assign(run=labels[run_id]))
    return (
        pd.concat(parts, ignore_index=True)
        if parts
        else pd.DataFrame(columns=["step", "value", "run"])
    )


def show(column, figure) -> None:
    column.plotly_chart(figure, width="stretch")


st.title("Training")
uri = store.current_uri()
sections.runs_or_stop(uri)
policy_runs = store.flow_runs(uri, "train-policy")
if policy_runs.empty:
    st.info("No finished train-policy run yet. " + store.EMPTY_HINT)
    st.stop()

labels = {
    r.run_id: f"{r.suite} · v{r.tags.get('registered_version', '?')} · "
    f"{r.params.get('backend', '?')} costs · {r.run_id[:8]}"
    for r in policy_runs.itertuples()
}
sources = {
    labels[r.run_id]: frames.cost_source(r.params.get("backend", "?"))
    for r in policy_runs.itertuples()
}
chosen = st.multiselect(
    "train-policy runs",
    list(labels),
    default=list(labels)[:1],
    format_func=labels.__getitem__,
    key="training_runs",
)
if not chosen:
    st.info("Choose at least one train-policy run.")
    st.stop()

left, right = st.columns(2)
show(
    left,
    plots.curve_figure(
        curves(uri, chosen, labels, "costnet_loss"),
        "step",
        "value",
        "Cost-net loss (the steps of all iterations in a row)",
        "cost-net step",
        "loss (sum of MSEs, scaled)",
    ),
)
show(
    right,
    plots.curve_figure(
        curves(uri, chosen, labels, "policy_reward_ms"),
        "step",
        "value",
        "Policy reward (minus predicted overall cost)",
        "policy update",
        "reward (ms)",
    ),
)

history = []
for run_id in chosen:
    found = store.artifact_json(uri, run_id, "history.json") or {"history": []}
    history += [{**h, "run": labels[run_id]} for h in found["history"]]
history = pd.DataFrame(history)
if not history.empty:
    left, right = st.columns(2)
    show(
        left,
        plots.curve_figure(
            history,
            "iteration",
            "dataset_size",
            "Cost dataset growth (placements with a backend cost)",
            "iteration",
            "measurements",
        ),
    )
    probe = history.melt(
        id_vars=["run", "iteration"],
        value_vars=["probe_predicted_ms", "probe_backend_ms"],
        var_name="which",
        value_name="ms",
    )
    truth = probe["run"].map(sources).fillna("backend")
    which = probe["which"].map({"probe_predicted_ms": "predicted"}).fillna(truth)
    probe["run"] = probe["run"] + " · " + which
    show(
        right,
        plots.curve_figure(
            probe,
            "iteration",
            "ms",
            "The greedy policy's placement of a probe task",
            "iteration",
            "overall cost (ms)",
        ),
    )
    st.dataframe(history, hide_index=True, width="stretch")

fits = store.flow_runs(uri, "train-cost-model")
if not fits.empty:
    fit_labels = {r.run_id: f"{r.suite} · {r.run_id[:8]}" for r in fits.itertuples()}
    st.plotly_chart(
        plots.curve_figure(
            curves(uri, list(fit_labels)[:3], fit_labels, "costnet_loss"),
            "step",
            "value",
            "Cost-net loss of the standalone fits (train-cost-model)",
            "step",
            "loss",
        ),
        width="stretch",
    )
