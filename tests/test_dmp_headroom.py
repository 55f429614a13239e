"""The DMP headroom's figures against hand-computed values (benchmarks/dmp_headroom.py)."""

import numpy as np
import pytest
from conftest import load_benchmark

headroom = load_benchmark("dmp_headroom")


def test_the_best_plan_is_picked_on_one_half_of_the_rounds_and_judged_on_the_other():
    nan = np.nan  # the reference's column
    logs = np.array([[nan, -0.1, 0.0], [nan, 0.05, -0.2], [nan, -0.1, 0.0], [nan, 0.05, -0.2]])
    judged, first, second = headroom.cross_fitted(logs)
    # even rounds pick plan 1 (-0.1), judged on the odd ones: 0.05; odd rounds pick plan 2
    # (-0.2), judged on the even ones: 0.0; in hindsight plan 2 would show -0.1
    assert (first, second) == (1, 2)
    assert judged == pytest.approx(0.025)


def test_the_balance_floor_is_the_least_work_spread_evenly_plus_the_least_wait():
    names = ["torchrec", "a", "b"]
    cpu = np.array(  # [ranks, rounds, plans]
        [[[10.0, 8.0, 12.0], [10.0, 8.0, 12.0]], [[6.0, 9.0, 4.0], [6.0, 9.0, 4.0]]]
    )
    wall = np.array([[14.0, 11.0, 15.0], [14.0, 11.0, 15.0]])  # [rounds, plans]
    found = headroom.balance_floor(wall, cpu, names)
    # work 16 / 17 / 16 ms a step: the least, 16, over 2 ranks is 8; waits past the busiest
    # rank's CPU time 4 / 2 / 3 ms: the least is 2; the floor 10 ms over TorchRec's 14 ms
    assert np.exp(found["floor"]) == pytest.approx(10 / 14)
    assert found["work_apart"] == pytest.approx(17 / 16)
    assert found["wait_share"] == pytest.approx(3 / 15)  # the median of 4/14, 2/11, 3/15
    assert found["torchrec_uneven"] == pytest.approx(10 / 8)  # busiest 10 ms, mean 8 ms
