"""Exact references: the MILP's optimum and the lower bounds, under an additive per-table cost,
and the simulated backend's MILP."""

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_planners import legal_placement_exists, make_task
from test_planners import tasks as small_tasks

from benchmarks.parts.bounds import additive_makespan, lower_bounds
from benchmarks.parts.milp import solve_milp
from benchmarks.parts.milp_simulated import solve_simulated_milp
from dreamshard.costs.simulated import DEFAULT_PATH, SimulatedBackend, SimulatedModel
from dreamshard.errors import InfeasibleError
from dreamshard.placement.heuristics import heuristic_keys
from dreamshard.placement.registry import method_names, place
from dreamshard.placement.tasks import Placement, is_legal

costs = st.lists(st.floats(0.0, 100.0), min_size=7, max_size=7)


def brute_force_optimum(task, table_costs):
    """The least additive makespan over every legal placement (None when none is legal)."""
    best = None
    for devices in itertools.product(range(task.num_devices), repeat=len(task.tables)):
        placement = Placement(devices)
        if is_legal(task, placement):
            value = additive_makespan(table_costs, placement, task.num_devices)
            best = value if best is None else min(best, value)
    return best


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task=small_tasks, raw_costs=costs)
def test_the_milp_finds_the_brute_force_optimum_within_memory(task, raw_costs):
    table_costs = np.array(raw_costs[: len(task.tables)])
    result = solve_milp(task, table_costs, rel_gap=0.0)
    optimum = brute_force_optimum(task, table_costs)
    if optimum is None:
        assert result.status == "infeasible" and result.placement is None
        return
    assert result.status == "optimal" and is_legal(task, result.placement)
    assert result.objective == pytest.approx(optimum, rel=1e-6, abs=1e-9)
    assert result.gap <= 1e-6  # HiGHS's own bound proves it optimal
    assert lower_bounds(table_costs, task.num_devices).best <= optimum + 1e-9


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task=small_tasks, seed=st.integers(0, 2**16))
def test_no_planner_beats_the_milp_or_a_lower_bound_on_its_additive_cost(task, seed):
    if not legal_placement_exists(task):
        return
    placements = {
        method: place(task, method, seed, split="none")
        for method in method_names("baseline", "heuristic")
    }
    for key in ("dim", "size", "lookup", "size_lookup"):
        table_costs = heuristic_keys(task, key)
        result = solve_milp(task, table_costs, rel_gap=0.0)
        assert result.status == "optimal" and is_legal(task, result.placement)
        bounds = lower_bounds(table_costs, task.num_devices)
        for bound in (bounds.average, bounds.largest, bounds.pigeonhole):
            assert bound <= result.objective * (1 + 1e-9)
        for method, placement in placements.items():
            value = additive_makespan(table_costs, placement, task.num_devices)
            assert result.objective <= value * (1 + 1e-9), f"{method} beat the MILP on {key}"
            assert bounds.best <= value * (1 + 1e-9)


def test_each_bound_is_the_tight_one_somewhere():
    assert lower_bounds(np.array([3.0, 3.0, 3.0]), 2).pigeonhole == 6.0  # two share a device
    assert lower_bounds(np.array([10.0, 1.0, 1.0]), 2).best == 10.0  # the largest table
    assert lower_bounds(np.array([2.0] * 8), 2).best == 8.0  # the average load


def test_a_larger_task_reports_its_time_limit_and_gap():
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 40, 24).tolist()
    task = make_task(sizes, 4, int(sum(sizes) / 4 * 1.3) + 1)
    table_costs = rng.uniform(1, 100, 24)
    result = solve_milp(task, table_costs, time_limit_s=0.5)
    assert result.status in ("optimal", "time_limit") and is_legal(task, result.placement)
    assert result.bound >= lower_bounds(table_costs, 4).best * (1 - 1e-9)
    # the bound is a bound: no legal placement, whoever made it, beats it
    for method in method_names("baseline", "heuristic"):
        for seed in range(3):
            value = additive_makespan(table_costs, place(task, method, seed, split="none"), 4)
            assert result.bound <= value * (1 + 1e-9)
    if result.status == "optimal":
        assert result.gap <= 1e-4  # HiGHS's default relative gap


def test_infeasible_tasks_are_reported_not_placed():
    task = make_task([30, 30, 30], 2, 40)
    result = solve_milp(task, np.ones(3))
    assert result.status == "infeasible" and result.placement is None
    with pytest.raises(InfeasibleError):
        place(task, "size")


