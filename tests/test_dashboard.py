"""The Streamlit dashboard with AppTest, against a real MLflow store from a tiny pipeline run."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from dreamshard.errors import DreamshardError

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")
PAGES = ("runs", "placement", "compare", "cost_model", "training", "place_tables")
TIMEOUT_S = 120  # the first run of a page imports torch and reads the store: slow on 2 cores
MISSING_COLUMN_CSV = b"name,rows,dim\nuser_id,1000000,64\nitem_id,50000,32\n"


@pytest.fixture
def store_env(pipeline_home, monkeypatch):
    monkeypatch.setenv("DREAMSHARD_HOME", str(pipeline_home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return pipeline_home


@pytest.fixture
def empty_env(tmp_path, monkeypatch):
    monkeypatch.setenv("DREAMSHARD_HOME", str(tmp_path))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


def open_page(page: str):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    at.run()
    return at.switch_page(f"views/{page}.py").run()


def figures(at) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def values(data) -> list:
    """A figure's array as a list (plotly sends numpy arrays as base64 `bdata`)."""
    if isinstance(data, dict) and "bdata" in data:
        return np.frombuffer(base64.b64decode(data["bdata"]), dtype=data["dtype"]).tolist()
    return list(data)


def titles(at) -> list[str]:
    return [fig["layout"].get("title", {}).get("text", "") for fig in figures(at)]


