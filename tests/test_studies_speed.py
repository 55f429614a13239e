"""The speed study (benchmarks/speed.py): an arm's plan made in a process of its own comes back
legal with its in-process time and peak memory; a process past its limit is a decline; the
figures and report read its rows alone."""

from __future__ import annotations

import argparse
import time

from benchmarks.runner import plan_record
from benchmarks.speed import OURS, STUDY, dlrm_task, speed_tasks
from dreamshard.placement.suites import SPEED_TASKS
from dreamshard.placement.tasks import check_legal


def study_args(**given) -> argparse.Namespace:
    options = {"model": "shipped", "repeats": 2, "seconds": 60.0, "tables_scale": 1.0}
    return argparse.Namespace(**(options | given))


def test_an_arm_plans_in_its_own_process_and_its_plan_comes_back_legal_and_judged():
    args = study_args()
    STUDY.prepare(args)
    assert STUDY.models["dreamshard"]["command"]  # the shipped ensemble, with its command
    arm = next(a for a in STUDY.arms(args) if a.name == OURS)
    task = dlrm_task("dlrm-40x4", 40, 4, 2**30)
    record, placement = plan_record(task, arm, STUDY.judges(args))
    check_legal(task, placement)
    assert record["median_s"] > 0 and record["first_s"] > 0 and record["peak_mb"] > 50
    assert record["seconds"] > record["median_s"]  # the process: imports, model, 3 plans
    assert record["costs"]["simulated"][0] > 0
    row = {"task": task.name, "plans": {OURS: record}} | STUDY.task_extra(task, {})
    figures = STUDY.figures([row])
    assert figures[f"{task.name}: {OURS} median s"].value == record["median_s"]
    assert figures[f"{task.name}: {OURS} peak MB"].value == record["peak_mb"]


def test_a_process_past_its_limit_is_a_decline_and_the_report_says_so():
    args = study_args(seconds=0.5)
    STUDY.prepare(args)
    arm = next(a for a in STUDY.arms(args) if a.name == OURS)
    task = dlrm_task("dlrm-40x4", 40, 4, 2**30)
    start = time.perf_counter()
    record, placement = plan_record(task, arm, STUDY.judges(args))
    assert placement is None and record["declined"] == "no plan in 0.5 s"
    assert time.perf_counter() - start < 3
    row = {"task": task.name, "plans": {OURS: record}} | STUDY.task_extra(task, {})
    assert "no plan in 0.5 s" in STUDY.details([row], STUDY.figures([row]))


def test_the_targets_name_the_speed_tasks_and_a_scaled_run_names_its_own():
    assert [t.name for t in speed_tasks(0.01)] == ["dlrm-9x1", "dlrm-100x10"]
    names = {name for name, *_ in SPEED_TASKS}
    assert {t.figure.split(":")[0] for t in STUDY.targets} == names
