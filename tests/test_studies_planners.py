"""The planners study (benchmarks/planners.py): its references and targets on hand-made rows
with hand-computed values, the best known search budget named only where it searched, every
arm at toy size on the simulated backend, `--planners`, and the model it trains kept in the
state folder."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
import pytest

import benchmarks.planners as planners
from benchmarks.__main__ import main as benchmarks_main
from benchmarks.planners import EVERY_SUITE, STUDY
from benchmarks.record import read_rows, rows_path
from benchmarks.report import render
from dreamshard.errors import DreamshardError

# per suite, per task: each arm's cost (the same in both rounds); random declined one task
COSTS = {
    "s1/test/0": dict(dim=10, size=12, lookup=11, size_lookup=13, search_analytic=9, dreamshard=9),
    "s1/test/1": dict(dim=10, size=9, lookup=12, size_lookup=12, search_analytic=8, dreamshard=8),
    "s2/test/0": dict(
        dim=20, size=16, lookup=18, size_lookup=17, search_analytic=15, dreamshard=16
    ),
    "s2/test/1": dict(
        dim=20, size=20, lookup=19, size_lookup=16, search_analytic=15, dreamshard=12
    ),
}


def hand_rows(best_known: bool = False) -> list[dict]:
    rows = []
    for task, by_arm in COSTS.items():
        plans = {"random": {"declined": "no room: a reason", "costs": {}}}
        if task != "s1/test/1":
            plans["random"] = {"seconds": 0.1, "costs": {"fbgemm": [30.0, 30.0]}}
        plans |= {a: {"seconds": 0.1, "costs": {"fbgemm": [c, c]}} for a, c in by_arm.items()}
        if best_known:
            search = {"start": "search_analytic", "steps": 2, "measured": 3}
            cost = by_arm["search_analytic"]
            plans["best_known"] = {"seconds": 1, "costs": {"fbgemm": [cost] * 2}, "search": search}
            plans["best_known"]["budget"] = 3
        rows.append({"task": task, "plans": plans})
    return rows


def geomean(*ratios: float) -> float:
    return float(np.exp(np.mean(np.log(ratios))))


def test_the_references_are_each_suites_own_and_every_target_reads_its_figure():
    figures = STUDY.figures(hand_rows())
    # strongest fixed heuristic: s1's dim (mean 10), s2's size_lookup (16.5); per suite
    assert figures["all: dreamshard vs strongest fixed heuristic"].value == pytest.approx(
        geomean(9 / 10, 8 / 10, 16 / 17, 12 / 16)
    )
    assert figures["s2: dreamshard vs strongest fixed heuristic"].tasks == 2
    # the per-task best heuristic: dim, size; size, size_lookup
    assert figures["s1: dreamshard vs per-task best heuristic"].value == pytest.approx(
        geomean(9 / 10, 8 / 9)
    )
    worst = figures[EVERY_SUITE]  # s2's interval reaches 1.0, s1's 0.9
    assert worst.value == pytest.approx(geomean(1.0, 0.75)) and worst.high == pytest.approx(1.0)
    # the best known: per task the cheapest plan of any arm (random's decline left out)
    assert figures["all: dreamshard vs best known"].value == pytest.approx(
        geomean(1, 1, 16 / 15, 1)
    )
    assert figures["all: dreamshard vs search_analytic"].value == pytest.approx(
        geomean(1, 1, 16 / 15, 12 / 15)
    )
    assert figures["all: random vs strongest fixed heuristic"].tasks == 3
    assert "all: dreamshard_refined vs strongest fixed heuristic" not in figures  # not run


def meta() -> dict:
    return {
        "command": "x",
        "commit": "abc",
        "date": "2026-01-01",
        "minutes": 1.0,
        "hardware": "cpu",
        "versions": {},
        "tasks": 4,
        "judges": {"fbgemm": 2},
        "models": {},
    }


def test_the_search_budget_is_named_only_where_the_best_known_search_ran():
    report, found = render(STUDY, meta(), hand_rows())
    assert "search budget" not in report.lower()
    assert "s1: 2 test tasks, strongest fixed heuristic dim" in report
    assert "s2: 2 test tasks, strongest fixed heuristic size_lookup" in report
    verdicts = {v["figure"]: v for v in found}
    assert not verdicts[EVERY_SUITE]["met"]  # s2 reaches 1.0, past 0.97
    refined = verdicts["all: dreamshard_refined vs strongest fixed heuristic"]
    assert refined["cell"] == "-" and not refined["met"]  # an arm not run meets nothing
    report, _ = render(STUDY, meta(), hand_rows(best_known=True))
    assert "Best known search budget 3 measurements per task" in report


OPTIONS = ["--backend", "simulated", "--suites", "cpu-12x2", "--tasks", "2", "--rounds", "2"]


@pytest.mark.usefixtures("one_torch_thread")
def test_every_arm_plans_the_toy_suite_and_the_rounds_measure_each_plan(tmp_path, monkeypatch):
    monkeypatch.setenv("DREAMSHARD_HOME", str(tmp_path / "state"))
    more = ["--search-budget", "3", "--refine-seconds", "1", "--no-mlflow", "--out", str(tmp_path)]
    assert benchmarks_main(["run", "planners", *OPTIONS, *more]) == 0
    meta, rows = read_rows(rows_path("planners", tmp_path))
    assert meta["models"]["planner"]["command"].startswith("dreamshard pretrain")
    assert [r["task"] for r in rows] == ["cpu-12x2/test/0", "cpu-12x2/test/1"]
    for row in rows:  # the runner checks each plan legal before it records it
        plans = row["plans"]
        assert list(plans) == [
            "random",
            "dim",
            "size",
            "lookup",
            "size_lookup",
            *planners.OPTIONAL[:3],
            "dreamshard",
            *planners.OPTIONAL[3:],
        ]
        for arm, plan in plans.items():
            assert "declined" in plan or min(plan["costs"]["simulated"]) > 0, arm
            assert arm.startswith("torchrec") or "declined" not in plan, arm
        search = plans["best_known"]["search"]
        assert search["measured"] <= 3 and search["starts"].startswith("search_analytic")
        assert plans["dreamshard_refined"]["refine"]["rounds"] >= 3
    report = (tmp_path / "planners.md").read_text()
    for target in STUDY.targets:
        assert f"\n{target.figure} " in report
    assert "Best known search budget 3 measurements per task" in report


@pytest.mark.usefixtures("one_torch_thread")
def test_planners_leave_the_other_arms_out_and_an_unknown_one_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("DREAMSHARD_HOME", str(tmp_path / "state"))
    chosen = ["--planners", "dreamshard (split auto)", "--no-mlflow", "--out", str(tmp_path)]
    assert benchmarks_main(["run", "planners", *OPTIONS, *chosen]) == 0
    _, rows = read_rows(rows_path("planners", tmp_path))
    whole = ["random", "dim", "size", "lookup", "size_lookup", "dreamshard"]
    assert list(rows[0]["plans"]) == [*whole, "dreamshard (split auto)"]
    report = (tmp_path / "planners.md").read_text()
    assert "search budget" not in report.lower()
    figure = STUDY.figures(rows)["all: dreamshard (split auto) vs strongest fixed heuristic"]
    assert figure.tasks == 2 and f"{figure.cell()}" in report
    with pytest.raises(DreamshardError, match="unknown lookahead"):
        benchmarks_main(["run", "planners", "--quick", *OPTIONS, "--planners", "lookahead"])


def test_a_model_the_study_trains_is_kept_in_the_state_folder_and_found_again(
    tmp_path, monkeypatch, toy_model_path
):
    monkeypatch.setenv("DREAMSHARD_HOME", str(tmp_path / "state"))
    configs = []

    def train_for_run(config, log):
        configs.append(config)
        Path(config.out).mkdir(parents=True)
        shutil.copy(toy_model_path, Path(config.out) / "model.pt")
        return None, "trained"

    monkeypatch.setattr(planners, "train_for_run", train_for_run)
    parser = argparse.ArgumentParser()
    STUDY.options(parser)
    args = parser.parse_args(["--train", "--backend", "simulated", "--train-iterations", "2"])
    path = planners.trained(args)
    assert path.parent.parent == tmp_path / "state" / "planners" and path.is_file()
    (config,) = configs
    assert (config.suite, config.backend, config.iterations) == ("cpu-50x4", "simulated", 2)
    assert config.out == str(path.parent)
    assert planners.trained(args) == path and len(configs) == 1  # a rerun finds it
    args.train_iterations = 3
    assert planners.trained(args) != path and len(configs) == 2  # another config, another model
    with pytest.raises(DreamshardError, match="temporary folder"):  # never a model in /tmp
        planners.studied_model(str(path))
