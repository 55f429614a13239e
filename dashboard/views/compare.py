"""Compare planners: each planner's cost relative to the best heuristic, over held-out tasks."""

import pandas as pd
import streamlit as st

from dashboard import frames, plots, sections, store
from dreamshard.evaluation.rounds import geometric_mean

st.title("Compare planners")
uri = store.current_uri()
found = sections.evaluations_or_stop(uri)

labels = {item["run_id"]: store.evaluation_label(item) for item in found}
newest_per_suite = list({item["suite"]: item["run_id"] for item in reversed(found)}.values())
chosen = st.multiselect(
    "Evaluation runs (one panel each)",
    list(labels),
    default=newest_per_suite,
    format_func=labels.__getitem__,
    key="compare_runs",
    help="Default: the newest evaluation of each suite. An evaluation of a "
    "model on a suite it was not trained on is marked zero-shot.",
)
if not chosen:
    st.info("Choose at least one evaluation run.")
    st.stop()

parts = []
for item in found:
    if item["run_id"] in chosen:
        ratios = frames.ratios_to_best_heuristic(item["evaluation"])
        zero_shot = item["trained_on"] != item["suite"]
        ratios["evaluation"] = (
            f"{item['suite']}{' (zero-shot)' if zero_shot else ''} · "
            f"model v{item['candidate_version']} · "
            f"{frames.cost_source(item['evaluation'].get('backend', '?'))} · {item['run_id'][:8]}"
        )
        parts.append(ratios)
ratios = pd.concat(parts, ignore_index=True)
order = frames.planner_order(list(dict.fromkeys(ratios["planner"])))

st.plotly_chart(plots.compare_figure(ratios, order), width="stretch")
st.caption(
    "Each point is one held-out task: the planner's cost (measured on fbgemm kernels, or "
    "simulated, as each panel says) divided by the cost of that task's best heuristic "
    "(geometric mean over interleaved rounds). Below 1 beats every heuristic. candidate = "
    "the model version the run evaluated; champion = the champion it was compared with."
)

summary = (
    ratios.groupby(["evaluation", "planner"], sort=False)
    .agg(
        tasks=("ratio", "size"),
        median=("ratio", "median"),
        geometric_mean=("ratio", lambda r: float(geometric_mean(r.to_numpy()))),
        worst=("ratio", "max"),
        best_on_tasks=("ratio", lambda r: int((r <= 1).sum())),
        mean_cost_ms=("mean_cost_ms", "mean"),
    )
    .reset_index()
)
summary["planner"] = pd.Categorical(summary["planner"], order, ordered=True)
st.subheader("Summary")
st.dataframe(
    summary.sort_values(["evaluation", "planner"]),
    hide_index=True,
    width="stretch",
    column_config={
        "median": st.column_config.NumberColumn(format="%.3f"),
        "geometric_mean": st.column_config.NumberColumn(
            "geometric mean", format="%.3f", help="As the pipeline's vs_per_task_best_heuristic"
        ),
        "worst": st.column_config.NumberColumn(format="%.3f"),
        "best_on_tasks": st.column_config.NumberColumn(
            "tasks at or below 1", help="Tasks where it matched or beat the best heuristic"
        ),
        "mean_cost_ms": st.column_config.NumberColumn("mean cost ms", format="%.2f"),
    },
)
