"""How `dreamshard` plans for a GPU hardware file: it rates with the file's analytic model, and
leaves the plain heuristics only where that holds across the file's whole envelope.

The shipped cost network learned this host's CPU kernels. A GPU's costs have another shape (a
per-call floor, HBM and L2 bandwidths, NVLink inside a host and a NIC between hosts), and no GPU
was here to measure them, so for a GPU file (`costs.hardware`) the planner rates every choice
with the file's roofline on its links (`costs.roofline`, the `simulated` backend's model):

- the views: the roofline at the centre, at the envelope's two far ends (`far_corners`), and
  at the centre with no L2 reuse (`NO_L2_REUSE`: the model's least certain term at its other
  end) and at the kernel-heavy end with no L2 reuse and narrow rows at their dearest
  (`DEAREST_ROWS`) (`envelope_views`);
- the splits: among the same `candidate_splits`, the first after the memory splits being the
  balance rule under each table's kernel time (`kernel_times`) with a table that alone bounds a
  device cut into row ranges (`splitting.bound_variants`), the one whose heuristic placements
  and balanced placement (`balanced_split_place`) have the lowest worst ratio to the best
  plain plan over the views (`envelope_splits`), in the split choice's share of the budget;
- the placement of the shards: the heuristics' placements and the balanced ones
  (`balanced_place`: kernel time, at the centre and at the dearest kernel-heavy view,
  and output width balanced at once), the one with the lowest
  worst ratio over the views searched on their weighted sum, the weights moved towards the
  view it does worst under and a corner of the envelope joining the views when it rates the
  plan worst, until the deadline; the answer is the plan, of the candidates and the rounds',
  with the lowest worst ratio over the views and all the corners, the dearest-rows view
  (outside the envelope) only breaking near-ties (`roofline_best`). The learned policy is
  not weighed (it learned the CPU; `dreamshard_planner.roofline_shards_place` says why);
- the envelope guard (`envelope_choice`): the plan is weighed against the plain heuristics'
  plans (`PlainHeuristic`: whole tables where memory allows, what a user gets without a
  planner) at the file's centre and at every corner of its envelope (`Hardware.corners`),
  each plan by its worst ratio to that point's best plain plan. The answer is the plan with the
  lowest worst ratio, the planned one only if the centre also rates it `HEURISTIC_MARGIN`
  cheaper than the best plain plan, or its worst ratio is that much lower than every plain
  plan's; a plain plan keeps its heuristic's name. The default is
  thus never worse over the envelope, by its worst ratio, than the plain heuristic least
  worse there; it can still be dearer at some corner than that corner's best heuristic (the
  heuristics' ranks change across the envelope, and so may the planned plan's).

TorchRec's estimator is not among the planner's views: it stays an independent judge.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from dreamshard.costs.comm import get_topology
from dreamshard.costs.hardware import Hardware, load_hardware
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.errors import InfeasibleError
from dreamshard.placement.budget import Deadline
from dreamshard.placement.heuristics import HEURISTIC_KEYS
from dreamshard.placement.packing import least_load_dive
from dreamshard.placement.planner import PlanOptions
from dreamshard.placement.splitting import (
    bound_variants,
    candidate_splits,
    choose_splits,
    memory_splits,
    split_place,
)
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.planners.baselines import HeuristicPlanner
from dreamshard.planners.device_search import blended_model, device_search
from dreamshard.tables.shards import Split, pooled_width
from dreamshard.tables.table import Table
from dreamshard.tables.traces import table_batch_size

# The planner's search for the placement whose worst ratio over its views is lowest: searches
# on the views' weighted sum, each view's weight raised by exp(BLEND_RATE x its relative
# excess) after each; the first BLEND_ROUNDS share the time left, and further rounds (up to
# MAX_BLEND_ROUNDS) go on while time is left and a round of the last two found a move. With the
# no-L2 views the weights took 6-7 rounds to settle (428 dlrm tables on 128 GPUs, binding,
# seed 105: the worst ratio over the envelope 1.11 after 4 rounds, 0.98 after 7).
BLEND_ROUNDS = 4
MAX_BLEND_ROUNDS = 16
BLEND_RATE = 8.0
# Each search step takes the best of the first this many neighbours that holds a better one
# (`device_search`'s first_improving): at 856 tables on 64 GPUs a step scored ~11,000
# neighbours (12 ms), and four rounds of the search made ~40 steps in their half second. Of 14
# wide tasks (856 tables, 64 GPUs) 9 planned cheaper by both judges (the roofline's centre and
# TorchRec's estimator) this way and none dearer; of 12 dlrm tasks 5 cheaper and 1 dearer
# (1-2%) (exploratory, 2026-12-07; the envelope studies have the figures).
FIRST_IMPROVING = 2048
# The guard leaves the best plain heuristic only for a plan the centre rates at least this
# much cheaper (`dreamshard_planner.HEURISTIC_MARGIN`, the cost network's margin).
HEURISTIC_MARGIN = 0.02


def planning_hardware(options: PlanOptions) -> Hardware | None:
    """The GPU hardware file `options` plan for, None for the CPU (the cost network's own)."""
    hardware = load_hardware(options.hardware or "cpu")
    return hardware if hardware.is_gpu else None


def roofline_backend(options: PlanOptions) -> SimulatedBackend:
    """The roofline the planner rates with: the file at its centre, on the options' links."""
    return point_backend(planning_hardware(options), options.topology)


def analytic_splits(
    task: PlacementTask, backend: SimulatedBackend | None = None, deadline: Deadline | None = None
) -> tuple:
    """The splits the analytic model picks: among `candidate_splits` (those rated before
    `deadline`), the one whose shards the best heuristic placement (by that model) runs
    cheapest."""
    backend = backend or SimulatedBackend()
    host_size = get_topology(backend.topology).host_size(task.num_devices)
    candidates = candidate_splits(task, host_size=host_size)
    return choose_splits(task, candidates, backend.cheapest, deadline=deadline)[0]


# The envelope's two far ends the split choice weighs beside the centre: where the exchange
# weighs most (fast kernels, the slowest network) and where the kernels do (slow kernels, the
# fastest network). Each envelope constant's end for the first; the second takes the others.
EXCHANGE_HEAVY = {
    "bwd_fwd_ratio": "low",
    "hbm_efficiency": "high",
    "call_floor_ms": "low",
    "inter_gbps": "low",
}


# The L2's reuse is the roofline's least certain term: how many repeats the L2 still holds
# depends on the order of the lookups and on what else streams through it, which sums of a
# table's quantities cannot see (TorchRec's estimator assumes none). An L2 of no bytes holds no
# repeat: every lookup is read from HBM. The planner weighs its placements there too
# (`envelope_views`), so a plan that leans on the L2 (hot tables together) is a risk it sees.
NO_L2_REUSE = {"l2_bytes": 0.0}

# A narrow row's cost is the kernel's other uncertain term: a read of fewer bytes than a memory
# transaction costs the transaction (`row_bytes_min`, 32 to 128 bytes in the GPU files; TorchRec's
# estimator charges a dim under 64 as 32 dims x 1.75, 112 bytes in fp16). The planner's
# kernel-heavy view with no L2 reuse takes it at the file's high end too (`envelope_views`), and
# its balanced start with it (`dreamshard_planner.roofline_shards_place`); outside the envelope,
# that view only breaks near-ties in the search's answer (`roofline_best`'s `secondary`). Of 16
# wide tasks (856 tables on 64/128 GPUs, loose memory) TorchRec's estimator rated the plans 0.808
# of the best plain plan (geometric mean) this way and 0.852 with central rows, the roofline's
# centre 0.701 and 0.676; with the start alone (the view as it was) 0.809 and 0.698, but one
# wide binding task went to 1.07 by TorchRec's estimator (exploratory, 2026-12-07; the envelope
# studies have the figures).
DEAREST_ROWS = "row_bytes_min"


def far_corners(hardware: Hardware) -> list[dict[str, float]]:
    """The exchange-heavy and the kernel-heavy corners of the file's envelope (constants the
    table does not name stay central)."""
    ends = {k: v for k, v in EXCHANGE_HEAVY.items() if k in hardware.envelope}
    other = {"low": "high", "high": "low"}
    return [
        {k: getattr(hardware.constants[k], end) for k, end in ends.items()},
        {k: getattr(hardware.constants[k], other[end]) for k, end in ends.items()},
    ]


def point_backend(hardware: Hardware, topology: str | None) -> SimulatedBackend:
    """The roofline at one point of the file (centre or corner): on the file's links, which a
    corner moves, unless `topology` names other links. The file's own links by name (what
    `place --hardware` plans on: `cli.args.plan_topology`) are the file's: a corner still
    moves them. (Until 2026-12-07 only the point's own name counted, so a plan made on the
    file's named links was weighed at every corner with the centre's bandwidth between hosts:
    the guard and the far corners never saw the slow network the envelope holds.)"""
    centre = replace(hardware, corner={})
    own = topology in (None, hardware.topology_name(), centre.topology_name())
    return SimulatedBackend(topology=None if own else topology, hardware=hardware)


def envelope_splits(
    task: PlacementTask,
    options: PlanOptions,
    plain: dict[str, Placement],
    deadline: Deadline | None = None,
) -> tuple[Split, ...]:
    """Among `candidate_splits`, the one whose heuristic placements or balanced placement
    (`balanced_split_place`) have the lowest worst ratio to the best `plain` plan over the
    views (`envelope_views`): a split the centre likes but the exchange-heavy end does not
    loses to one both accept. Weighed first after the memory splits: the balance rule under
    each table's kernel time at the centre and with no L2 reuse, with the tables that alone
    bound a device cut into row ranges (`splitting.bound_variants`), a column shard weighed
    by its own kernel time (`exact`: a narrow column reads as many bytes a row as its table,
    so more tables stay bound) and as its table's over the parts (fewer tables in row ranges,
    less exchange). Without plain plans, the centre's choice (`analytic_splits`)."""
    views = envelope_views(options)
    if not plain:
        return analytic_splits(task, views[0], deadline)
    refs = [overall_each(view, task, list(plain.values())).min() for view in views]

    def rating(shards: PlacementTask, found: list[Placement]) -> float:
        ratios = [view.overall_many(shards, found) / ref for view, ref in zip(views, refs)]
        return float(np.max(ratios, axis=0).min())

    def balanced(splits: tuple[Split, ...]) -> list[Placement]:
        found = balanced_split_place(task, splits, views[0])
        return [found] if found is not None else []

    host_size = get_topology(views[0].topology).host_size(task.num_devices)
    base = memory_splits(task)
    first = [
        splits
        for view in (views[0], views[NO_L2_CENTRE])
        for key in [kernel_time_key(task, view)]
        for exact in (True, False)
        for splits in bound_variants(task, key, base, host_size, exact=exact)
    ]
    candidates = candidate_splits(task, host_size=host_size, first=first)
    return choose_splits(task, candidates, rating, deadline=deadline, also=balanced)[0]


NO_L2_CENTRE = 3  # `envelope_views`' index of the centre with no L2 reuse (the centre: 0)
KERNEL_HEAVIEST = 4  # and of the kernel-heavy end with no L2 reuse and the dearest rows


def envelope_views(options: PlanOptions) -> list[SimulatedBackend]:
    """The roofline at the file's centre and at the envelope's two far ends (`far_corners`),
    then at the centre with no L2 reuse (`NO_L2_REUSE`) and at the kernel-heavy end with no L2
    reuse and a row's fewest bytes at the file's high end (`DEAREST_ROWS`), on the options'
    links: the views the planner weighs a placement under."""
    hardware = planning_hardware(options)
    far = far_corners(hardware)
    points = [hardware, *(hardware.at(c) for c in far)]
    dearest = {DEAREST_ROWS: hardware.constants[DEAREST_ROWS].high}
    points += [hardware.at(NO_L2_REUSE), hardware.at({**far[1], **NO_L2_REUSE, **dearest})]
    return [point_backend(point, options.topology) for point in points]


def corner_views(hardware: Hardware, topology: str | None) -> list[SimulatedBackend]:
    """The roofline at every corner of the file's envelope (`Hardware.corners`), on
    `topology`'s links (`point_backend`): the points the envelope guard and the study judge a
    plan at."""
    return [point_backend(hardware.at(c), topology) for c in hardware.corners()]


def roofline_best(
    task: PlacementTask,
    candidates: list[Placement],
    views: list[SimulatedBackend],
    deadline: Deadline,
    judged: list[SimulatedBackend] = (),
    secondary: tuple[int, ...] = (),
) -> Placement:
    """Of `candidates` (legal placements of `task`'s shards as they are), the one with the
    lowest worst ratio to the cheapest candidate under each of `views` (the centre first),
    improved until `deadline` by searches on the views' weighted sum
    (`device_search.blended_model`), the weights moved towards the view the plan does worst
    under after each round (`BLEND_ROUNDS`, `MAX_BLEND_ROUNDS`): a search for the plan whose
    worst ratio over the views is lowest, which one weighted sum alone does not find. A point
    of `judged` (the envelope's corners) that rates a round's plan worst of all joins the
    views. The answer is the plan, of the candidates and each round's, with the lowest worst ratio
    over `views` and `judged` together: a search led by a few views can drift to a plan a
    corner rates much dearer (428 dlrm tables on 128 GPUs, binding memory, seed 105: 1.11 of
    the best plain plan after four rounds on the five views). The views indexed by `secondary`
    lead the search but only break near-ties in the answer: of the candidates and the rounds'
    plans within `HEURISTIC_MARGIN` of the lowest worst ratio over the other points, the one
    lowest over all of them (`KERNEL_HEAVIEST`, a point outside the envelope: taken with the
    others, a dlrm plan 1.059 of the best plain plan at a kernel-heavy corner was the answer,
    `envelope_a100` at e559552)."""
    points = [*views, *judged]
    costs = np.array([view.overall_many(task, candidates) for view in points])  # [P, C]
    scale = costs.min(axis=1)
    ratios = costs / scale[:, None]
    start = int(ratios[: len(views)].max(axis=0).argmin())
    current, steps = candidates[start], 0
    active, weights = list(range(len(views))), np.ones(len(views))
    primary = [i for i in range(len(points)) if i not in secondary]

    def seen_at(plan: Placement, at: np.ndarray, taken: int) -> tuple:
        """(plan, its worst ratio over the primary points, over all, search steps to it)"""
        return plan, float(at[primary].max()), float(at.max()), taken

    visited = [seen_at(c, r, 0) for c, r in zip(candidates, ratios.T)]
    idle = 0  # rounds in a row that found no move
    for done in range(MAX_BLEND_ROUNDS):
        if deadline.passed() or idle == 2:
            break
        chosen = [points[i] for i in active]
        model = blended_model(task, chosen, (weights / scale[active]).tolist())
        seconds = deadline.left() / max(BLEND_ROUNDS - done, 1)
        current, _, found = device_search(
            task, current, model, seconds=seconds, first_improving=FIRST_IMPROVING
        )
        steps += found
        idle = 0 if found else idle + 1
        at = np.array([v.overall_many(task, [current])[0] for v in points]) / scale
        visited.append(seen_at(current, at, steps))
        worst = int(at.argmax())
        if worst not in active:  # a corner the search did not weigh rates it worst: weigh it
            active.append(worst)
            weights = np.append(weights, weights.max())
        seen = at[active]
        weights = weights * np.exp(BLEND_RATE * (seen - seen.mean()) / seen.mean())
        weights = weights / weights.sum() * len(active)
    least = min(v[1] for v in visited)
    near = [v for v in visited if v[1] <= least * (1 + HEURISTIC_MARGIN)]
    best, _, _, taken = min(near, key=lambda v: v[2])
    if taken == 0:
        return best
    return Placement(
        best.devices, "dreamshard", f"{candidates[start].candidate} + {taken} roofline search steps"
    )


BALANCED = "kernel time and width balanced"  # the balanced placement's candidate name


def balanced_place(
    task: PlacementTask, backend: SimulatedBackend, name: str = BALANCED
) -> Placement | None:
    """The tables placed to balance two loads at once: each table's kernel time alone by
    `backend`'s roofline (forward and backward, its per-call floor left out: a device pays one
    for all its tables) and its pooled output width (what the all-to-all sends), each over its
    mean a device. Largest first (by the larger of the two), each table to the device with room
    whose larger load would be least with it (`packing.least_load_dive`); None where memory or
    a constraint stops that path. Where memory stops it, the tables' bytes are balanced as a
    third load (each over its mean) and the path tried again: at binding memory (83% of the
    devices' bytes filled, a shard of 94% of one) the two loads alone left the largest tables
    no room (856 dlrm tables on 128 a100s, binding, seeds 100 and 107: TorchRec's estimator
    1.25 and 1.00 of the best plain plan from a heuristic's start; 1.00 and 0.69 from this one,
    exploratory, 2026-12-07).

    Why: the heuristics balance one key each, and which key wins moves across a file's
    envelope: `dim` (the widths) was the best plain plan at the exchange-heavy corner of
    `h100-sxm` on all 32 envelope tasks at commit 7c84972 and the best at the centre on 10,
    and the centre's best plain plan cost up to 1.84x the corner's there. Balancing both keeps
    a plan near the best at both ends: of 16 loose tasks (856 dlrm tables on 64/128 GPUs),
    whole tables so placed rated 0.884 of the best plain plan at the centre (geometric mean)
    and at most 1.002 at any corner (exploratory, 2026-12-07; the envelope study has the
    figures of the planner that uses it)."""
    widths = [pooled_width(t) for t in task.tables]
    loads = np.stack([kernel_times(task, backend), widths], 1)
    totals = loads.sum(axis=0)
    loads = loads[:, totals > 0] / (totals[totals > 0] / task.num_devices)
    if not loads.size:
        return None
    devices = largest_load_first(task, loads)
    if devices is None:  # memory stopped the path: balance the bytes as well
        sizes = task.table_bytes()
        bytes_load = sizes / (sizes.sum() / task.num_devices)
        devices = largest_load_first(task, np.concatenate([loads, bytes_load[:, None]], 1))
    return None if devices is None else Placement(tuple(devices), "dreamshard", name)


def largest_load_first(task: PlacementTask, loads: np.ndarray) -> list[int] | None:
    """`packing.least_load_dive` of the tables by their largest load [T, K], largest first."""
    order = sorted(range(len(loads)), key=lambda i: (-loads[i].max(), i))
    return least_load_dive(task, order, loads)


def kernel_times(
    task: PlacementTask, backend: SimulatedBackend, tables: list[Table] | None = None
) -> np.ndarray:
    """Each of `task`'s tables' (or `tables`', shards of them) kernel time alone by `backend`'s
    roofline, forward and backward, its per-call floor left out (a device pays one for all its
    tables)."""
    kernel, precision = backend.kernel, task.precision
    batch = table_batch_size(task.tables, backend.batch_size)
    sums = kernel.quantities(tables or task.tables, batch, precision)
    fwd, bwd = kernel.predict_sums(sums, precision)
    call = np.zeros((1, sums.shape[1]))
    call[0, 0] = 1.0  # a call with nothing in it (column 0 counts tables): the floor alone
    floor = sum(kernel.predict_sums(call, precision))[0]
    return np.maximum(fwd + bwd - floor, 0.0)


def kernel_time_key(task: PlacementTask, backend: SimulatedBackend) -> Callable[[Table], float]:
    """`kernel_times` as a balance rule's key (`splitting.balance_splits`) that rates a
    shard of a table by its own kernel time (`exact`)."""
    times = dict(zip((t.name for t in task.tables), kernel_times(task, backend).tolist()))

    def key(table: Table) -> float:
        if table.name not in times:
            times[table.name] = float(kernel_times(task, backend, [table])[0])
        return times[table.name]

    return key


def balanced_split_place(
    task: PlacementTask, splits: tuple[Split, ...], backend: SimulatedBackend
) -> Placement | None:
    """`balanced_place` of `task`'s shards under `splits` (pinned shards on their devices:
    `split_place`), None where its path is stopped: what the split choice rates beside the
    heuristics' placements."""

    def balanced(shards: PlacementTask) -> Placement:
        found = balanced_place(shards, backend)
        if found is None:
            raise InfeasibleError("the balanced placement's path was stopped")
        return found

    try:
        return split_place(task, splits, balanced, "dreamshard")
    except InfeasibleError:
        return None


@dataclass(frozen=True)
class EnvelopeChoice:
    """What the guard weighed: the plan kept, and each plan's ratio to the best plain
    heuristic at the centre and its worst over the corners."""

    placement: Placement
    centre: dict[str, float]
    worst: dict[str, float]


def envelope_choice(
    task: PlacementTask,
    planned: Placement,
    plain: dict[str, Placement],
    hardware: Hardware,
    topology: str | None = None,
) -> EnvelopeChoice:
    """Of `planned` and the `plain` plans (heuristic name -> plan), the one with the lowest
    worst ratio to the best plain plan over the file's centre and corners, `planned` only if
    the centre rates it `HEURISTIC_MARGIN` cheaper than the best plain plan or its worst ratio
    is that much below every plain plan's (a plan as cheap as the best plain plan at every
    point, where a memory-forced shard bounds them all, beats a plain plan that is dearer at
    some corner; ties: the centre's cheaper). `topology`: the links planned on (None: the
    file's, which its corners move)."""
    points = [point_backend(hardware, topology), *corner_views(hardware, topology)]
    plans = {"planned": planned, **plain}
    ratios = []  # [points, plans]
    for point in points:
        costs = overall_each(point, task, list(plans.values()))
        ratios.append(costs / costs[1:].min())
    ratios = np.array(ratios)
    worst = ratios.max(axis=0)
    names = list(plans)
    centre = dict(zip(names, ratios[0].tolist()))
    worst_of = dict(zip(names, worst.tolist()))
    least_worst = min(worst_of[n] for n in plain)  # the plain plan least worse over the envelope
    eligible = [
        n
        for n in names
        if n != "planned"
        or centre[n] <= 1 - HEURISTIC_MARGIN
        or worst_of[n] <= (1 - HEURISTIC_MARGIN) * least_worst
    ]
    pick = min(eligible, key=lambda n: (worst_of[n], centre[n]))
    if pick == "planned":
        return EnvelopeChoice(planned, centre, worst_of)
    chosen = replace(plain[pick], candidate=f"heuristic {pick}: the envelope guard")
    return EnvelopeChoice(chosen, centre, worst_of)


class PlainHeuristic(HeuristicPlanner):
    """A heuristic on the memory-forced splits only (whole tables where they fit): the plain
    plan a user gets without a planner."""

    def splits(self, task: PlacementTask, options: PlanOptions) -> tuple[Split, ...]:
        return memory_splits(task)


def plain_heuristics(task: PlacementTask, options: PlanOptions) -> dict[str, Placement]:
    """Each heuristic's plain plan of `task` (`PlainHeuristic`, the task's constraints held)
    that its packing finds."""
    plain = replace(options, split="auto", deadline=None, time_budget=None)
    found = {}
    for key in HEURISTIC_KEYS:
        try:
            found[key] = PlainHeuristic(key).place(task, plain)
        except InfeasibleError:  # its packing gave up; the others may not
            continue
    return found


def overall_each(
    backend: SimulatedBackend, task: PlacementTask, plans: list[Placement]
) -> np.ndarray:
    """Each plan's overall cost by `backend`, the plans of one split set rated together
    (`overall_many` takes placements that share their splits)."""
    costs = np.empty(len(plans))
    groups: dict[tuple, list[int]] = {}
    for i, plan in enumerate(plans):
        groups.setdefault(plan.splits, []).append(i)
    for members in groups.values():
        costs[members] = backend.overall_many(task, [plans[i] for i in members])
    return costs
