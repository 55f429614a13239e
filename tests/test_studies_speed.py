"""The speed study (benchmarks/speed.py): an arm's plan made in a process of its own comes back
legal with its in-process time and peak memory; a process past its limit is a decline; the
figures and report read its rows alone."""

from __future__ import annotations

import argparse
import time

import pytest

from benchmarks.runner import plan_record
from benchmarks.speed import OURS, STUDY, dlrm_task, speed_tasks
from dreamshard.costs.hardware import load_hardware
from dreamshard.costs.simulated import SimulatedBackend
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
    assert [t.name for t in speed_tasks(0.01)] == [
        "dlrm-9x1",
        "dlrm-100x10",
        "dlrm-9x1 h100-sxm",
        "dlrm-100x10 h100-sxm",
    ]
    names = {f"{name}{hw}" for name, *_ in SPEED_TASKS for hw in ("", " h100-sxm")}
    assert {t.figure.split(":")[0] for t in STUDY.targets} == names


def test_a_task_for_a_gpu_file_is_planned_and_judged_for_it():
    args = study_args(repeats=1)
    STUDY.prepare(args)
    arms = {a.name: a for a in STUDY.arms(args)}
    task = dlrm_task("dlrm-40x16 h100-sxm", 40, 16, 2**30)
    record, placement = plan_record(task, arms[OURS], STUDY.judges(args))
    check_legal(task, placement)
    gpu = SimulatedBackend(hardware=load_hardware("h100-sxm"))
    assert record["costs"]["simulated"][0] == pytest.approx(gpu.overall_many(task, [placement])[0])
    assert record["costs"]["simulated"][0] != pytest.approx(
        SimulatedBackend().overall_many(task, [placement])[0]
    )
    declined, _ = plan_record(task, arms["torchrec table-wise"], STUDY.judges(args))
    assert "not run for a GPU file" in declined["declined"]
    assert STUDY.task_extra(task, {})["hardware"] == "h100-sxm"
