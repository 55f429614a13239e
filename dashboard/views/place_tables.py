"""Place tables: a table spec (uploaded, pasted or a generated suite's task), devices, memory and
a planner or registered model; the placement, its predicted costs and the plan JSON at once."""

import json

import pandas as pd
import streamlit as st

from dashboard import frames, place, plots, sections, store
from dreamshard.errors import DreamshardError
from dreamshard.learn.coverage import outside_training
from dreamshard.placement.plan_file import plan_to_dict
from dreamshard.placement.splitting import SPLIT_MODES
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import GIB, PlacementTask
from dreamshard.tables.table import Table
from dreamshard.tracking import POLICY_MODEL, load_registered_model

SOURCES = ("Generated suite", "Upload a file", "Paste CSV")


@st.cache_data(show_spinner="Generating the suite's tables...")
def suite_task(name: str, index: int) -> PlacementTask:
    return make_suite(
        parse_suite_name(name, num_train_tasks=1, num_test_tasks=index + 1)
    ).test_tasks[index]


@st.cache_resource(show_spinner="Loading the model from the registry...")
def registered_model(model_uri: str, tracking: str):
    return load_registered_model(model_uri, tracking)


def read_tables() -> tuple[list[Table], PlacementTask | None]:
    """The tables the user gave, and the suite task they came from (None for a spec)."""
    source = st.radio("Tables", SOURCES, horizontal=True, key="place_source")
    if source == "Generated suite":
        left, right = st.columns(2)
        name = left.text_input(
            "Suite",
            "dlrm-50x4",
            key="place_suite",
            help="<profile>-<tables>x<devices>: dlrm or cpu profile",
        )
        index = right.number_input("Held-out task", 0, 49, 0, key="place_task_index")
        task = suite_task(name.strip(), int(index))
        return list(task.tables), task
    if source == "Upload a file":
        upload = st.file_uploader(
            "Table spec (.csv or .json)",
            type=["csv", "json"],
            key="place_upload",
            help="Columns name, rows, dim, pooling_factor and optionally "
            "bin_0..bin_16 (the access histogram).",
        )
        if upload is None:
            st.info("Upload a table spec, or paste one, or pick a generated suite.")
            st.stop()
        return place.tables_from_text(upload.getvalue().decode(errors="replace"), upload.name), None
    text = st.text_area(
        "Table spec CSV",
        place.EXAMPLE_CSV,
        height=180,
        key="place_csv",
        help="Columns name, rows, dim, pooling_factor and optionally bin_0..bin_16.",
    )
    return place.tables_from_text(text, "the pasted CSV"), None


def model_choices(uri: str) -> tuple[list[str], str | None]:
    """Registered policy versions as `models:/` URIs (champion first), and the champion's URI."""
    try:
        versions = store.model_versions(uri)
    except DreamshardError:
        return [], None
    policy = versions[versions["name"] == POLICY_MODEL]
    champion = (
        f"models:/{POLICY_MODEL}@champion"
        if policy["aliases"].str.contains("champion").any()
        else None
    )
    uris = [f"models:/{POLICY_MODEL}/{v}" for v in policy["version"]]
    return ([champion] if champion else []) + uris, champion


st.title("Place tables")
uri = store.current_uri()
models, champion = model_choices(uri)
if not models:
    st.info(
        "The heuristics work now; a learned placement and the predicted costs need a "
        "registered model. " + store.EMPTY_HINT
    )

try:
    tables, suite = read_tables()
except DreamshardError as exc:
    st.error(f"Cannot use these tables: {exc}")
    st.stop()

