"""benchmarks/measured_variants.py's look-alike variants and figures, and
benchmarks/even_plan_noise.py's unevenness, against hand-computed values."""

from dataclasses import replace

import numpy as np
import pytest
from conftest import load_benchmark

from dreamshard.learn.model_file import resolve_model
from dreamshard.placement.registry import named_planner
from dreamshard.placement.tasks import is_legal, shard_view
from dreamshard.planners.dreamshard_planner import predicted_overall

measured_variants = load_benchmark("measured_variants")
even_plan_noise = load_benchmark("even_plan_noise")
fbgemm_floor = load_benchmark("fbgemm_floor")


def test_variants_are_legal_distinct_and_predicted_alike():
    task = fbgemm_floor.judged_tasks("cpu-50x4", 1)[0][1][0]
    model = resolve_model("shipped")
    plan = named_planner("dreamshard", model, split="auto")(task, 0)
    variants = measured_variants.near_equal_variants(task, plan, model, 5, seed=0)
    assert len(variants) == 5
    assert len({v.devices for v in variants} | {plan.devices}) == 6
    shards, view = shard_view(task, plan)
    bound = predicted_overall(model, shards, [view])[0] * (1 + measured_variants.TOLERANCE)
    for variant in variants:
        assert is_legal(task, variant) and variant.splits == plan.splits
        moved = sum(a != b for a, b in zip(plan.devices, variant.devices))
        assert 2 <= moved <= 6  # one to three pairwise swaps
        alike = replace(view, devices=variant.devices)
        assert predicted_overall(model, shards, [alike])[0] <= bound
    again = measured_variants.near_equal_variants(task, plan, model, 5, seed=0)
    assert [v.devices for v in again] == [v.devices for v in variants]  # seeded


def test_the_best_variant_is_picked_on_half_the_rounds_and_judged_on_the_other():
    names = ["dim", "lookup", "size", "size_lookup", "dreamshard auto", "variant 0"]
    # four rounds, round 3 twice as slow for every plan (the pairing cancels it); the variant is
    # cheaper on the even rounds (0.8 of dim) and dearer on the odd ones (1.0 of dim)
    rounds = [
        [10.0, 11.0, 12.0, 13.0, 9.0, 8.0],
        [10.0, 11.0, 12.0, 13.0, 9.0, 10.0],
        [10.0, 11.0, 12.0, 13.0, 9.0, 8.0],
        [20.0, 22.0, 24.0, 26.0, 18.0, 20.0],
    ]
    figures = measured_variants.suite_figures([{"names": names, "overall": rounds}])
    assert figures["strongest"] == "dim"
    assert np.exp(figures["plan"][0]) == pytest.approx(0.9)
    # picked on the even rounds: the variant, judged on the odd ones at 1.0; picked on the odd
    # rounds: the plan, judged on the even ones at 0.9
    assert figures["cross_fitted"][0] == pytest.approx((np.log(1.0) + np.log(0.9)) / 2)
    # on all rounds the variant's mean log ratio, (log 0.8 + log 1.0) / 2, beats the plan's log 0.9
    assert figures["hindsight"][0] == pytest.approx(np.log(0.8) / 2)
    assert figures["apart"][0] == pytest.approx(11.5 / 11.25)
    assert figures["variants"] == [1]


def test_an_even_plan_is_uneven_only_by_its_busiest_rounds():
    same = np.full((3, 4), 5.0)
    assert even_plan_noise.uneven(same) == pytest.approx(0.0, abs=1e-12)
    # each round one device is 10% slower, a different one each round: each device's median is
    # 5.0, the busiest every round is 5.5
    jitter = same.copy()
    for r in range(3):
        jitter[r, r] = 5.5
    assert even_plan_noise.uneven(jitter) == pytest.approx(0.1)
    # a device that is always 20% slower: its median is 6.0, the devices' mean 5.25
    heavy = same.copy()
    heavy[:, 0] = 6.0
    assert even_plan_noise.uneven(heavy) == pytest.approx(6.0 / 5.25 - 1)


additivity = load_benchmark("additivity")


def test_an_additive_kernel_is_predicted_exactly_once_fitted():
    rng = np.random.default_rng(0)
    alone = rng.uniform(1.0, 3.0, 12)  # 12 tables' kernels alone
    placements = [rng.integers(0, 3, 12) for _ in range(8)]  # 8 random plans on 3 devices
    # every device costs 0.8 x its tables alone + 0.5 a table + 1.0 for the kernel
    devices = []
    for row in placements:
        devices.append(
            [0.8 * alone[row == d].sum() + 0.5 * (row == d).sum() + 1.0 for d in range(3)]
        )
    record = {
        "alone": [alone.tolist(), alone.tolist()],
        "devices": [devices, devices],
        "placements": [row.tolist() for row in placements],
    }
    figures = additivity.task_figures(record, ridge=0.3)
    assert figures["k x sum + b x tables + c"] == pytest.approx(0.0, abs=1e-9)
    assert figures["noise"] == pytest.approx(0.0, abs=1e-12)
    assert figures["tables alone, summed"] > 0.01  # the plain sum misses the per-table cost
