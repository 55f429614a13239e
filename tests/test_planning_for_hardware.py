"""The planner plans for the hardware file: its splits follow the file, and over the file's
envelope its plan is never worse, by its worst ratio, than the plain heuristics'."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from benchmarks.parts.scale_tasks import study_task
from dreamshard.costs.hardware import load_hardware
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.placement.budget import Deadline
from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place
from dreamshard.placement.packing import least_load_dive
from dreamshard.placement.planner import PlanOptions
from dreamshard.placement.registry import place
from dreamshard.placement.splitting import (
    balance_splits,
    bound_variants,
    choose_splits,
    memory_splits,
)
from dreamshard.placement.tasks import GIB, Placement, PlacementTask, is_legal, shard_task
from dreamshard.planners.for_hardware import (
    KERNEL_HEAVIEST,
    balanced_place,
    corner_views,
    envelope_choice,
    envelope_views,
    kernel_time_key,
    kernel_times,
    overall_each,
    plain_heuristics,
    point_backend,
    roofline_best,
)
from dreamshard.tables.shards import Split, pooled_width, split_table
from dreamshard.tables.synthetic import generate_tables
from dreamshard.tables.table import NUM_BINS, Table


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


def test_the_dive_on_two_loads_balances_both():
    # two tables heavy in one load only, two in the other: one of each on each device
    task = PlacementTask(tuple(generate_tables("dlrm", 4, 0)), 2, 16 * GIB)
    loads = np.array([[2.0, 0.0], [0.0, 2.0], [2.0, 0.0], [0.0, 2.0]])
    devices = least_load_dive(task, [0, 1, 2, 3], loads)
    per_device = np.zeros((2, 2))
    np.add.at(per_device, devices, loads)
    assert per_device.tolist() == [[2.0, 2.0], [2.0, 2.0]]
    # one load: the plain least-loaded dive, unchanged
    assert least_load_dive(task, [0, 1, 2, 3], loads[:, 0]) == [0, 1, 1, 0]


def test_the_balanced_placement_spreads_kernel_time_and_width_better_than_any_heuristic():
    centre = SimulatedBackend(hardware="h100-sxm")

    def spread(task, placement) -> float:
        """The larger of the busiest device's kernel time (the roofline judge's forward and
        backward) and its pooled width, each over the mean a device."""
        kernel = np.array(
            [d.fwd_comp + d.bwd_comp for d in centre.measure(task, placement).devices]
        )
        width = np.zeros(task.num_devices)
        for table, device in zip(task.tables, placement.devices):
            width[device] += pooled_width(table)
        return max(kernel.max() / kernel.mean(), width.max() / width.mean())

    for family in ("dlrm", "wide"):
        task = PlacementTask(tuple(generate_tables(family, 120, 0)), 16, 16 * GIB)
        balanced = balanced_place(task, centre)
        assert balanced is not None and balanced.candidate == "kernel time and width balanced"
        theirs = {key: spread(task, greedy_place(task, key)) for key in HEURISTIC_KEYS}
        assert spread(task, balanced) < min(theirs.values()), (family, theirs)


def test_the_guard_keeps_a_plan_less_worse_over_the_envelope_than_every_plain_one():
    h100 = load_hardware("h100-sxm")
    task = PlacementTask(tuple(generate_tables("dlrm", 60, 1)), 16, 16 * GIB)
    plain = plain_heuristics(task, PlanOptions(hardware=h100))
    balanced = balanced_place(task, SimulatedBackend(hardware=h100))
    choice = envelope_choice(task, balanced, plain, h100)
    worst = worst_ratios(task, [balanced, *plain.values()], h100)
    assert np.isclose(choice.worst["planned"], worst[0])
    # not 2% cheaper than the best plain plan at the centre, but 2% less worse than every
    # plain plan over the envelope: kept
    assert choice.centre["planned"] > 0.98
    assert worst[0] < 0.98 * worst[1:].min()
    assert choice.placement is balanced


def test_a_plan_on_the_files_named_links_is_weighed_on_each_corners_links():
    h100 = load_hardware("h100-sxm")
    slow = h100.at({"inter_gbps": h100.constants["inter_gbps"].low})
    task = PlacementTask(tuple(generate_tables("dlrm", 60, 1)), 16, 16 * GIB)  # 2 hosts of 8
    plan = place(task, "size_lookup", hardware=h100)
    named = point_backend(slow, h100.topology_name()).measure(task, plan).overall
    own = SimulatedBackend(hardware=slow).measure(task, plan).overall
    assert named == own > SimulatedBackend(hardware=h100).measure(task, plan).overall


def test_the_split_choice_weighs_the_placements_it_is_given_beside_the_heuristics():
    centre = SimulatedBackend(hardware="h100-sxm")
    task = PlacementTask(tuple(generate_tables("dlrm", 60, 1)), 16, 16 * GIB)
    balanced = balanced_place(task, centre)

    def rating(shards, found):
        return float(centre.overall_many(shards, found).min())

    heuristics_only = choose_splits(task, [()], rating)[1]
    with_balanced = choose_splits(task, [()], rating, also=lambda splits: [balanced])[1]
    assert with_balanced == rating(task, [balanced]) < heuristics_only


def test_the_planners_views_see_a_plan_that_leans_on_the_l2():
    # two hot tables (2,000 rows read 4,000 times a sample: the L2 holds their repeats) and two
    # cold ones (2M distinct rows a batch: far more than the L2): fused apart from the cold
    # tables the hot ones keep the L2, so the centre rates stacking them on one device cheaper;
    # with no L2 reuse (the last two views) their repeats come from HBM, and stacking is dearer
    hot = tuple([0.0] * (NUM_BINS - 1) + [1.0])
    cold = tuple([1.0] + [0.0] * (NUM_BINS - 1))
    tables = tuple(Table(f"hot{i}", 2000, 128, 4000.0, histogram=hot) for i in range(2))
    tables += tuple(Table(f"cold{i}", 10_000_000, 128, 1000.0, histogram=cold) for i in range(2))
    task = PlacementTask(tables, 2, 64 * GIB)
    stacked, apart = Placement((0, 0, 1, 1)), Placement((0, 1, 0, 1))
    h100 = load_hardware("h100-sxm")
    views = envelope_views(PlanOptions(hardware=h100))
    assert len(views) == 5 and all(v.hardware.value("l2_bytes") == 0 for v in views[3:])
    costs = [v.overall_many(task, [stacked, apart]) for v in views]
    assert costs[0][0] < 0.97 * costs[0][1]  # the centre: stacked
    assert all(c[0] > 1.3 * c[1] for c in costs[3:])  # no L2 reuse: apart
    assert place(task, "dreamshard", hardware=h100).devices in ((0, 1, 0, 1), (1, 0, 1, 0))


def test_where_memory_stops_the_balanced_path_the_bytes_are_balanced_too():
    # 40 dlrm tables on 4 devices holding 85% of their bytes (one table 93% of a device):
    # placed by kernel time and width alone, the largest tables find no room; with the bytes
    # balanced as a third load the balanced placement has a path
    tables = generate_tables("dlrm", 40, 6)
    sizes = PlacementTask(tuple(tables), 4, 10**15).table_bytes()
    task = PlacementTask(tuple(tables), 4, int(sizes.sum() / 4 / 0.85))
    centre = envelope_views(PlanOptions(hardware=load_hardware("h100-sxm")))[0]
    loads = np.stack([kernel_times(task, centre), [pooled_width(t) for t in tables]], 1)
    loads = loads / (loads.sum(axis=0) / 4)
    order = sorted(range(40), key=lambda i: (-loads[i].max(), i))
    assert sizes.max() > 0.9 * task.memory_cap_bytes
    assert least_load_dive(task, order, loads) is None
    found = balanced_place(task, centre)
    assert found is not None and is_legal(task, found)


def test_balancing_the_kernel_heavy_view_without_l2_starts_the_wide_search_lower():
    # wide-856 seed 104 on 64 GPUs: balanced by its tables' kernel time at the centre, the
    # placement rates 1.095 of the best plain plan at the kernel-heavy end with no L2 reuse and
    # the dearest narrow rows; balanced by theirs there, 0.826, and lower under every view, so
    # the search starts from it
    task = study_task("wide-856", 104, 64, "loose")
    h100 = load_hardware("h100-sxm")
    options = PlanOptions(hardware=h100, topology=h100.topology_name())
    views = envelope_views(options)
    plain = list(plain_heuristics(task, options).values())
    centre = balanced_place(task, views[0])
    heavy = balanced_place(task, views[KERNEL_HEAVIEST], "heavy")
    ratios = np.array(
        [overall_each(v, task, [centre, heavy]) / overall_each(v, task, plain).min() for v in views]
    )
    assert ratios[KERNEL_HEAVIEST, 0] > 1 > ratios[:, 1].max()
    assert (ratios[:, 1] < ratios[:, 0]).all()
    assert heavy.candidate == "heavy" and heavy.devices != centre.devices


def test_the_kernel_time_rule_weighs_a_column_by_its_own_kernel_time():
    # dlrm-856 seed 106's t0052: 32 wide, 500 lookups a sample. At the h100's centre a row read
    # costs 64 bytes at least (32 fp16 dims), so its quarter columns cost the roofline's kernel
    # as much as the whole table. The rule over key / parts cut it into quarters, which then
    # keyed below a device's mean, so no variant took it off its device (TorchRec's estimator:
    # 0.98 of the best plain plan); weighed by its own kernel time it stays whole, bounds a
    # device, and the variants cut it into row ranges
    task = study_task("dlrm-856", 106, 128, "loose")
    h100 = load_hardware("h100-sxm")
    centre = envelope_views(PlanOptions(hardware=h100, topology=h100.topology_name()))[0]
    key = kernel_time_key(task, centre)
    hot = next(t for t in task.tables if t.name == "t0052")
    assert key(split_table(hot, "column", 4)[0]) > 0.99 * key(hot)
    mean = sum(key(t) for t in task.tables) / task.num_devices
    by_parts = {s.table: s for s in balance_splits(task, key)}
    exact = {s.table: s for s in balance_splits(task, key, exact=True)}
    assert by_parts["t0052"].parts == 4 and key(hot) / 4 < mean < key(hot)
    assert "t0052" not in exact
    # a wide table is still halved while that sheds its kernel time
    wide = next(t for t in task.tables if t.name == "t0481")
    assert exact["t0481"].kind == "column" and 1 < exact["t0481"].parts < by_parts["t0481"].parts
    variants = bound_variants(task, key, memory_splits(task), host_size=8, exact=True)
    kinds = [{s.kind for s in v if s.table == "t0052"} for v in variants]
    assert kinds == [{"row"}, {"table_row"}]
    assert key(split_table(wide, "column", exact["t0481"].parts)[0]) < key(wide) / 2
    plan = place(task, "dreamshard", hardware=h100, topology=h100.topology_name())
    assert {s.kind for s in plan.splits if s.table == "t0052"} & {"row", "table_row"}


def test_a_hot_narrow_table_that_bounds_a_device_is_cut_into_row_ranges():
    # dlrm seed 104's t0001: 8 wide, 500 lookups a sample. Its column half costs the roofline
    # as much as the whole table (a row's read is one sector either way), so only row ranges
    # take it off one device: the split choice weighs the balance rule under the roofline's
    # kernel time with such a table cut into row ranges (`bound_variants`)
    hot = replace(generate_tables("dlrm", 2, 104)[1], name="hot")
    assert (hot.dim, hot.pooling_factor) == (8, 500.0)
    small = PlacementTask((*generate_tables("dlrm", 60, 7), hot), 16, 64 * GIB)
    h100 = load_hardware("h100-sxm")
    centre = envelope_views(PlanOptions(hardware=h100))[0]
    key = kernel_time_key(small, centre)
    rule = set(balance_splits(small, key))
    variants = bound_variants(small, key, (), host_size=8)
    assert [[s for s in v if s.table == hot.name] for v in variants] == [
        [Split(hot.name, "row", 16)],
        [Split(hot.name, "table_row", 8)],
    ]
    others = {s for s in rule if s.table != hot.name}
    assert all({s for s in v if s.table != hot.name} == others for v in variants)
    plan = place(small, "dreamshard", hardware=h100)
    assert {s.kind for s in plan.splits if s.table == hot.name} & {"row", "table_row"}
    half = shard_task(small, (Split(hot.name, "column", 2),))
    assert kernel_times(half, centre)[-1] > centre.overall_many(small, [plan])[0]
    # the envelope study's task where the plan kept t0001 whole before (2026-12-07: 0.98 of
    # the best plain plan by TorchRec's estimator; cut into row ranges, 0.66): the variants
    # the split choice weighs first cut it into row ranges
    task = study_task("dlrm-428", 104, 64, "binding")
    key = kernel_time_key(task, point_backend(h100, h100.topology_name()))
    variants = bound_variants(task, key, memory_splits(task), host_size=8, exact=True)
    assert [{s.kind for s in v if s.table == "t0001"} for v in variants] == [
        {"row"},
        {"table_row"},
    ]


def test_the_kernel_heaviest_view_only_breaks_near_ties_in_the_searchs_answer():
    # 24 dlrm tables on 4 a100s: the placement balanced at the kernel-heavy end with the
    # dearest narrow rows is the cheapest there, but dearer than the centre's balanced one,
    # beyond the margin, at a point of the envelope. Weighed alike, that view picks it; as a
    # secondary view it only breaks near-ties, and the answer is the one the envelope prefers
    # (planning 856 dlrm tables on 64 a100s, seed 105, the first way took a plan to 1.059 of
    # the best plain plan at a kernel-heavy corner)
    task = PlacementTask(tuple(generate_tables("dlrm", 24, 0)), 4, 16 * GIB)
    a100 = load_hardware("a100-80gb")
    options = PlanOptions(hardware=a100, topology=a100.topology_name())
    views = envelope_views(options)
    points = [*views, *corner_views(a100, options.topology)]
    centre = balanced_place(task, views[0], "centre")
    heavy = balanced_place(task, views[KERNEL_HEAVIEST], "heavy")
    costs = np.array([p.overall_many(task, [centre, heavy]) for p in points])
    assert costs[KERNEL_HEAVIEST, 1] < costs[KERNEL_HEAVIEST, 0]
    assert (costs[:, 1] / costs[:, 0]).max() > 1.02
    alike = roofline_best(task, [centre, heavy], views, Deadline.after(0), points[len(views) :])
    assert alike.candidate == "heavy"
    found = roofline_best(
        task, [centre, heavy], views, Deadline.after(0), points[len(views) :], (KERNEL_HEAVIEST,)
    )
    assert found.candidate == "centre"
