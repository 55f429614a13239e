"""The ablation study (benchmarks/ablation.py) on the runner at toy size: every part of the
default planner plans every task legally and is judged, the heuristics' per-task best is the
floor of their ratios, and the report is the rows' alone."""

from __future__ import annotations

from benchmarks.__main__ import main as benchmarks_main
from benchmarks.ablation import FBGEMM, REFERENCE, STUDY
from benchmarks.parts.ood_families import ood_task
from benchmarks.record import file_hash, read_rows, rows_path
from benchmarks.runner import render
from dreamshard.learn.shipped import SHIPPED_DIR, shipped_manifest
from dreamshard.placement.suites import make_suite, parse_suite_name


def test_the_ablation_plans_and_judges_every_part_on_every_task(tmp_path, monkeypatch):
    monkeypatch.setenv("DREAMSHARD_HOME", str(tmp_path / "state"))
    tasks = [make_suite(parse_suite_name("cpu-50x4", 1, 1)).test_tasks[0], ood_task("bimodal", 0)]
    monkeypatch.setattr(STUDY, "tasks", lambda args: tasks)
    shipped = SHIPPED_DIR / "model.pt"  # the trained model's place: one with a command
    argv = ["run", "ablation", "--out", str(tmp_path), "--no-mlflow", "--model", str(shipped)]
    assert benchmarks_main(argv) == 0
    meta, rows = read_rows(rows_path("ablation", tmp_path))
    assert meta["judges"] == {"simulated": 1} and [r["task"] for r in rows] == [
        t.name for t in tasks
    ]
    command = shipped_manifest()["command"]
    assert {m["command"] for m in meta["models"].values()} == {command}
    assert meta["models"]["trained"]["sha256"] == file_hash(shipped)
    arms = list(rows[0]["plans"])
    assert arms[:4] == list(REFERENCE) and "default planner, shipped model" in arms
    assert "search_analytic" in arms and len(arms) == 13
    for row in rows:
        costs = {}
        for arm, plan in row["plans"].items():
            assert "declined" not in plan and "judge_declined" not in plan, (row["task"], arm)
            assert plan["seconds"] > 0 and not plan.get("splits")  # whole tables, every one
            (costs[arm],) = plan["costs"]["simulated"]
            assert costs[arm] > 0
        best = min(costs[arm] for arm in REFERENCE)
        # the default planner weighs the heuristics' own plans too: never far above their best
        assert costs["default planner"] <= 1.05 * best
        distinct = row["distinct"]
        assert sorted(a for group in distinct["arms"] for a in group) == sorted(arms)
        for group in distinct["arms"]:  # plans alike are judged alike
            assert len({costs[arm] for arm in group}) == 1
        assert all(len(distinct[m]) == len(distinct["arms"]) for m in ("trained", "shipped"))
        assert min(distinct["trained"] + distinct["shipped"]) > 0
    figures = STUDY.figures(rows)
    for arm in REFERENCE:
        assert figures[f"{arm} vs best heuristic"].value >= 1.0
        assert figures[f"{arm}: worst task"].value >= 1.0
    whole = figures["default planner vs best heuristic"]
    assert whole.tasks == 2 and whole.low <= whole.value <= whole.high
    assert figures["default planner: worst task"].value >= whole.value
    spearman = figures["shipped cost network: within-task Spearman"]
    assert spearman.tasks >= 1 and -1 <= spearman.value <= 1
    # the real-kernel run's targets name figures the same rows make
    assert {t.figure for t in FBGEMM.targets} <= set(figures)
    report = (tmp_path / "ablation.md").read_text()
    assert report == render(STUDY, meta, rows)[0]  # the report is the rows' alone
    assert "default planner, shipped model" in report and "worst task" in report
    assert not list((tmp_path / "state" / "ablation").glob("*"))  # --model: nothing trained
