"""Placement explorer: one evaluated task, one planner: where each table went and what it cost."""

import numpy as np
import streamlit as st

from dashboard import frames, plots, sections, store
from dreamshard.errors import DreamshardError

st.title("Placement explorer")
uri = store.current_uri()
item = sections.pick_evaluation(sections.evaluations_or_stop(uri), key="placement_run")
evaluation = item["evaluation"]
tasks = {task["name"]: task for task in evaluation["tasks"]}

left, right = st.columns([1, 2])
task = tasks[left.selectbox("Held-out task", list(tasks), key="placement_task")]
planners = frames.planner_order(list(task["results"]))
planner = right.radio(
    "Planner",
    planners,
    horizontal=True,
    key="placement_planner",
    help="candidate: the model version this run evaluated; champion: the one "
    "it was compared with; the rest are the heuristics and random.",
)
result = task["results"][planner]
if "declined" in result:
    st.warning(f"{planner} declined this task, so nothing was measured: {result['declined']}")
    st.stop()

ratios = frames.ratios_to_best_heuristic(evaluation)
source = frames.cost_source(evaluation["backend"])
if result.get("candidate"):
    reported = result.get("method", planner)
    st.info(
        f"{planner} picked this placement by its cost network: {result['candidate']}"
        + (f" (reported as {reported})" if reported != planner else "")
    )
ratio = ratios[(ratios["task"] == task["name"]) & (ratios["planner"] == planner)]
cap_mib = task["memory_cap_bytes"] / frames.MIB
cost, versus, memory, plan = st.columns(4)
cost.metric(
    f"{source.capitalize()} cost per step",
    f"{np.mean(result['costs_ms']):.2f} ms",
    help=f"Mean over {len(result['costs_ms'])} interleaved rounds of the slowest "
    f"device's fwd_comp + fwd_comm + bwd_comm + bwd_comp "
    f"({evaluation.get('costs_made') or evaluation['backend'] + ' backend'}).",
)
if not ratio.empty:
    versus.metric(
        f"vs best heuristic ({ratio['best_heuristic'].iloc[0]})",
        f"{ratio['ratio'].iloc[0]:.3f}×",
        help="Below 1 beats every heuristic.",
    )
fullest = 100 * max(result["memory_bytes"]) / task["memory_cap_bytes"]
memory.metric("Fullest device", f"{fullest:.0f}% of {plots.mib_text(cap_mib)}")
plan.metric("Planning time", f"{1000 * result['plan_seconds']:.1f} ms")

placed = frames.evaluated_placement(evaluation, task["name"], planner)
try:
    tables = frames.placement_tables(*placed)
except DreamshardError as exc:  # a row split whose table's trace this host cannot read
    st.error(f"Cannot show the shards of this placement: {exc}")
    st.stop()
splits = frames.split_summary(placed[1], len(task["tables"]))
if splits:
    st.markdown(splits)
pictures, costs = st.columns(2)
pictures.plotly_chart(plots.tables_figure(tables, task["num_devices"], cap_mib), width="stretch")
costs.plotly_chart(
    plots.cost_figure(
        result["devices"],
        frames.cost_title(evaluation["backend"], evaluation.get("costs_made", "")),
    ),
    width="stretch",
)
shown = (
    f"{len(task['tables'])} tables in {len(tables)} shards" if splits else f"{len(tables)} tables"
)
st.caption(
    f"{shown} on {task['num_devices']} devices, {task['precision']} weights; costs "
    f"are means over {len(result['costs_ms'])} interleaved rounds "
    f"({evaluation.get('costs_made') or source}). "
    "A step waits for the slowest device, so the overall cost is its stacked total."
)

st.subheader("Tables")
st.dataframe(
    tables.sort_values(["device", "memory_mib"], ascending=[True, False]),
    hide_index=True,
    width="stretch",
    column_config={
        "memory_mib": st.column_config.NumberColumn("memory MiB", format="%.2f"),
        "pooling_factor": st.column_config.NumberColumn("pooling factor", format="%.2f"),
        "lookups": st.column_config.NumberColumn("lookups per sample", format="%.0f"),
        "of": st.column_config.TextColumn("shard of"),
    },
)
sections.explanation(*placed, None)
