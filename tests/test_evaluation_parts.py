"""The evaluation's parts, as a benchmark that measures more in the same rounds composes them:
the same `Evaluation` as `evaluate`, identical placements measured once a round, and the
figures reports print from it (a planner against another, per suite, bootstrap intervals)."""

import numpy as np
import pytest

from benchmarks.parts.ratio_tables import interval_cell, placed_mean
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.evaluation.evaluate import distinct_items, evaluate, evaluation_of, place_all
from dreamshard.evaluation.rounds import bootstrap_paired, measure_costs
from dreamshard.placement.heuristics import greedy_place, random_place
from dreamshard.placement.suites import make_suite, parse_suite_name


class Declined(Exception):
    pass


def planners():
    def picky(task, seed):  # declines the second task
        if task.name.endswith("/1"):
            raise Declined("not this one")
        return greedy_place(task, "lookup")

    return {
        "random": lambda task, seed: random_place(task, seed),
        "lookup": lambda task, seed: greedy_place(task, "lookup"),
        "also lookup": lambda task, seed: greedy_place(task, "lookup"),  # identical placements
        "dim": lambda task, seed: greedy_place(task, "dim"),
        "picky": picky,
    }


class Counting(SimulatedBackend):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def measure(self, task, placement):
        self.calls += 1
        return super().measure(task, placement)


def test_the_parts_give_evaluates_evaluation_and_measure_each_placement_once_a_round():
    tasks = make_suite(parse_suite_name("cpu-12x2", 1, 3)).test_tasks
    whole = evaluate(tasks, planners(), SimulatedBackend(), rounds=2, declines=(Declined,))

    placed = place_all(tasks, planners(), (Declined,))
    items, index = distinct_items(tasks, placed[0])
    extra = [(tasks[0], greedy_place(tasks[0], "size"))]  # measured in the same rounds
    backend = Counting()
    costs = measure_costs(backend, [*items, *extra], rounds=2)
    parts = evaluation_of(
        tasks, list(planners()), placed, [r[: len(items)] for r in costs], index, backend
    )

    assert backend.calls == 2 * (len(items) + 1)
    assert len(items) < sum(p is not None for row in placed[0] for p in row)  # "also lookup"
    np.testing.assert_allclose(parts.costs, whole.costs)  # exact costs: the same figures
    assert parts.declined == whole.declined == {(1, 4): "not this one"}
    assert parts.strongest_heuristic() == whole.strongest_heuristic()


def test_a_planner_against_another_counts_the_tasks_both_placed():
    tasks = make_suite(parse_suite_name("cpu-12x2", 1, 3)).test_tasks
    evaluation = evaluate(tasks, planners(), SimulatedBackend(), rounds=2, declines=(Declined,))
    pair = evaluation.pair("picky", "random")
    assert (pair["tasks_placed"], pair["tasks"]) == (2, 3) and pair["per_task"][1] is None
    ratios = evaluation.ratios("random")[:, evaluation.planners.index("picky")]
    assert pair["ratio"] == pytest.approx(placed_mean(ratios))
    assert pair["min"] <= pair["ratio"] <= pair["max"]
    assert interval_cell([np.nan, np.nan]) == "-"

    parts = evaluation.groups(["a", "b", "a"])
    assert [len(p.tasks) for p in parts.values()] == [2, 1]
    assert parts["b"].tasks[0] is tasks[1]

    # exact costs: every round alike, so the interval over tasks and rounds holds the estimate
    ratio, low, high, count = bootstrap_paired(evaluation.log_ratios("dim", "lookup"))
    assert count == 3 and low <= ratio <= high
    assert bootstrap_paired(evaluation.log_ratios("picky", "random"))[3] == 2
