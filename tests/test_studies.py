"""The study runner (benchmarks/runner.py) on small studies: arms within their limits, exact and
measured judges, resuming, targets by the interval's upper end, rows files and their MLflow runs;
and the two studies on it (benchmarks/ood.py, benchmarks/scale.py) at toy size."""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pytest

from benchmarks.__main__ import main as benchmarks_main
from benchmarks.parts.ood_families import ood_task
from benchmarks.parts.scale_tasks import TOPOLOGY, memory_split_place, study_task
from benchmarks.record import model_provenance, read_rows, rows_path
from benchmarks.runner import plan_record, run, within
from benchmarks.study import Arm, Judge, Study, Target, ratio_figure, worst_figure
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.errors import DreamshardError
from dreamshard.placement.heuristics import greedy_place
from dreamshard.placement.splitting import memory_splits
from dreamshard.placement.suites import make_suite, parse_suite_name


def test_loose_memory_holds_whole_tables_and_binding_memory_forces_splits():
    loose = study_task("wide-856", 0, 64, "loose")
    binding = study_task("wide-856", 0, 64, "binding")
    assert len(loose.tables) == len(binding.tables) == 856
    assert loose.tables == binding.tables and binding.memory_cap_bytes < loose.memory_cap_bytes
    assert memory_splits(loose) == ()
    assert memory_splits(binding)  # a table larger than a device at 1.2x the even share
    rows = [t.rows for t in loose.tables]
    pooling = [t.pooling_factor for t in loose.tables]
    assert 1e3 <= min(rows) < 1e4 and 1e7 < max(rows) <= 5e7  # the wide family's ranges
    assert 1 <= min(pooling) < 2 and 100 < max(pooling) <= 200
    assert {t.dim for t in loose.tables} == {8, 16, 32, 64, 128, 256}
    assert len(study_task("dlrm-428", 1, 16, "loose").tables) == 428
    assert {t.name for t in study_task("dlrm-856", 1, 16, "loose").tables} >= {
        t.name for t in study_task("dlrm-428", 1, 16, "loose").tables
    }


def test_a_planner_past_its_time_is_declined_not_waited_for():
    start = time.perf_counter()
    with pytest.raises(DreamshardError, match="no plan in 0.2 s"), within(0.2):
        time.sleep(5)
    assert time.perf_counter() - start < 2


def test_a_plan_is_judged_by_both_judges_and_a_slow_arm_declines():
    pytest.importorskip("torchrec")
    from dreamshard.integrations.torchrec_judge import torchrec_judge

    task = study_task("dlrm-428", 0, 16, "binding")
    backend = SimulatedBackend(topology=TOPOLOGY)
    judges = [
        Judge("simulated", lambda t, p: float(backend.overall_many(t, [p])[0])),
        Judge("torchrec", lambda t, p: torchrec_judge(t, p, TOPOLOGY)),
    ]
    arm = Arm("size_lookup", lambda t: memory_split_place(t, "size_lookup"))
    record, placement = plan_record(task, arm, judges)
    assert "declined" not in record and record["seconds"] > 0 and placement is not None
    assert sum(record["splits"].values()) == len(memory_splits(task)) > 0
    assert record["costs"]["simulated"][0] > 0 and record["costs"]["torchrec"][0] > 0
    slow, nothing = plan_record(task, Arm("slow", lambda t: time.sleep(5), seconds=0.2), judges)
    assert slow["declined"] == "no plan in 0.2 s" and nothing is None


class ToyStudy(Study):
    """Two heuristics on two small tasks, an exact judge and a noisy measured one."""

    def tasks(self, args):
        suite = make_suite(parse_suite_name("cpu-50x4", 1, 3))
        return list(suite.test_tasks)

    def arms(self, args):
        return [Arm(k, lambda t, k=k: greedy_place(t, k)) for k in ("dim", "size_lookup")]

    def judges(self, args):
        backend, rng = SimulatedBackend(), np.random.default_rng(0)
        exact = lambda t, p: backend.measure(t, p).overall  # noqa: E731

        def both(task, plans):  # a task's plans in one measurement, two figures of each
            return {
                arm: {"pair": exact(task, p), "pair cpu": 0.5 * exact(task, p)}
                for arm, p in plans.items()
            }

        return [
            Judge("exact", exact),
            Judge("measured", lambda t, p: exact(t, p) * rng.uniform(0.95, 1.05), rounds=3),
            Judge("pair", rounds=3, per_task=both, fills=("pair", "pair cpu")),
        ]

    def figures(self, rows):
        return {
            "exact": ratio_figure(rows, "size_lookup", "dim", "exact"),
            "measured": ratio_figure(rows, "size_lookup", "dim", "measured"),
            "worst": worst_figure(rows, "size_lookup", ("dim", "size_lookup"), "exact"),
        }