devices_col, memory_col, precision_col, planner_col, split_col = st.columns(5)
num_devices = devices_col.number_input(
    "Devices", 1, 1024, suite.num_devices if suite else 4, key="place_devices"
)
precision = precision_col.selectbox(
    "Precision",
    ["fp16", "fp32"],
    index=1 if suite and suite.precision == "fp32" else 0,
    key="place_precision",
)
total = sum(t.bytes(precision) for t in tables)
largest = max(t.bytes(precision) for t in tables)
spec_default = max(total / num_devices, largest) * 1.25  # room for a greedy to succeed
default_gib = (suite.memory_cap_bytes if suite else spec_default) / GIB
memory_gib = memory_col.number_input(
    "Memory per device (GiB)",
    min_value=0.0001,
    value=float(round(default_gib, 4)),
    step=0.25,
    format="%.4f",
    key=f"place_memory_{suite.name if suite else 'spec'}",
    help=f"The tables need {total / GIB:.3f} GiB in all at {precision}",
)
planner = planner_col.selectbox(
    "Planner or registered model", [*models, *place.model_free_methods()], key="place_planner"
)
split = split_col.selectbox(
    "Split tables",
    SPLIT_MODES,
    index=SPLIT_MODES.index("auto"),  # `dreamshard place`'s default
    key="place_split",
    help="auto: the planner may split a table into column-wise or row-wise shards where "
    "that helps (and must, for one no device holds); none: whole tables, as in the paper.",
)

task = PlacementTask(
    tuple(tables),
    int(num_devices),
    int(memory_gib * GIB),
    precision,
    suite.name if suite else "uploaded",
)
try:
    model = registered_model(planner, uri) if planner.startswith("models:/") else None
    placement = place.place_tables(task, planner, model, split)
except DreamshardError as exc:
    st.error(str(exc))
    st.stop()

note = outside_training(task, model.metadata.get("ranges")) if model is not None else None
if note:
    st.warning(f"{note}; the heuristics are among the candidates.")
if placement.candidate:
    st.caption(f"Chosen by the cost network: {placement.candidate}.")
st.markdown(
    frames.split_summary(placement, len(tables))
    or (
        "Whole tables (split none)."
        if split == "none"
        else "No table split: the planner placed every table whole."
    )
)

predictor, predictor_uri = model, planner
if predictor is None and champion:
    try:
        predictor, predictor_uri = registered_model(champion, uri), champion
    except DreamshardError as exc:  # the placement stands; only the prediction is missing
        st.warning(f"No predicted costs: {exc}")
plan = plan_to_dict(task, placement) | ({"note": note} if note else {})
layout = frames.placement_tables(task, placement)
left, right = st.columns(2)
left.plotly_chart(
    plots.tables_figure(layout, task.num_devices, task.memory_cap_bytes / frames.MIB),
    width="stretch",
)
if predictor is None:
    right.info("No registered model yet, so no predicted costs: run `make pipeline` to train one.")
else:
    breakdown, overall = place.predicted_breakdown(predictor, task, placement)
    right.plotly_chart(
        plots.cost_figure(breakdown, "Predicted cost per device", overall, "predicted overall"),
        width="stretch",
    )
    right.caption(
        f"Predicted by the cost network of {predictor_uri}"
        + (" (the champion: heuristics have no cost network of their own)" if model is None else "")
        + ". fwd_comm is not predicted per device (it depends on the other devices); "
        "the overall line is composed from the device heads (slowest forward, then the "
        "slowest exchange and backward)."
    )

sections.explanation(task, placement, predictor)

plan_text = json.dumps(plan, indent=2)
st.download_button(
    "Download the plan JSON",
    plan_text,
    file_name="plan.json",
    mime="application/json",
    key="place_download",
)
with st.expander(f"The plan JSON (version {plan['version']})"):
    st.code(plan_text, language="json")
st.dataframe(
    pd.DataFrame(plan["devices"])
    .assign(memory_mib=lambda f: (f["memory_bytes"] / frames.MIB).round(2))
    .drop(columns="memory_bytes"),
    hide_index=True,
    width="stretch",
    column_config={"memory_mib": st.column_config.NumberColumn("memory MiB", format="%.2f")},
)
