"""Cost model: how well each registered cost network predicted the costs of its evaluation, and
the held-out errors of its fits."""

import pandas as pd
import streamlit as st

from dashboard import frames, plots, sections, store
from dreamshard.learn.costnet import DEVICE_TERMS


def model_versions() -> None:
    """Each registered version's predictions against its evaluation's costs (stops the page
    on an empty store)."""
    uri = store.current_uri()
    found = sections.evaluations_or_stop(uri)

    points_by_run = {}
    for item in found:
        predictions = store.artifact_json(uri, item["run_id"], "predictions.json")
        if predictions and predictions.get("rows"):
            points_by_run[item["run_id"]] = frames.prediction_points(predictions["rows"])
    if not points_by_run:
        st.info("No evaluate run logged predictions.json yet. " + store.EMPTY_HINT)
        st.stop()

    items = {item["run_id"]: item for item in found if item["run_id"] in points_by_run}
    st.subheader("Accuracy per model version")
    rows = []
    for run_id, points in points_by_run.items():
        item = items[run_id]
        summary = frames.error_summary(points)
        summary.insert(0, "model version", f"v{item['candidate_version']}")
        summary.insert(1, "evaluated on", f"{item['suite']} · {run_id[:8]}")
        summary.insert(2, "true costs", frames.cost_source(item["evaluation"].get("backend", "?")))
        rows.append(summary)
    st.dataframe(
        pd.concat(rows, ignore_index=True),
        hide_index=True,
        width="stretch",
        column_config={
            c: st.column_config.NumberColumn(format="%.2f") for c in ("MAE ms", "MAPE %", "bias %")
        },
    )
    st.caption(
        "Each version's cost network (dreamshard-costnet) against the costs of every planner's "
        "placements on the held-out tasks of its evaluation: measured on fbgemm kernels, or "
        "simulated (the 'true costs' column). Heads: the overall cost, and per device forward "
        "compute, backward all-to-all and backward compute."
    )

    run_id = st.selectbox(
        "Model version",
        list(items),
        key="costnet_run",
        format_func=lambda r: (
            f"v{items[r]['candidate_version']} · " + store.evaluation_label(items[r])
        ),
    )
    points = points_by_run[run_id]
    truth = frames.cost_source(items[run_id]["evaluation"].get("backend", "?"))
    scatter, errors = st.columns(2)
    scatter.plotly_chart(plots.prediction_figure(points, truth), width="stretch")
    errors.plotly_chart(plots.error_figure(points, truth), width="stretch")

    held_out = store.flow_runs(uri, "train-cost-model")
    if not held_out.empty:
        st.subheader("Held-out errors when fitting (train-cost-model runs)")
        rows = [
            {
                "suite": r.suite,
                "run id": r.run_id[:8],
                "head": head,
                "MAE ms": r.metrics.get(f"heldout_{head}_mae_ms"),
                "MAPE %": 100 * r.metrics[f"heldout_{head}_mape"],
            }
            for r in held_out.itertuples()
            for head in ("overall", *DEVICE_TERMS)
            if f"heldout_{head}_mape" in r.metrics
        ]
        st.dataframe(
            pd.DataFrame(rows),
            hide_index=True,
            width="stretch",
            column_config={
                c: st.column_config.NumberColumn(format="%.2f") for c in ("MAE ms", "MAPE %")
            },
        )
        st.caption(
            "The fit's own check: trained on the first 80% of the cost dataset, scored on the "
            "latest 20% (measured or simulated, as the run's backend)."
        )


st.title("Cost model")
model_versions()
