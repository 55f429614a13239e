"""The per-device error and noise of benchmarks/device_error.py, and finetune_study's paired
ratios, against hand-computed values."""

import numpy as np
import pytest
from conftest import load_benchmark

device_error = load_benchmark("device_error")
finetune_study = load_benchmark("finetune_study")


def test_a_source_off_by_one_factor_on_every_device_has_no_spread():
    measured = np.array([4.0, 6.0, 0.0, 8.0])  # the third device is empty
    assert device_error.spread(measured, measured / 2) == pytest.approx(0.0, abs=1e-12)
    # one busy device off by e^0.3, the other two exact: log errors (0.3, 0, 0)
    predicted = np.array([4.0 / np.exp(0.3), 6.0, 5.0, 8.0])
    assert device_error.spread(measured, predicted) == pytest.approx(np.std([0.3, 0.0, 0.0]))


def test_the_noise_is_what_a_device_moves_apart_from_its_plans_common_factor():
    base = np.array([[10.0, 20.0], [5.0, 5.0]])  # [plans, devices]
    slow = np.array([1.0, 1.3, 0.9, 1.1])[:, None, None]  # the host's speed each round
    rounds = base[None] * slow  # every device of a plan moves together: no noise
    assert device_error.plan_noise(rounds) == pytest.approx(0.0, abs=1e-12)
    jitter = rounds.copy()
    jitter[1, 0, 0] *= np.exp(0.2)  # plan 0's first device, round 1 only
    # plan 0's logs past their medians, then past the round's mean over its two devices:
    logs = np.log(jitter[:, 0])
    own = logs - np.median(logs, axis=0)
    expected = np.std(own - own.mean(axis=1, keepdims=True)) / 2  # plan 1 adds 0
    assert device_error.plan_noise(jitter) == pytest.approx(expected)


def test_the_fitted_models_plans_are_judged_paired_within_rounds():
    names = ["dim", "lookup", "size", "size_lookup"]
    names += [finetune_study.plan_name(m) for m in finetune_study.MODELS]
    # two rounds; round 2 is twice as slow for every plan: the pairing cancels it
    first = [10.0, 12.0, 12.0, 12.0, 9.0, 9.5, 8.0]
    spreads = {"shipped": [0.1, 0.3], "all": [0.2], "quantities": [0.4, 0.0]}
    record = {"names": names, "overall": [first, [2 * v for v in first]], "device_spread": spreads}
    figures = finetune_study.suite_figures([record])
    assert figures["strongest"] == "dim"
    assert np.exp(figures["shipped"][0]) == pytest.approx(0.9)
    assert np.exp(figures["quantities"][0]) == pytest.approx(0.8)
    assert np.exp(figures["paired"][0]) == pytest.approx(8.0 / 9.5)
    assert figures["spread"] == pytest.approx({"shipped": 0.2, "all": 0.2, "quantities": 0.2})