def toy_args(tmp_path, quick=False) -> argparse.Namespace:
    return argparse.Namespace(quick=quick, out=str(tmp_path / "results"), no_mlflow=True)


def test_a_run_plans_judges_measures_in_rounds_and_writes_its_rows(tmp_path, monkeypatch):
    monkeypatch.setenv("DREAMSHARD_HOME", str(tmp_path / "state"))
    toy = ToyStudy("toy", "A toy study", (Target("exact", at_most=0.99), Target("worst", 1.0)))
    assert run(toy, toy_args(tmp_path), ["--no-mlflow"]) == 0
    meta, rows = read_rows(rows_path("toy", tmp_path / "results"))
    assert meta["tasks"] == len(rows) == 3
    assert meta["judges"] == {"exact": 1, "measured": 3, "pair": 3, "pair cpu": 3}
    for row in rows:
        for plan in row["plans"].values():
            assert len(plan["costs"]["exact"]) == 1 and len(plan["costs"]["measured"]) == 3
            exact, measured = plan["costs"]["exact"][0], np.array(plan["costs"]["measured"])
            assert np.all(np.abs(measured / exact - 1) <= 0.05)  # the noise, never a copy
            assert plan["costs"]["pair"] == [exact] * 3  # a task's plans measured at once
            # the rows keep 9 significant digits (`record.ROWS_DIGITS`)
            assert plan["costs"]["pair cpu"] == pytest.approx([0.5 * exact] * 3, rel=1e-8)
    figures = toy.figures(rows)
    ratios = [
        r["plans"]["size_lookup"]["costs"]["exact"][0] / r["plans"]["dim"]["costs"]["exact"][0]
        for r in rows
    ]
    assert figures["exact"].value == pytest.approx(np.exp(np.mean(np.log(ratios))))
    assert figures["exact"].low <= figures["exact"].value <= figures["exact"].high
    assert figures["worst"].value == 1.0  # size_lookup is one of the two it is the best of
    report = (tmp_path / "results" / "toy.md").read_text()
    verdict = "met" if figures["exact"].high <= 0.99 else "not met"
    assert f"{figures['exact'].cell()}  {verdict}" in report
    assert not list((tmp_path / "state" / "studies" / "toy").glob("*.pickle"))  # done: no progress


def test_a_run_stopped_part_way_resumes_where_it_stopped(tmp_path, monkeypatch):
    monkeypatch.setenv("DREAMSHARD_HOME", str(tmp_path / "state"))
    planned = []

    class Stops(ToyStudy):
        def arms(self, args):
            def plan(task):
                planned.append(task.name)
                if len(planned) == 3:
                    raise KeyboardInterrupt  # the session ends on the third task
                return greedy_place(task, "dim")

            return [Arm("dim", plan)]

        def figures(self, rows):
            return {}

    study = Stops("stops", "Stops")
    with pytest.raises(KeyboardInterrupt):
        run(study, toy_args(tmp_path), [])
    first = list(planned)
    run(study, toy_args(tmp_path), [])
    assert planned[len(first) :] == first[2:]  # two tasks stored, the third planned again
    _, rows = read_rows(rows_path("stops", tmp_path / "results"))
    assert [r["task"] for r in rows] == first


def test_quick_writes_nothing_and_the_entry_point_refuses_in_one_line(tmp_path, capsys):
    toy = ToyStudy("toy", "A toy study")
    assert run(toy, toy_args(tmp_path, quick=True), ["--quick"]) == 0
    assert not (tmp_path / "results").exists()
    assert "# A toy study" in capsys.readouterr().out
    with pytest.raises(DreamshardError, match="no study 'nope'; choose one of ood, scale"):
        benchmarks_main(["run", "nope"])


def test_a_model_without_a_command_or_in_a_temporary_folder_is_refused(tmp_path):
    model = tmp_path / "model.pt"
    model.write_bytes(b"weights")
    with pytest.raises(DreamshardError, match="records no command"):
        model_provenance(model, "?")
    with pytest.raises(DreamshardError, match="temporary folder"):
        model_provenance(model, "dreamshard train --suite cpu-50x4")


