"""The one benchmark command at toy scale on the simulated backend: every planner, legal plans,
the issue's target lines, and a killed run resumed without measuring anything twice."""

import json
import re
from pathlib import Path

import pytest
from conftest import load_benchmark

from dreamshard.errors import DreamshardError
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import Placement, is_legal
from dreamshard.tables.shards import Split

PLANNERS = [
    "random",
    "dim",
    "size",
    "lookup",
    "size_lookup",
    "torchrec",
    "torchrec (no reserve)",
    "rnn",
    "search_analytic",
    "dreamshard",
    "dreamshard (split auto)",
    "dreamshard_search",
    "dreamshard_refined",
    "milp",
    "best_known",
]
SUITES = ["cpu-12x2"]  # the model (so the RNN) is trained on cpu-16x3: the RNN declines these
TARGETS = [  # the target lines: (comparison, over)
    ("dreamshard vs the strongest fixed heuristic", "all tasks"),
    ("dreamshard vs the per-task best heuristic", "cpu-12x2"),
    ("dreamshard vs the per-task best heuristic", "all tasks"),
    ("dreamshard vs search_analytic", "all tasks"),
    ("dreamshard vs the best known", "all tasks"),
    ("dreamshard_refined vs the strongest fixed heuristic", "all tasks"),
    ("dreamshard (split auto) vs the strongest fixed heuristic", "all tasks"),
]


def arguments(toy_model_path, out, tasks=1, *more):
    return [
        "--model",
        str(toy_model_path),
        "--backend",
        "simulated",
        "--suites",
        ",".join(SUITES),
        "--tasks",
        str(tasks),
        "--rounds",
        "2",
        "--search-budget",
        "3",
        "--rnn-updates",
        "5",
        "--milp-seconds",
        "5",
        "--refine-seconds",
        "5",
        "--out",
        str(out),
        *more,
    ]


@pytest.mark.usefixtures("one_torch_thread")
def test_the_report_has_every_planner_and_every_placement_is_legal(
    tmp_path, monkeypatch, toy_model_path
):
    monkeypatch.setenv("DREAMSHARD_HOME", str(tmp_path / "state"))
    out = tmp_path / "results" / "planners.md"
    report = load_benchmark("compare_planners").main(arguments(toy_model_path, out))

    assert out.read_text() == report + "\n"
    for planner in PLANNERS:  # one row per suite table, a planner's name first
        assert len(re.findall(rf"^{re.escape(planner)}  ", report, re.MULTILINE)) == len(SUITES)
    assert "n/a: trained for 3 devices" in report
    for comparison, over in TARGETS:  # ratio, its interval, the target and whether it is met
        line = rf"^{re.escape(comparison)} +{re.escape(over)} +[\d.]+x +[\d.]+-[\d.]+ .*(yes|no)$"
        assert re.search(line, report, re.MULTILINE), (comparison, over)

    data = json.loads(out.with_suffix(".json").read_text())
    assert data["planners"] == PLANNERS
    tasks = {t.name: t for s in SUITES for t in make_suite(parse_suite_name(s, 1, 1)).test_tasks}
    assert [t["name"] for t in data["tasks"]] == list(tasks)
    for record in data["tasks"]:
        task, results = tasks[record["name"]], record["results"]
        assert results["rnn"]["declined"] == "n/a: trained for 3 devices"
        for planner in set(PLANNERS) - {"rnn", "torchrec", "milp", "torchrec (no reserve)"}:
            assert "placement" in results[planner], planner
        for planner, result in results.items():
            if "declined" in result:
                continue
            splits = tuple(Split(**split) for split in result["splits"])
            assert is_legal(task, Placement(tuple(result["placement"]), splits=splits)), planner
            assert len(result["costs_ms"]) == 2 and min(result["costs_ms"]) > 0
        search = data["best_known_search"][task.name]
        assert search["measured"] <= 3 and search["start"] in PLANNERS
        assert search["starts"][0] == "search_analytic"  # the issue: start from its plan
        refined = data["refinement"][task.name]
        # refinement starts from the planner's own pick, the placement of the dreamshard row
        assert refined["rounds"] >= 3
        assert refined["candidates"][0] == results["dreamshard"]["candidate"]
        assert refined["measured"] == refined["rounds"] * len(refined["candidates"])
    assert data["measurements"]["refinement"] == sum(
        r["measured"] for r in data["refinement"].values()
    )
    assert out.with_suffix(".csv").read_text().startswith("task,planner,round,overall_ms")


class Killed(Exception):
    """Stands for the process being killed in the middle of a measurement."""


class CountingBackend:
    """The simulated backend, counting its measurements, killed after `alive` of them."""

    def __init__(self, backend, calls: list, alive: int | None):
        self.backend, self.calls, self.alive, self.name = backend, calls, alive, backend.name

    def config(self) -> dict:
        return self.backend.config()

    def measure(self, task, placement):
        if self.alive is not None and self.alive <= 0:
            raise Killed
        self.alive = None if self.alive is None else self.alive - 1
        self.calls.append((task.name, placement.devices))
        return self.backend.measure(task, placement)


