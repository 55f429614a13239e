"""Planning at scale: the split choice finishes at thousands of tables, and a time budget always
ends in a legal plan, the best found so far."""

from __future__ import annotations

import signal
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from conftest import generated_tables, place_command

from dreamshard.learn.model_file import load_model
from dreamshard.learn.policy import fast_rollout
from dreamshard.placement.budget import Deadline
from dreamshard.placement.registry import place
from dreamshard.placement.splitting import memory_splits
from dreamshard.placement.suites import capped_task
from dreamshard.placement.tasks import GIB, PlacementTask, placement_problem
from dreamshard.planners.dreamshard_planner import dreamshard_place
from dreamshard.tables.synthetic import generate_tables

TINY_BUDGET = 1e-9  # passed before the planner looks: only what comes before any check is left


@contextmanager
def completes_within(seconds: int):
    """Fail the test, rather than hang the suite, when the body does not finish in time."""

    def expire(*_):
        raise TimeoutError(f"did not finish in {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def wide_task() -> PlacementTask:
    """2000 dlrm tables on 256 devices of 8 GiB: tables the balance rule splits by the dozen."""
    return PlacementTask(tuple(generate_tables("dlrm", 2000, 7)), 256, 8 * GIB, "fp16")


@pytest.fixture(scope="module")
def model(toy_model_path):
    return load_model(toy_model_path)


def test_split_choice_completes_at_2000_tables_on_256_devices(wide_task):
    with completes_within(300):
        placement = place(wide_task, "size_lookup", split="auto")
    assert placement_problem(wide_task, placement) is None
    assert len(placement.splits) > len(memory_splits(wide_task))  # the rule split tables


@pytest.mark.parametrize("method", ["size_lookup", "search_analytic", "dreamshard"])
def test_an_expired_budget_still_answers_with_a_legal_plan(wide_task, model, method):
    placement = place(wide_task, method, model=model, split="auto", time_budget=TINY_BUDGET)
    assert placement_problem(wide_task, placement) is None


def test_the_policy_gives_up_when_its_deadline_passes_and_the_heuristics_answer(model):
    task = capped_task(list(generate_tables("cpu", 120, 3)), 8, "cpu-120x8")
    passed = Deadline.after(TINY_BUDGET)
    assert fast_rollout(model.policy, task, model.costnet, 1, 4, None, passed) is None
    placement = dreamshard_place(task, model, samples=4, deadline=passed)
    assert placement_problem(task, placement) is None
    assert placement.candidate.startswith("heuristic ")


def test_an_ample_budget_plans_exactly_as_no_budget(model):
    task = capped_task(list(generate_tables("cpu", 60, 5)), 4, "cpu-60x4")
    unbounded = dreamshard_place(task, model, samples=4, seed=2)
    budgeted = place(task, "dreamshard", 2, model=model, samples=4, split="none")
    assert budgeted.devices == unbounded.devices
    ample = Deadline.after(3600.0)
    generator = torch.Generator().manual_seed(2)
    timed = fast_rollout(model.policy, task, model.costnet, 1, 4, generator, ample)
    again = fast_rollout(model.policy, task, model.costnet, 1, 4, torch.Generator().manual_seed(2))
    assert np.array_equal(timed.devices, again.devices)


def test_place_takes_a_time_budget_and_refuses_a_bad_one(cli, tmp_path):
    tables = generated_tables(tmp_path / "t.json", 40)
    done = cli(*place_command(tables, 4, 1, "--method", "search_analytic", "--time-budget", "0.5"))
    assert done.returncode == 0, done.stderr
    assert "planned in" in done.stdout
    refused = cli(*place_command(tables, 4, 1, "--time-budget", "-1"))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "--time-budget: must be positive" in refused.stderr
