"""The planner plans for the hardware file: its splits follow the file, and over the file's
envelope its plan is never worse, by its worst ratio, than the plain heuristics'."""

from __future__ import annotations

import numpy as np

from dreamshard.costs.hardware import load_hardware
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.placement.planner import PlanOptions
from dreamshard.placement.registry import place
from dreamshard.placement.tasks import GIB, PlacementTask
from dreamshard.planners.for_hardware import envelope_choice, overall_each, plain_heuristics
from dreamshard.tables.synthetic import generate_tables


def test_cpu_and_h100_choose_different_splits_each_cheaper_under_its_own_file():
    # found by trying the wide and dlrm families at 24-48 tables on 4-8 devices: most differ
    task = PlacementTask(tuple(generate_tables("wide", 24, 0)), 4, 16 * GIB)
    plans = {hw: place(task, "dreamshard", hardware=hw) for hw in ("cpu", "h100-sxm")}
    assert plans["cpu"].splits != plans["h100-sxm"].splits
    for own, other in (("cpu", "h100-sxm"), ("h100-sxm", "cpu")):
        judge = SimulatedBackend(hardware=own)
        mine, theirs = (judge.measure(task, plans[k]).overall for k in (own, other))
        assert mine < theirs, (own, mine, theirs)


def worst_ratios(task, plans: list, hardware) -> np.ndarray:
    """Each plan's worst ratio to the best of the plain plans (the rest of `plans` after the
    first) over the file's centre and corners, recomputed here from the backends."""
    points = [hardware, *(hardware.at(c) for c in hardware.corners())]
    ratios = []
    for point in points:
        costs = overall_each(SimulatedBackend(hardware=point), task, plans)
        ratios.append(costs / costs[1:].min())
    return np.max(ratios, axis=0)


def test_the_gpu_plan_is_never_worse_over_the_envelope_than_the_plain_heuristics():
    h100 = load_hardware("h100-sxm")
    task = PlacementTask(tuple(generate_tables("dlrm", 60, 3)), 16, 4 * GIB)
    planned = place(task, "dreamshard", hardware=h100)
    plain = plain_heuristics(task, PlanOptions(hardware=h100))
    assert set(plain) == {"dim", "size", "lookup", "size_lookup"}
    worst = worst_ratios(task, [planned, *plain.values()], h100)
    assert worst[0] <= worst[1:].min() + 1e-9
    # the guard on its own: a plan the centre rates dearer than a plain one is dropped for the
    # plain plan least worse over the envelope, under that heuristic's name
    dearest = max(plain, key=lambda k: h100_cost(task, plain[k]))
    choice = envelope_choice(task, plain[dearest], plain, h100)
    kept = min(plain, key=lambda k: (choice.worst[k], choice.centre[k]))
    assert choice.placement.devices == plain[kept].devices
    assert choice.placement.method == kept and "envelope guard" in choice.placement.candidate


def h100_cost(task, placement) -> float:
    return SimulatedBackend(hardware="h100-sxm").measure(task, placement).overall