@pytest.mark.usefixtures("one_torch_thread")
def test_a_killed_run_resumes_without_measuring_anything_twice(
    tmp_path, monkeypatch, toy_model_path
):
    script = load_benchmark("compare_planners")
    real = script.make_backend

    def session(home: str, alive: int | None = None, *more: str) -> tuple[list, Path]:
        monkeypatch.setenv("DREAMSHARD_HOME", str(tmp_path / home))
        calls: list = []
        monkeypatch.setattr(
            script, "make_backend", lambda n: CountingBackend(real(n), calls, alive)
        )
        out = tmp_path / home / "planners.md"
        try:
            script.main(arguments(toy_model_path, out, 2, *more))
        except Killed:
            pass
        return calls, out

    whole, whole_out = session("whole")  # uninterrupted, for what a run measures
    counts = json.loads(whole_out.with_suffix(".json").read_text())["measurements"]
    planning = counts["screening and search"] + counts["refinement"]
    rounds = counts["interleaved rounds"]
    assert len(whole) == planning + rounds

    # killed while planning the tasks, then while measuring the rounds, then run to the end
    first, _ = session("resumed", planning // 2)
    second, _ = session("resumed", planning - planning // 2 + rounds // 2, "--resume")
    third, out = session("resumed", None, "--resume")
    assert len(first) == planning // 2 and len(third) == rounds - rounds // 2
    assert sorted(first + second + third) == sorted(whole)  # the same work, none of it twice

    def results(path: Path) -> list:
        tasks = json.loads(path.with_suffix(".json").read_text())["tasks"]
        return [
            {p: (r.get("placement"), r.get("costs_ms")) for p, r in t["results"].items()}
            for t in tasks
        ]

    assert results(out) == results(whole_out)
    read_back = json.loads(out.with_suffix(".json").read_text())["measurements"]
    assert read_back["read back (--resume)"] > 0


def test_a_resumed_run_places_as_the_killed_one_did(tmp_path):
    """Time-limited and measured searches need not repeat a placement: the stored one is kept."""
    load_benchmark("compare_planners")
    from benchmarks.parts.stored import PlanStore
    from dreamshard.errors import DreamshardError

    task = make_suite(parse_suite_name("cpu-12x2", 1, 1)).test_tasks[0]
    path, settings = tmp_path / "plans.json", {"search_budget": 40}
    killed = PlanStore(path, settings, resume=False)
    calls, log = [], killed.log("best_known")

    def changing(task, seed):  # its placement changes from call to call; it logs a search
        calls.append(seed)
        log[task.name] = {"steps": len(calls)}
        return Placement(tuple((i + len(calls)) % 2 for i in range(len(task.tables))), "x")

    def declining(task, seed):
        calls.append(seed)
        raise DreamshardError("n/a: not for this task")

    first = killed.planner("changing", changing)(task, 0)
    with pytest.raises(DreamshardError, match="n/a"):
        killed.planner("declining", declining)(task, 0)

    resumed = PlanStore(path, settings, resume=True)
    assert resumed.planner("changing", changing)(task, 0) == first
    with pytest.raises(DreamshardError, match="n/a"):
        resumed.planner("declining", declining)(task, 0)
    assert len(calls) == 2 and resumed.log("best_known") == {task.name: {"steps": 1}}
    PlanStore(path, settings, resume=False).planner("changing", changing)(task, 0)
    assert len(calls) == 3  # without --resume, planned afresh

    with pytest.raises(DreamshardError, match="search_budget"):
        PlanStore(path, {"search_budget": 20}, resume=True)


@pytest.mark.usefixtures("one_torch_thread")
def test_planners_chosen_leave_the_others_out_and_keep_their_target(
    tmp_path, monkeypatch, toy_model_path
):
    monkeypatch.setenv("DREAMSHARD_HOME", str(tmp_path / "state"))
    out = tmp_path / "planners.md"
    chosen = ["--planners", "dreamshard (split auto)"]
    report = load_benchmark("compare_planners").main(arguments(toy_model_path, out, 1, *chosen))

    data = json.loads(out.with_suffix(".json").read_text())
    assert data["planners"] == [*PLANNERS[:5], "dreamshard", "dreamshard (split auto)"]
    assert data["measurements"].get("refinement", 0) == 0 and not data["best_known_search"]
    line = r"^dreamshard \(split auto\) vs the strongest fixed heuristic +all tasks .*(yes|no)$"
    assert re.search(line, report, re.MULTILINE)
    assert "vs search_analytic" not in report  # a reference the run does not have

    with pytest.raises(DreamshardError, match="unknown lookahead"):
        load_benchmark("compare_planners").main(
            arguments(toy_model_path, out, 1, "--planners", "lookahead")
        )