def assert_clean(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def evaluation_artifact(home: Path) -> dict:
    return json.loads(next(home.glob("mlartifacts/*/*/artifacts/evaluation.json")).read_text())


# --- every page with data ---------------------------------------------------------------------


def test_runs_page_lists_every_flow_and_opens_a_run(store_env):
    at = open_page("runs")
    assert_clean(at)
    table = at.dataframe[0].value
    assert {flow for flow in table["flow"] if flow} == {  # the study runs have no flow
        "pipeline",
        "collect-costs",
        "train-cost-model",
        "train-policy",
        "evaluate",
    }
    assert (table["status"] == "FINISHED").all()
    assert at.metric[2].value == "v1"  # the champion policy
    evaluate_id = table.loc[table["flow"] == "evaluate", "run id"].iloc[0]
    at.selectbox(key="open_run").set_value(evaluate_id).run()
    assert_clean(at)
    assert any("evaluate on cpu-12x2" in h.value for h in at.subheader)
    assert any("Evaluation on 2 held-out cpu-12x2 tasks" in m.value for m in at.markdown)


def test_placement_explorer_shows_tables_costs_and_memory(store_env):
    at = open_page("placement")
    assert_clean(at)
    # the tiny pipeline runs on the simulated backend: no page may call its costs measured
    assert titles(at) == ["Tables per device (height = memory)", "Simulated cost per device"]
    tables, costs = figures(at)
    assert len(values(tables["data"][0]["x"])) == 12  # a segment per table of the task
    assert [t["name"] for t in costs["data"]] == [
        "forward compute",
        "forward all-to-all",
        "backward all-to-all",
        "backward compute + update",
    ]
    assert len(at.dataframe[0].value) == 12
    at.radio(key="placement_planner").set_value("size").run()
    at.selectbox(key="placement_task").set_value("cpu-12x2/test/1").run()
    assert_clean(at)
    assert at.metric[0].label == "Simulated cost per step"


def test_compare_page_plots_ratios_to_the_best_heuristic(store_env):
    at = open_page("compare")
    assert_clean(at)
    (fig,) = figures(at)
    assert {trace["name"] for trace in fig["data"]} >= {"candidate", "size_lookup", "lookup"}
    summary = at.dataframe[0].value
    assert len(summary) == 5  # 4 heuristics, candidate (the main job leaves random out)
    assert (summary["tasks"] == 2).all()


def test_cost_model_page_compares_predictions_with_measurements(store_env):
    at = open_page("cost_model")
    assert_clean(at)
    scatter, errors = titles(at)
    assert scatter == "Overall cost: predicted vs simulated"
    assert set(at.dataframe[0].value["true costs"]) == {"simulated"}
    assert errors.startswith("Prediction error per head")
    accuracy = at.dataframe[0].value
    assert set(accuracy["head"]) == {"overall", "fwd_comp", "bwd_comm", "bwd_comp"}
    assert set(accuracy["model version"]) == {"v1"}


def test_training_page_plots_loss_reward_and_dataset_growth(store_env):
    at = open_page("training")
    assert_clean(at)
    shown = titles(at)
    assert "Policy reward (minus predicted overall cost)" in shown
    assert "Cost dataset growth (placements with a backend cost)" in shown
    probe = figures(at)[shown.index("The greedy policy's placement of a probe task")]
    legend = {trace["name"] for trace in probe["data"]}
    assert any(name.endswith("· simulated") for name in legend), legend
    assert not any("measured" in name for name in legend), legend
    reward = figures(at)[shown.index("Policy reward (minus predicted overall cost)")]
    assert len(values(reward["data"][0]["y"])) == 2 * 3  # iterations x policy updates


def test_place_tables_page_places_a_suite_task_and_offers_the_plan(store_env):
    at = open_page("place_tables")
    assert_clean(at)
    assert at.selectbox(key="place_planner").value == "models:/dreamshard-policy@champion"
    assert titles(at) == ["Tables per device (height = memory)", "Predicted cost per device"]
    assert len(at.get("download_button")) == 1
    at.selectbox(key="place_planner").set_value("size_lookup").run()
    assert_clean(at)
    assert any("the champion" in c.value for c in at.caption)  # whose cost net predicted


def test_place_tables_page_places_a_pasted_spec(store_env):
    at = open_page("place_tables")
    at.radio(key="place_source").set_value("Paste CSV").run()
    assert_clean(at)
    frames = [d.value for d in at.dataframe]
    plan_devices = next(f for f in frames if "memory_mib" in f.columns)
    placed = [name for names in plan_devices["tables"] for name in names]
    # the plan explained: every device and every placed table or shard, by the champion
    devices = next(f for f in frames if "bottleneck" in f.columns)
    assert devices["device"].tolist() == plan_devices["device"].tolist()
    assert sorted(next(f for f in frames if "load before" in f.columns)["table"]) == sorted(placed)
    assert len({name.split("[")[0] for name in placed}) == 6  # the example spec's tables
    assert len(set(placed)) == len(placed)  # each table, or each of its shards, once
    # 6 tables of up to 4M rows, placed by a model trained on 12-table cpu-12x2 tasks
    warnings = [w.value for w in at.warning]
    assert any("outside what the model was trained on: tables per task" in w for w in warnings)


def bar_segments(figure: dict) -> list[tuple[str, str, float, str]]:
    """(trace name, table or shard name, MiB, device label) of every bar segment of a tables
    figure."""
    return [
        (trace.get("name", ""), name, mib, device)
        for trace in figure["data"]
        if trace["type"] == "bar"
        for name, mib, device in zip(trace["hovertext"], values(trace["y"]), trace["x"])
    ]


def test_place_tables_page_shows_a_split_plans_shards(store_env):
    from dashboard.place import EXAMPLE_CSV, tables_from_text
    from dreamshard.placement.plan_file import placement_from_plan
    from dreamshard.placement.tasks import PlacementTask

    at = open_page("place_tables")
    at.radio(key="place_source").set_value("Paste CSV").run()
    at.selectbox(key="place_planner").set_value("lookup").run()
    assert_clean(at)
    assert at.selectbox(key="place_split").value == "auto"  # the CLI's default
    # history_items reads 2,560 floats per sample, over the mean device load of the 6 tables:
    # the balance rule cuts it, and the analytic model's check rates it cheapest cut row-wise
    # over the 4 devices (a row shard has only its rows' lookups)
    assert any("history_items row-wise into 4 shards" in m.value for m in at.markdown)
    layout, predicted = figures(at)
    segments = bar_segments(layout)
    shards = [text for name, text, _, _ in segments if text.startswith("history_items")]
    quarter = 2_500_000 // 4
    assert set(shards) == {
        f"history_items[r{r}:{r + quarter}]" for r in range(0, 4 * quarter, quarter)
    }
    traces = {name for name, text, _, _ in segments if text in shards}
    assert traces == {"history_items: row-wise into 4 shards"}  # one colour for all four
    assert {device for _, text, _, device in segments if text in shards} == {
        f"device {d}" for d in range(4)
    }  # TorchRec's row-wise layout: one shard a device
    (trace,) = [t for t in layout["data"] if t.get("name") in traces]
    assert isinstance(trace["marker"]["color"], str)  # one colour, not the lookups scale
    assert sorted(trace["text"]) == sorted(name.removeprefix("history_items") for name in shards)
    assert "shards" in layout["layout"]["xaxis"]["ticktext"][0]
    assert predicted["data"][0]["x"] == [f"device {d}" for d in range(4)]  # the shards' costs

    # the plan shown (and downloaded) is version 2 and reads back as the same split placement
    (code,) = at.code
    plan = json.loads(code.value)
    assert plan["version"] == 2
    assert {"table": "history_items", "kind": "row", "parts": 4} in plan["splits"]
    task = PlacementTask(
        tuple(tables_from_text(EXAMPLE_CSV)),
        plan["num_devices"],
        plan["memory_cap_bytes"],
        plan["precision"],
    )
    placement = placement_from_plan(task, plan)
    assert len(placement.devices) == len(segments) == len(plan["placement"])
    # memory bars count shards: each device's segments sum to the plan's memory of its shards,
    # and all segments to the whole tables' memory (the shards cover each table once)
    per_device = {}
    for _, _, mib, device in segments:
        per_device[device] = per_device.get(device, 0.0) + mib
    plan_mib = [d["memory_bytes"] / 2**20 for d in plan["devices"]]
    assert sorted(per_device) == [f"device {d}" for d in range(plan["num_devices"])]
    assert [per_device[f"device {d}"] for d in range(4)] == pytest.approx(plan_mib)
    whole = sum(t.bytes(task.precision) for t in task.tables) / 2**20
    assert sum(plan_mib) == pytest.approx(whole)

    at.selectbox(key="place_split").set_value("none").run()
    assert_clean(at)
    assert any(m.value == "Whole tables (split none)." for m in at.markdown)
    layout, _ = figures(at)
    names = {text for _, text, _, _ in bar_segments(layout)}
    assert names == {t.name for t in task.tables}
    assert json.loads(at.code[0].value)["splits"] == []


@pytest.fixture
def split_evaluation_env(empty_env):
    """A store holding one finished evaluate run whose `lookup` placements split tables (the
    example spec's 6 tables on 4 devices, split by the heuristics' balance rule unchecked, which
    halves its hot table; `dim` whole), measured on the simulated backend; written with an
    MlflowClient of its own (no global MLflow setting)."""
    from mlflow import MlflowClient

    from dashboard.place import EXAMPLE_CSV, tables_from_text
    from dreamshard.costs.backends import make_backend
    from dreamshard.evaluation.evaluate import evaluate
    from dreamshard.placement.registry import named_planner
    from dreamshard.placement.tasks import GIB, PlacementTask

    task = PlacementTask(tuple(tables_from_text(EXAMPLE_CSV)), 4, GIB // 2, name="spec/test/0")
    from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place
    from dreamshard.placement.splitting import balance_splits, memory_splits, split_place

    def lookup_split(task, seed):
        splits = balance_splits(task, HEURISTIC_KEYS["lookup"], memory_splits(task))
        return split_place(task, splits, lambda shards: greedy_place(shards, "lookup"), "lookup")

    planners = {"lookup": lookup_split, "dim": named_planner("dim")}
    evaluation = evaluate([task], planners, make_backend("simulated"), rounds=2)
    uri = f"sqlite:///{empty_env / 'mlflow.db'}"
    client = MlflowClient(uri, uri)
    experiment = client.create_experiment(
        "dreamshard-spec", artifact_location=(empty_env / "mlartifacts").as_uri()
    )
    run = client.create_run(experiment, tags={"flow": "evaluate", "suite": "spec"})
    client.log_dict(run.info.run_id, evaluation.to_dict(), "evaluation.json")
    client.set_terminated(run.info.run_id)
    return evaluation


def test_placement_explorer_shows_the_shards_of_a_split_placement(split_evaluation_env):
    (split,) = split_evaluation_env.placements[0][0].splits  # what `lookup` split, evaluated
    at = open_page("placement")
    assert_clean(at)
    assert at.radio(key="placement_planner").value == "lookup"
    summary = f"{split.table} {split.kind}-wise into {split.parts} shards"
    assert any(summary in m.value for m in at.markdown)
    layout, _ = figures(at)
    segments = bar_segments(layout)
    shards = [text for _, text, _, _ in segments if text.startswith(f"{split.table}[")]
    assert len(shards) == split.parts
    assert {name for name, text, _, _ in segments if text in shards} == {
        f"{split.table}: {split.kind}-wise into {split.parts} shards"
    }
    assert len(at.dataframe[0].value) == 6 - 1 + split.parts
    assert set(at.dataframe[0].value["of"]) == {
        t.name for t in split_evaluation_env.tasks[0].tables
    }

    at.radio(key="placement_planner").set_value("dim").run()  # whole tables: no shards
    assert_clean(at)
    layout, _ = figures(at)
    assert len(layout["data"]) == 2  # the tables' bars and the memory cap's legend line
    assert len(bar_segments(layout)) == 6


# --- bad input and the empty store ------------------------------------------------------------


def test_a_bad_upload_shows_an_error_on_the_page(store_env):
    at = open_page("place_tables")
    at.radio(key="place_source").set_value("Upload a file").run()
    at.file_uploader(key="place_upload").upload("tables.csv", MISSING_COLUMN_CSV, "text/csv")
    at.run()
    assert not at.exception
    assert [e.value for e in at.error] == [
        "Cannot use these tables: tables.csv: missing column pooling_factor"
    ]


def test_a_bad_pasted_csv_shows_an_error_on_the_page(store_env):
    at = open_page("place_tables")
    at.radio(key="place_source").set_value("Paste CSV").run()
    at.text_area(key="place_csv").set_value(MISSING_COLUMN_CSV.decode()).run()
    assert not at.exception
    assert "missing column pooling_factor" in at.error[0].value


def test_an_impossible_memory_cap_says_so(store_env):
    at = open_page("place_tables")
    at.radio(key="place_source").set_value("Paste CSV").run()
    at.number_input(key="place_memory_spec").set_value(0.001).run()
    assert not at.exception
    assert at.error and "GiB" not in at.error[0].value  # the planner's own one-line reason


@pytest.mark.parametrize("page", PAGES)
def test_every_page_says_how_to_get_data_on_an_empty_store(empty_env, page):
    at = open_page(page)
    assert not at.exception, [e.value for e in at.exception]
    assert any("make pipeline" in i.value for i in at.info)
    assert not (empty_env / "mlflow.db").exists()  # read-only: an absent store is not created


def test_an_unreachable_server_is_one_error_line(empty_env, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    at = open_page("runs")
    assert not at.exception
    assert "cannot be used" in at.error[0].value


# --- the plain functions under the pages ------------------------------------------------------


def test_ratios_put_each_tasks_best_heuristic_at_one(pipeline_home):
    from dashboard.frames import ratios_to_best_heuristic

    ratios = ratios_to_best_heuristic(evaluation_artifact(pipeline_home))
    assert ratios["best_heuristic"].nunique() >= 1 and ratios["task"].nunique() == 2
    heuristics = ratios[ratios["planner"].isin(["dim", "size", "lookup", "size_lookup"])]
    assert (heuristics["ratio"] >= 1.0 - 1e-12).all()


def test_results_written_before_splits_show_whole_tables(pipeline_home):
    from dashboard.frames import evaluated_placement, placement_tables

    evaluation = evaluation_artifact(pipeline_home)
    for task in evaluation["tasks"]:
        for result in task["results"].values():
            result.pop("splits", None)
    name = evaluation["tasks"][0]["name"]
    frame = placement_tables(*evaluated_placement(evaluation, name, "size"))
    assert list(frame["table"]) == [t["name"] for t in evaluation["tasks"][0]["tables"]]
    assert (frame["table"] == frame["of"]).all() and (frame["split"] == "").all()
    assert list(frame["device"]) == evaluation["tasks"][0]["results"]["size"]["placement"]


def test_cost_figure_marks_the_slowest_device():
    from dashboard.plots import cost_figure

    devices = [
        {"fwd_comp": 1.0, "fwd_comm": 2.0, "bwd_comm": 1.0, "bwd_comp": 3.0},
        {"fwd_comp": 2.0, "fwd_comm": 1.0, "bwd_comm": 1.0, "bwd_comp": 1.0},
    ]
    fig = cost_figure(devices, "costs")
    assert len(fig.data) == 4
    assert fig.layout.shapes[0].y0 == 7.0
    assert "overall = slowest device: 7.00 ms" in fig.layout.annotations[0].text


def test_tables_from_text_names_the_file_not_a_temporary_path():
    from dashboard.place import EXAMPLE_CSV, tables_from_text

    assert len(tables_from_text(EXAMPLE_CSV)) == 6
    with pytest.raises(DreamshardError, match=r"^mine\.csv line 3: dim"):
        tables_from_text("name,rows,dim,pooling_factor\na,10,4,1\nb,10,x,1\n", "mine.csv")


def test_a_cost_chart_says_which_costs_were_measured_and_which_modeled():
    from dashboard.frames import cost_title
    from dreamshard.costs.backends import describe_costs

    kernels = {"backend": "fbgemm", "device": "cpu", "topology": "cpu-gloo"}
    title = cost_title("fbgemm", describe_costs(kernels))
    assert "kernels measured" in title and "all-to-all modeled" in title
    measured = describe_costs(kernels | {"topology": "measured"})
    assert cost_title("fbgemm", measured) == "Measured cost per device"
    assert cost_title("simulated", "") == "Simulated cost per device"


# --- the Evidence page: the studies' runs, as a fresh clone's importer makes them (the store
# `pipeline_home` holds) ------------------------------------------------------------------------


RESULTS = Path(APP).parent.parent / "benchmarks" / "results"


def test_evidence_lists_every_studys_latest_run_with_its_targets(store_env):
    at = open_page("evidence")
    assert_clean(at)
    committed = {p.name.removesuffix(".rows.json") for p in RESULTS.glob("*.rows.json")}
    assert committed and committed <= {h.value for h in at.subheader}
    summary = at.dataframe[0].value
    assert set(summary["study"]) == committed
    # each study's targets as its report states them: the units study's one target, met
    units = json.loads((RESULTS / "units.rows.json").read_text())["meta"]
    tables = [d.value for d in at.dataframe[1:]]
    found = [t for t in tables if "TorchRec's reported perf" in " ".join(t["target"])]
    assert found and list(found[0]["met"]) == ["yes"]
    assert any(units["commit"] in c.value for c in at.caption)
    assert any("run " in c.value and "commit" in c.value for c in at.caption)


def test_evidence_says_how_to_import_on_an_empty_store(empty_env):
    at = open_page("evidence")
    assert not at.exception, [e.value for e in at.exception]
    assert any("python -m benchmarks import" in i.value for i in at.info)
    assert not (empty_env / "mlflow.db").exists()
