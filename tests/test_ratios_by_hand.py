"""`evaluation.results` ratios and `rounds.bootstrap_interval` against values worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from dreamshard.evaluation.results import Evaluation
from dreamshard.evaluation.rounds import bootstrap_interval, bootstrap_share
from dreamshard.learn.shipped import gain_misses
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.tables.table import Table

# [round, task, planner]: size and lookup are heuristics, dreamshard is not
COSTS = np.array(
    [
        [[10.0, 12.0, 9.0], [20.0, 16.0, 18.0]],
        [[11.0, 12.0, 10.0], [22.0, 16.0, 17.0]],
    ]
)


@pytest.fixture
def evaluation() -> Evaluation:
    table = Table("t", 100, 4, 1.0)
    tasks = [PlacementTask((table,), 1, 2**20, name=f"task {i}") for i in range(2)]
    planners = ["size", "lookup", "dreamshard"]
    placements = [[Placement((0,), method=p) for p in planners] for _ in tasks]
    breakdowns = [[[] for _ in planners] for _ in tasks]
    return Evaluation(tasks, planners, placements, COSTS, breakdowns, np.zeros((2, 3)), "simulated")


def test_the_strongest_heuristic_and_ratios_to_it(evaluation):
    # mean over both tasks and rounds: size (10+20+11+22)/4 = 15.75, lookup 56/4 = 14
    assert evaluation.strongest_heuristic() == "lookup"
    ratios = evaluation.ratios("strongest_heuristic")[:, 2]
    # task 0: sqrt(9/12 * 10/12) = sqrt(0.625); task 1: sqrt(18/16 * 17/16) = sqrt(1.1953125)
    assert ratios == pytest.approx([0.7905694150, 1.0933034803], abs=1e-9)
    # over tasks: sqrt(0.7905694150 * 1.0933034803)
    assert evaluation.paired_ratio("dreamshard", "strongest_heuristic") == pytest.approx(
        0.9296947, abs=1e-6
    )


def test_the_per_task_best_heuristic_and_best_known(evaluation):
    # task 0: size's mean 10.5 beats lookup's 12; task 1: lookup's 16 beats size's 21
    assert evaluation.per_task_best(evaluation.heuristics) == ["size", "lookup"]
    per_task = evaluation.ratios("per_task_best_heuristic")[:, 2]
    # task 0: sqrt(9/10 * 10/11) = sqrt(0.8181818); task 1 as above
    assert per_task == pytest.approx([0.9045340337, 1.0933034803], abs=1e-9)
    # best known: dreamshard's own 9.5 on task 0 (ratio 1), lookup's 16 on task 1
    assert evaluation.ratios("best_known")[:, 2] == pytest.approx([1.0, 1.0933034803], abs=1e-9)
    pair = evaluation.pair("dreamshard", "per_task_best_heuristic")
    assert pair["max"] == pytest.approx(1.0933034803) and pair["tasks_placed"] == 2


def test_bootstrap_interval_by_hand():
    # one value: no spread
    assert bootstrap_interval(np.array([0.9] * 5)) == pytest.approx((0.9, 0.9))
    # two values: a resample's geometric mean is 0.5, 1 or 2 with chances 1/4, 1/2, 1/4, so
    # the 2.5% and 97.5% quantiles of 2000 resamples are 0.5 and 2
    assert bootstrap_interval(np.array([0.5, 2.0])) == pytest.approx((0.5, 2.0))
    # an 80% interval of the same: the 10% and 90% quantiles, still 0.5 and 2
    assert bootstrap_interval(np.array([0.5, 2.0]), level=0.8) == pytest.approx((0.5, 2.0))
    # a 40% interval: the 30% and 70% quantiles both fall on 1
    assert bootstrap_interval(np.array([0.5, 2.0]), level=0.4) == pytest.approx((1.0, 1.0))


def test_bootstrap_share_by_hand():
    # two groups, 1 of 1 and 0 of 3 covered: a resample holds both twice (share 1 or 0) or one
    # of each (1/4), with chances 1/4, 1/4 and 1/2; the 2.5% and 97.5% quantiles are 0 and 1
    # and a 40% interval's 30% and 70% quantiles both fall on 1/4
    hits, counts = np.array([1, 0]), np.array([1, 3])
    assert bootstrap_share(hits, counts) == pytest.approx((0.0, 1.0))
    assert bootstrap_share(hits, counts, level=0.4) == pytest.approx((0.25, 0.25))
    # one group: its own share, no spread
    assert bootstrap_share(np.array([3]), np.array([4])) == pytest.approx((0.75, 0.75))


def test_gain_misses_by_hand():
    # placements 0 and 1 are heuristics; the members predict 0 cheaper on average (10.5 vs 11)
    # so it is the reference. Placement 2's predicted gains over it are 1 - 9/10 = 0.1 and
    # 1 - 8/11 = 3/11: mean 0.18636, standard deviation (n - 1) 0.12214; its true gain
    # 1 - 9/12 = 0.25 lies (0.25 - 0.18636) / 0.12214 = 0.52103 spreads away. Placement 1's:
    # gains 1 - 12/10 = -0.2 and 1 - 10/11 = 1/11, mean -0.054545, sd 0.20570; true gain
    # 1 - 13/12 = -1/12: 0.028788 / 0.20570 = 0.13995 spreads.
    predicted = np.array([[10.0, 12.0, 9.0], [11.0, 10.0, 8.0]])
    true = np.array([12.0, 13.0, 9.0])
    misses = gain_misses(predicted, true, [True, True, False])
    assert misses == pytest.approx([0.13995, 0.52103], abs=1e-4)
    # no heuristic to measure a gain from: no pairs
    assert gain_misses(predicted, true, [False, False, False]) == []