def simulated_optimum(task, backend):
    """The least simulated cost over every legal placement (None when none is legal)."""
    every = np.array(list(itertools.product(range(task.num_devices), repeat=len(task.tables))))
    sizes = task.table_bytes()
    loads = np.stack([(sizes * (every == d)).sum(1) for d in range(task.num_devices)], 1)
    legal = [Placement(tuple(map(int, p))) for p in every[loads.max(1) <= task.memory_cap_bytes]]
    return float(backend.overall_many(task, legal).min()) if legal else None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    task=small_tasks,
    product_weight=st.sampled_from([0.0, 1e-9]),
    batch=st.sampled_from([2048, 65536]),  # the larger: the exchange outweighs the kernels
    topology=st.sampled_from(["cpu-gloo", "per-host=1,intra=0.7,inter=0.05,network-latency=0.5"]),
)
def test_the_simulated_milp_bounds_and_finds_the_simulated_optimum(
    task, product_weight, batch, topology
):
    """Without the cache overflow and lookups x width its model is the backend's, so it finds
    the brute-force optimum; with them its bound still holds under every legal placement. On
    one host and with each device a host of its own (every exchange across hosts)."""
    default = SimulatedModel.load(DEFAULT_PATH)
    plain = SimulatedModel(default.fwd[:-2] + [0.0, 0.0], default.bwd[:-2] + [0.0, 0.0])
    full = SimulatedModel(
        default.fwd[:-2] + [product_weight, default.fwd[-1]],
        default.bwd[:-2] + [product_weight, default.bwd[-1]],
    )
    exact, backend = (
        SimulatedBackend(plain, batch_size=batch, topology=topology),
        SimulatedBackend(full, batch_size=batch, topology=topology),
    )
    optimum = simulated_optimum(task, exact)
    result = solve_simulated_milp(task, exact, rel_gap=0.0)
    if optimum is None:
        assert result.status == "infeasible" and result.placement is None
        return
    assert result.status == "optimal" and is_legal(task, result.placement)
    assert result.objective == pytest.approx(optimum, rel=1e-6)
    assert result.bound == pytest.approx(optimum, rel=1e-6)  # its model is the backend's
    bounded = solve_simulated_milp(task, backend, rel_gap=0.0)
    truth = simulated_optimum(task, backend)
    assert bounded.bound <= truth * (1 + 1e-6) <= bounded.objective * (1 + 2e-6)
    assert bounded.objective == pytest.approx(backend.measure(task, bounded.placement).overall)


def test_the_simulated_milp_charges_a_narrow_device_what_it_receives():
    """A narrow table with many lookups beside two wide ones, batch 65536 on the CPU's gloo:
    the device holding the narrow one alone waits to receive both wide ones' outputs."""
    default = SimulatedModel.load(DEFAULT_PATH)
    plain = SimulatedModel(default.fwd[:-2] + [0.0, 0.0], default.bwd[:-2] + [0.0, 0.0])
    backend = SimulatedBackend(plain, batch_size=65536)
    task = make_task([1, 1, 1], 2, 60, dims=[4, 128, 128], pooling=[50.0, 1.0, 1.0])
    result = solve_simulated_milp(task, backend, rel_gap=0.0)
    optimum = simulated_optimum(task, backend)
    assert result.objective == pytest.approx(optimum) and result.bound == pytest.approx(optimum)
    apart = backend.measure(task, Placement((0, 1, 1)))
    assert apart.overall > optimum * 1.1  # the narrow table alone is not the answer here


@pytest.mark.parametrize(
    "topology", ["per-host=2,intra=0.7,inter=0.05", "per-host=2,intra=0.05,inter=0.7"]
)
def test_the_simulated_milp_finds_the_optimum_across_hosts(topology):
    """4 devices on 2 hosts of 2, the network the slower and then the host's links: sent and
    received inside a host and across hosts, the MILP's optimum is the brute-force optimum over
    all 4^6 placements."""
    default = SimulatedModel.load(DEFAULT_PATH)
    plain = SimulatedModel(default.fwd[:-2] + [0.0, 0.0], default.bwd[:-2] + [0.0, 0.0])
    backend = SimulatedBackend(plain, batch_size=65536, topology=topology)
    task = make_task(
        [5, 9, 5, 7, 5, 3], 4, 20, dims=[4, 128, 64, 16, 128, 8], pooling=[30.0, 1, 2, 8, 1, 50]
    )
    result = solve_simulated_milp(task, backend, rel_gap=0.0)
    optimum = simulated_optimum(task, backend)
    assert result.objective == pytest.approx(optimum) and result.bound == pytest.approx(optimum)
    flat = SimulatedBackend(plain, batch_size=65536, topology="cpu-gloo")
    assert simulated_optimum(task, flat) != pytest.approx(optimum)  # the hosts matter here
