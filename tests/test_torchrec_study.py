"""The torchrec study (benchmarks/torchrec.py): its arms on a held-out task, one launch for both
DMP clocks of a plan, and its figures from rows alone. Its real DMP steps: `python -m benchmarks
run torchrec --quick` (minutes)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from benchmarks.runner import plan_record
from benchmarks.torchrec import DEFAULTS, DMP, DMP_CPU, OURS, PROXY, STUDY
from dreamshard.placement.registry import place
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import check_legal


def study_args(**options) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    STUDY.options(parser)
    return parser.parse_args([f"--{k}={v}" for k, v in options.items()])


def test_every_arm_plans_a_held_out_task_and_torchrecs_defaults_read_back_as_ours():
    pytest.importorskip("torchrec")
    args = study_args(suites="cpu-24x2", tasks=1)
    STUDY.prepare(args)
    assert STUDY.models["dreamshard"]["command"]  # the shipped model's
    [task] = STUDY.tasks(args)
    assert task.name == "cpu-24x2/test/0" and task.num_devices == 2
    plans, records = {}, {}
    for arm in STUDY.arms(args):
        records[arm.name], placement = plan_record(task, arm, [])
        assert "declined" not in records[arm.name], (arm.name, records[arm.name])
        check_legal(task, placement)
        plans[arm.name] = placement
    assert records[DEFAULTS]["torchrec types"] == ["data_parallel", "table_wise"]
    assert plans[DEFAULTS].splits and {s.kind for s in plans[DEFAULTS].splits} == {"replica"}
    same = STUDY.task_extra(task, plans)["same"]
    assert all(plans[arm] == plans[first] for arm, first in same.items())


def test_a_tasks_plans_take_one_launch_a_round_for_both_clocks():
    class Run:
        def __init__(self, count):
            self.count = count

        def overall(self, clock):
            wall = np.arange(1.0, self.count + 1) * 10
            return (wall if clock == "wall" else wall * 0.7)[None, :]

    launches = []

    class Backend:
        def measure_plans(self, task, plans, rounds):
            launches.append((len(plans), rounds))
            return Run(len(plans))

    task = make_suite(parse_suite_name("cpu-24x2", 1, 1)).test_tasks[0]
    STUDY.backend = Backend()
    dmp = STUDY.judges(study_args(rounds=3))[0]
    assert dmp.rounds == 3 and dmp.names() == (DMP, DMP_CPU)
    plans = {key: place(task, key, split="none") for key in ("dim", "size")}
    plans["again"] = plans["dim"]  # the same placement as dim's: trained once
    found = dmp.per_task(task, plans)
    assert launches == [(2, 1)]  # one launch, the distinct plans, one round
    assert found["dim"] == found["again"] == {DMP: 10.0, DMP_CPU: 7.0}
    assert found["size"] == {DMP: 20.0, DMP_CPU: 14.0}


def row(task: str, dmp: dict, proxy: dict, same: dict | None = None) -> dict:
    plans = {
        arm: {"seconds": 0.1, "costs": {DMP: ms, DMP_CPU: [m * 0.9 for m in ms], PROXY: [p]}}
        for (arm, ms), p in zip(dmp.items(), proxy.values())
    }
    return {"task": task, "plans": plans, "same": same or {}}


def test_the_figures_come_from_rows_alone():
    rows = [
        row(
            f"cpu-{n}x2/test/0",
            {OURS: [9.0, 9.0], DEFAULTS: [10.0, 10.0], "lookup": [12.0, 11.0], "dim": [12, 11]},
            {OURS: 1.0, DEFAULTS: 2.0, "lookup": 3.0, "dim": 3.0},
            same={"dim": "lookup"},  # dim's plan is lookup's: ranked once
        )
        for n in (24, 48)
    ]
    figures = STUDY.figures(rows)
    assert figures["dreamshard vs TorchRec's planner (its step)"].value == pytest.approx(0.9)
    assert figures[f"{OURS} vs {DEFAULTS}, {DMP_CPU}, cpu-48x2"].value == pytest.approx(0.9)
    assert figures[f"fbgemm Spearman with {DMP}, per task"].value == pytest.approx(1.0)
    assert figures["paired-ratio spread over rounds"].value == pytest.approx(0.0)
    text = STUDY.details(rows, figures)
    assert "cpu-24x2" in text and "1.00 per task" in text
