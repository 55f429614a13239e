"""The one benchmark command at toy scale on the simulated backend: every planner, legal plans."""

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from test_learning import small_config

from dreamshard.learn.model_file import save_model
from dreamshard.learn.train import train
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import Placement, is_legal

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "compare_planners.py"
PLANNERS = [
    "random",
    "dim",
    "size",
    "lookup",
    "size_lookup",
    "torchrec",
    "torchrec (no reserve)",
    "rnn",
    "dreamshard",
    "dreamshard_search",
    "milp",
    "best_known",
]
SUITES = ["cpu-12x2"]  # the model (so the RNN) is trained on cpu-16x3: the RNN declines these


def load_script():
    sys.path.insert(0, str(SCRIPT.parent))  # its sibling modules, as when run as a script
    spec = importlib.util.spec_from_file_location("compare_planners", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.usefixtures("one_torch_thread")
def test_the_report_has_every_planner_and_every_placement_is_legal(tmp_path, monkeypatch):
    monkeypatch.setenv("DREAMSHARD_HOME", str(tmp_path / "state"))
    model_path = tmp_path / "model.pt"
    config = small_config(tmp_path, iterations=1, costnet_steps=20, policy_updates=2)
    save_model(train(config, log=lambda *_: None), model_path)  # structure, not quality
    out = tmp_path / "results" / "planners.md"
    report = load_script().main(
        [
            "--model",
            str(model_path),
            "--backend",
            "simulated",
            "--suites",
            ",".join(SUITES),
            "--tasks",
            "1",
            "--rounds",
            "2",
            "--search-budget",
            "3",
            "--rnn-updates",
            "5",
            "--milp-seconds",
            "5",
            "--out",
            str(out),
        ]
    )

    assert out.read_text() == report + "\n"
    for planner in PLANNERS:  # one row per suite table, a planner's name first
        assert len(re.findall(rf"^{re.escape(planner)}  ", report, re.MULTILINE)) == len(SUITES)
    assert "n/a: trained for 3 devices" in report

    data = json.loads(out.with_suffix(".json").read_text())
    assert data["planners"] == PLANNERS
    tasks = {t.name: t for s in SUITES for t in make_suite(parse_suite_name(s, 1, 1)).test_tasks}
    assert [t["name"] for t in data["tasks"]] == list(tasks)
    for record in data["tasks"]:
        task, results = tasks[record["name"]], record["results"]
        assert results["rnn"]["declined"] == "n/a: trained for 3 devices"
        for planner in (
            "random",
            "dim",
            "size",
            "lookup",
            "size_lookup",
            "dreamshard",
            "dreamshard_search",
            "best_known",
        ):
            assert "placement" in results[planner], planner
        for planner, result in results.items():
            if "declined" in result:
                continue
            assert is_legal(task, Placement(tuple(result["placement"]))), planner
            assert len(result["costs_ms"]) == 2 and min(result["costs_ms"]) > 0
        search = data["best_known_search"][task.name]
        assert search["measured"] <= 3 and search["start"] in PLANNERS
    assert out.with_suffix(".csv").read_text().startswith("task,planner,round,overall_ms")