def test_the_ood_study_judges_feasible_tasks_and_records_the_declines(tmp_path, monkeypatch):
    # giants seed 46: tables of up to 11 GiB on 4 devices of 15.7 GiB; no packing of them fits
    from benchmarks.ood import STUDY, OodStudy
    from benchmarks.report import render

    monkeypatch.setenv("DREAMSHARD_HOME", str(tmp_path / "state"))
    tasks = [ood_task("giants", 46), ood_task("correlated", 0)]
    monkeypatch.setattr(STUDY, "tasks", lambda args: tasks)
    args = argparse.Namespace(
        quick=False, out=str(tmp_path), no_mlflow=True, model="shipped", seeds=1, first_seed=0
    )
    run(STUDY, args, [])
    meta, rows = read_rows(rows_path("ood", tmp_path))
    infeasible, feasible = rows
    assert all("no legal placement" in p["declined"] for p in infeasible["plans"].values())
    assert "device_mape" not in infeasible and 0 <= feasible["device_mape"] < 0.2
    figure = STUDY.figures(rows)["all: dreamshard vs best heuristic"]
    assert figure.tasks == 1 and figure.value <= 1.0
    report = (tmp_path / "ood.md").read_text()
    assert "Tasks some arm declined (no whole-table placement): 1" in report
    fresh = OodStudy(STUDY.name, STUDY.title, STUDY.targets)  # never prepared, as `report` has it
    assert render(fresh, meta, rows)[0] == report  # the report is its rows' alone


def test_the_importer_rebuilds_a_runs_mlflow_run_once(tmp_path, monkeypatch):
    import benchmarks.__main__ as entry
    import benchmarks.record as record

    monkeypatch.setenv("DREAMSHARD_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    toy = ToyStudy("toy", "A toy study", (Target("exact", at_most=2.0),))
    run(toy, toy_args(tmp_path), [])
    monkeypatch.setattr(record, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(entry, "RESULTS", tmp_path / "results")
    monkeypatch.setitem(entry.STUDIES, "toy", "tests.test_studies:TOY")
    assert benchmarks_main(["import"]) == 0
    assert benchmarks_main(["import"]) == 0  # the second finds it there
    import mlflow

    runs = mlflow.search_runs(experiment_names=["dreamshard-study-toy"], output_format="list")
    assert len(runs) == 1
    meta, rows = read_rows(rows_path("toy", tmp_path / "results"))
    figure = toy.figures(rows)["exact"]
    assert runs[0].data.metrics["exact.high"] == pytest.approx(figure.high)
    assert runs[0].data.metrics["exact.met"] == 1.0
    assert runs[0].data.params["commit"] == meta["commit"]
    assert json.loads(runs[0].data.params["judges"]) == meta["judges"]


TOY = ToyStudy("toy", "A toy study", (Target("exact", at_most=2.0),))


def test_a_models_command_remakes_its_full_config_whatever_the_defaults(tmp_path, monkeypatch):
    """A model's command is rendered from the config its file records, every option spelled
    out: parsed by `dreamshard train`'s own parser it gives that config back, even after a
    default changed; a config recorded before an option existed gets no command."""
    from dataclasses import asdict, replace

    from benchmarks.parts.models import train_command
    from dreamshard.cli.main import build_parser
    from dreamshard.cli.train import config_from
    from dreamshard.learn.model_file import DreamShardModel
    from dreamshard.learn.train_config import TrainConfig

    config = replace(
        TrainConfig(),
        suite="cpu-16x3",
        out=str(tmp_path / "run"),
        iterations=3,
        lookahead=False,
        table_aware=True,
        warm_start_devices=(2, 4),
        finetune="all",
    )

    def command_of(recorded: dict) -> str:
        model = DreamShardModel(None, None, {"config": recorded, "history": []})
        return train_command(model)

    recorded = json.loads(json.dumps(asdict(config)))  # as a model file keeps it
    monkeypatch.setattr(TrainConfig, "iterations", 99)  # a default changes later
    words = command_of(recorded).split()
    assert words[:2] == ["dreamshard", "train"]
    again = config_from(build_parser().parse_args(words[1:]))
    assert asdict(again) == asdict(config)
    older = {k: v for k, v in recorded.items() if k != "finetune"}  # before --finetune existed
    assert command_of(older) == "?"
