import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreamshard.errors import DreamshardError, InfeasibleError
from dreamshard.placement.registry import method_names, place
from dreamshard.placement.tasks import Placement, PlacementTask, device_memory, is_legal
from dreamshard.tables.table import Table

MiB = 2**20


def make_task(sizes_mib, num_devices, cap_mib, dims=None, pooling=None):
    tables = tuple(
        Table(
            f"t{i}",
            rows=s * MiB // (2 * 4) if dims is None else s * MiB // (2 * dims[i]),
            dim=4 if dims is None else dims[i],
            pooling_factor=1.0 if pooling is None else pooling[i],
        )
        for i, s in enumerate(sizes_mib)
    )
    return PlacementTask(tables, num_devices, cap_mib * MiB, "fp16")


def legal_placement_exists(task):
    sizes = task.table_bytes()
    for devices in itertools.product(range(task.num_devices), repeat=len(sizes)):
        if (
            np.bincount(devices, weights=sizes, minlength=task.num_devices).max()
            <= task.memory_cap_bytes
        ):
            return True
    return False


def whole_table_placements(task, seed):
    """Each baseline and heuristic planner's name and whole-table placement of `task`; the
    placement is None where the planner says that the task is infeasible."""
    for method in method_names("baseline", "heuristic"):
        try:
            placement = place(task, method, seed, split="none")
        except InfeasibleError:
            placement = None
        yield method, placement


tasks = st.builds(
    lambda sizes, dims, pooling, d, cap: make_task(
        sizes, d, cap, dims[: len(sizes)], pooling[: len(sizes)]
    ),
    st.lists(st.integers(1, 40), min_size=1, max_size=7),
    st.lists(st.sampled_from([4, 8, 16, 32, 64, 128]), min_size=7, max_size=7),
    st.lists(st.floats(1.0, 50.0), min_size=7, max_size=7),
    st.integers(1, 3),
    st.integers(1, 60),
)


big_tasks = st.builds(
    lambda sizes, d, slack: make_task(sizes, d, max(max(sizes), int(slack * sum(sizes) / d) + 1)),
    st.lists(st.integers(1, 500), min_size=1, max_size=120),
    st.integers(1, 16),
    st.floats(0.9, 2.0),
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task=tasks, seed=st.integers(0, 2**16))
def test_every_planner_is_legal_or_says_infeasible_exactly(task, seed):
    feasible = legal_placement_exists(task)
    for method, placement in whole_table_placements(task, seed):
        if placement is None:
            assert not feasible, f"{method} gave up on a task that has a legal placement"
            continue
        assert feasible and is_legal(task, placement)
        assert placement == place(task, method, seed, split="none")  # deterministic for a seed


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task=big_tasks, seed=st.integers(0, 2**16))
def test_planners_on_larger_tasks_never_overload_a_device(task, seed):
    for _, placement in whole_table_placements(task, seed):
        if placement is not None:
            assert device_memory(task, placement).max() <= task.memory_cap_bytes


def test_greedy_balances_its_key_when_memory_is_loose():
    # dims 64, 32, 32, 16, 16 on two devices: 64 | 32+16+16 ... greedy by dim
    task = make_task([1] * 5, 2, 100, dims=[64, 32, 32, 16, 16])
    assert place(task, "dim").devices == (0, 1, 1, 0, 1)  # loads 64+16=80 and 32+32+16=80


def test_greedy_gives_way_to_memory():
    # by dim the big-dim table would share device 0, but memory forces a different split
    task = make_task([60, 50, 50], 2, 100, dims=[128, 4, 4])
    placement = place(task, "dim")
    assert is_legal(task, placement)
    assert device_memory(task, placement).max() <= 100 * MiB


def test_random_differs_between_seeds_and_stays_legal():
    task = make_task([5] * 30, 4, 60)
    placements = {place(task, "random", seed).devices for seed in range(5)}
    assert len(placements) > 1
    assert all(is_legal(task, Placement(p)) for p in placements)


@pytest.mark.parametrize(
    "sizes, devices, cap, words",
    [
        ([150, 10], 4, 100, "table t0 needs"),
        ([60, 60, 60], 2, 80, "in total"),
        ([60, 60, 60], 2, 100, "no legal placement exists"),
    ],
)
def test_infeasible_tasks_say_why(sizes, devices, cap, words):
    with pytest.raises(InfeasibleError, match=words):
        place(make_task(sizes, devices, cap), "lookup", split="none")


def test_bad_tasks_and_unknown_methods():
    with pytest.raises(DreamshardError, match="devices must be positive"):
        place(make_task([1], 0, 10))
    with pytest.raises(DreamshardError, match="memory per device must be positive"):
        place(make_task([1], 1, 0))
    with pytest.raises(DreamshardError, match="unknown method"):
        place(make_task([1], 1, 10), "magic")
