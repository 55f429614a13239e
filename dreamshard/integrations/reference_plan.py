"""The reference a plan for TorchRec is weighed against (`placement.reference`): TorchRec's
planner on the same model, topology, reservation, batch and constraints (`DreamShardPlanner`),
or on the same task (`place --format torchrec`: `--method torchrec`'s request, every sharding
type that maps to ours), given a quarter of the time budget as its `timeout_seconds`; where it
declines, errs, is not given the time (a quarter under its one-second minimum) or makes a plan
we cannot read or that breaks the task, the best whole-table heuristic by the planner's own
prediction. TorchRec is imported only when its planner is asked.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from functools import partial

from dreamshard.errors import DreamshardError, InfeasibleError
from dreamshard.integrations.plan_reading import placement_from_sharding
from dreamshard.integrations.torchrec_planner import quiet_torchrec, torchrec_place
from dreamshard.placement.budget import default_time_budget
from dreamshard.placement.constraints import (
    OUR_TYPES,
    SHARDING_KINDS,
    Constraints,
    joined,
    sharding_problem,
)
from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place
from dreamshard.placement.reference import weigh
from dreamshard.placement.registry import place, registrations
from dreamshard.placement.splitting import pinned_shards
from dreamshard.placement.tasks import (
    Placement,
    PlacementTask,
    placement_problem,
    placement_task,
)
from dreamshard.tables.shards import Split

TORCHREC = "torchrec"
# of the reference's whole tables, the smallest (rows x dim) made data-parallel besides its own
# replicas, one candidate a share (`more_replicas`). A probe in CPU DMP steps here (2 gloo ranks,
# one launch of 4-8 interleaved rounds a task) measured TorchRec's plan so changed at 0.968 /
# 0.965 / 0.952 of its step at 20 / 30 / 40% on test tasks 0-3 of cpu-24x2 and 0.922 / 0.916 /
# 0.917 on tasks 0-2 of cpu-80x2 (on tasks 8-15, the tune study's, 0.93-0.97 likewise). On
# tasks 8-15 of cpu-24x2 its own replicas held tables of mostly up to ~50,000 values; these
# added the next smallest, up to ~200,000
REPLICA_SHARES = (0.2, 0.3, 0.4)
TORCHREC_SHARE = 0.25  # of the time budget, at most, for TorchRec's planner
MIN_TIMEOUT_S = 1  # TorchRec's timeout_seconds is whole seconds
# DreamShardPlanner's budget when none is given: the method's default, but at least enough for
# TorchRec's planner to be given its one second
MIN_BUDGET_S = MIN_TIMEOUT_S / TORCHREC_SHARE


@dataclass(frozen=True)
class Reference:
    """The reference plan: our placement of it, TorchRec's `ShardingPlan` where it is
    TorchRec's (None: a heuristic's, exported like ours), and why it is what it is."""

    name: str  # "torchrec" or "heuristic <key>"
    placement: Placement
    sharding_plan: object | None
    note: str
    seconds: float


def torchrec_timeout(budget_s: float) -> int:
    """TorchRec's `timeout_seconds` within a quarter of `budget_s` (0: none fits)."""
    return int(math.floor(budget_s * TORCHREC_SHARE + 1e-9))


def reference_budget(num_tables: int, given: float | None = None) -> float:
    """Seconds for a plan weighed against TorchRec's: `given`, else the default budget, at
    least `MIN_BUDGET_S` (TorchRec's one second is a quarter of it)."""
    return given or max(MIN_BUDGET_S, default_time_budget(num_tables))


def not_given(budget_s: float) -> str | None:
    """Why TorchRec's planner is not run within `budget_s`, or None where it is."""
    if torchrec_timeout(budget_s) >= MIN_TIMEOUT_S:
        return None
    return (
        f"TorchRec's planner not run: a quarter of the {budget_s:g} s budget is under its "
        f"{MIN_TIMEOUT_S} s minimum"
    )


def weigh_plan(reference: Reference, placement: Placement, ours_ms: float, predict, calibration):
    """The reference rule's `Verdict` on the method's `placement` (predicted `ours_ms`) and
    the reference; a placement that is the reference's is the reference, kept."""
    if (reference.placement.devices, reference.placement.splits) == (
        placement.devices,
        placement.splits,
    ):
        same = weigh(reference.name, 1.0, 1.0, calibration)
        return replace(same, kept_reference=True, reason="the method's plan is the reference's")
    return weigh(reference.name, ours_ms, predict(reference.placement), calibration)


def torchrec_reference(planner, module, sharders: list, task: PlacementTask, tables, budget_s):
    """TorchRec's plan of `module` as `planner` (a DreamShardPlanner) would be asked, read
    back as our placement of `task`; None and why where it gives none we can use."""
    why = not_given(budget_s)
    if why:
        return None, why
    timeout = torchrec_timeout(budget_s)
    from torchrec.distributed.planner import EmbeddingShardingPlanner

    started = time.perf_counter()
    try:
        with quiet_torchrec():
            plan = EmbeddingShardingPlanner(
                topology=planner.topology,
                batch_size=planner.batch_size,
                storage_reservation=planner.reservation(),
                constraints=planner.torchrec_constraints(tables),
                timeout_seconds=timeout,
            ).plan(module, sharders)
    except Exception as exc:  # TorchRec declined (PlannerError) or failed: the heuristic then
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return None, f"TorchRec's planner gave no plan ({line[:200]})"
    seconds = time.perf_counter() - started
    entries = {}
    for t in tables:
        module_plan = plan.plan.get(t.module_path) or {}
        if t.config_name not in module_plan:
            return None, f"TorchRec's plan has no entry for table {t.table.name}"
        entries[t.table.name] = module_plan[t.config_name]
    try:
        placement = placement_from_sharding(task, entries, TORCHREC)
    except DreamshardError as exc:  # a sharding type we do not map, an odd tiling
        return None, f"TorchRec's plan cannot be read as ours ({exc})"
    problem = placement_problem(task, placement) or sharding_problem(
        task.constraints, placement.splits
    )
    if problem:
        return None, f"TorchRec's plan breaks the task ({problem})"
    note = f"TorchRec's planner, {seconds:.2f} s (timeout_seconds={timeout})"
    return Reference(TORCHREC, placement, plan, note, seconds), None


def heuristic_reference(task: PlacementTask, predict, why: str) -> Reference | None:
    """The whole-table heuristic placement `predict` (placement -> ms) rates cheapest; None
    where none is legal (the task's constraints shard a table, say)."""
    started = time.perf_counter()
    found = whole_heuristics(task, predict)
    if not found:
        return None
    placement = found[0]
    key = placement.candidate.removeprefix("heuristic ")
    note = f"{why}; the best whole-table heuristic by the planner's model: {key}"
    return Reference(placement.candidate, placement, None, note, time.perf_counter() - started)


def whole_heuristics(task: PlacementTask, predict) -> list[Placement]:
    """The legal whole-table heuristic placements of `task` (each named "heuristic KEY"),
    cheapest by `predict` (placement -> ms) first."""
    found = []
    for key in HEURISTIC_KEYS:
        try:
            placement = greedy_place(task, key)
        except InfeasibleError:
            continue
        if placement_problem(task, placement) or sharding_problem(task.constraints, ()):
            continue
        found.append((predict(placement), key, replace(placement, candidate=f"heuristic {key}")))
    return [placement for _, _, placement in sorted(found, key=lambda item: item[:2])]


def layout_of(task: PlacementTask, placement: Placement) -> Constraints | None:
    """`placement`'s layout as constraints: each table it cuts cut the same way (`sharding`),
    the others whole (`no_split`); None where it cuts one in a way no constraint asks for (a
    table-row-wise table, a row-wise one not over every device)."""
    sharding = []
    for split in placement.splits:
        kind = OUR_TYPES[split.kind]
        if kind not in SHARDING_KINDS or (kind == "row_wise" and split.parts != task.num_devices):
            return None
        sharding.append((split.table, kind, split.parts if kind == "column_wise" else 0))
    cut = {name for name, _, _ in sharding}
    whole = tuple(t.name for t in task.tables if t.name not in cut)
    return Constraints(sharding=tuple(sharding), no_split=whole)


def on_layout(task: PlacementTask, reference: Reference, method, predict) -> list[Placement]:
    """Plans on the reference's layout (`layout_of`: its tables cut as it cuts them, its
    replicas kept, the others whole) with the tables placed again: by `method` (task ->
    placement) first, then by each whole-table heuristic, cheapest by `predict`
    first; each named "... on REFERENCE's layout". Empty where the layout cannot be asked
    for; a placer the task's own constraints stop gives none."""
    layout = layout_of(task, reference.placement)
    if layout is None:
        return []
    bound = replace(task, constraints=joined(layout, task.constraints))
    found = []
    heuristics = [partial(heuristic_on, r.name) for r in registrations("heuristic")]
    for make in [method, *heuristics]:
        try:
            placement = make(bound)
        except (DreamshardError, InfeasibleError):  # the layout conflicts with the task's own
            continue
        if placement_problem(bound, placement):
            continue
        found.append((make is not method, predict(placement), placement))
    return [
        replace(p, candidate=f"{p.candidate or p.method} on {reference.name}'s layout")
        for _, _, p in sorted(found, key=lambda item: item[:2])
    ]


def more_replicas(
    task: PlacementTask, reference: Reference, shares: tuple[float, ...] = REPLICA_SHARES
) -> list[Placement]:
    """The reference with more of its tables data-parallel: for each share, that share of its
    whole tables (at least one), the smallest by rows x dim, replicated on every device, the
    rest where the reference has them; each named "REFERENCE + N tables data-parallel". A
    small table's replicas trade its all-to-alls for an all-reduce of its gradients and
    spread its lookups over every device; which trade pays depends on the hardware, so these
    are candidates to measure (`tune`), not a rule. Tables the task keeps whole or whose
    sharders offer no data_parallel stay as they are; only plans legal for the task (memory,
    the task's constraints), each share's count once."""
    placement, rules = reference.placement, task.constraints
    cut = {split.table for split in placement.splits}
    whole = sorted(
        (t for t in task.tables if t.name not in cut), key=lambda t: (t.rows * t.dim, t.name)
    )
    if rules:  # a table the user keeps whole, or whose sharder offers no data_parallel, stays
        whole = [
            t for t in whole if t.name not in rules.no_split and rules.allows(t.name, "replica")
        ]
    if not whole:
        return []
    where = dict(zip((t.name for t in placement_task(task, placement).tables), placement.devices))
    found, counts = [], set()
    for share in shares:
        count = max(1, round(share * len(whole)))
        if count in counts:
            continue
        counts.add(count)
        splits = (
            *placement.splits,
            *(Split(t.name, "replica", task.num_devices) for t in whole[:count]),
        )
        shards = placement_task(task, replace(placement, splits=splits))
        pinned = pinned_shards(shards, splits)  # a new replica r on device r
        devices = tuple(
            where[shard.name] if shard.name in where else pinned[i]
            for i, shard in enumerate(shards.tables)
        )
        plan = replace(
            placement,
            devices=devices,
            splits=splits,
            candidate=f"{reference.name} + {count} tables data-parallel",
        )
        if not placement_problem(task, plan) and not sharding_problem(task.constraints, splits):
            found.append(plan)
    return found


def plan_key(task: PlacementTask, placement: Placement) -> tuple:
    """What makes two placements of `task` the same plan: each shard's device, whatever the
    order the splits are listed in."""
    shards = placement_task(task, placement).tables
    return tuple(sorted((shard.name, device) for shard, device in zip(shards, placement.devices)))


def interleaved(first: list, second: list) -> list:
    """The two lists taken in turn, the first's first; the longer's rest at the end."""
    out = []
    for i in range(max(len(first), len(second))):
        out += first[i : i + 1] + second[i : i + 1]
    return out


def distinct_name(name: str, taken: set[str]) -> str:
    """`name`, or where another candidate has it already (the candidates come from the
    reference, its layout, the method and the heuristics, each naming its own), `name`
    numbered: "heuristic dim #2"."""
    said, n = name, 2
    while said in taken:
        said, n = f"{name} #{n}", n + 1
    return said


def heuristic_on(method: str, task: PlacementTask) -> Placement:
    """Heuristic `method`'s placement of `task` with the splits its constraints ask for."""
    return replace(place(task, method, split="auto"), candidate=f"heuristic {method}")


def task_reference(task: PlacementTask, predict, budget_s: float, **torchrec) -> Reference | None:
    """The reference for a plan of `task` written for TorchRec (`place --format torchrec`):
    `torchrec_place` of the task (`torchrec`: its split, topology and hardware), else the best
    whole-table heuristic by `predict` (None: neither is a legal plan of the task)."""
    why = not_given(budget_s)
    if why:
        return heuristic_reference(task, predict, why)
    timeout = torchrec_timeout(budget_s)
    started = time.perf_counter()
    try:
        placement = torchrec_place(task, reserve=False, timeout=timeout, **torchrec)
    except DreamshardError as exc:
        return heuristic_reference(task, predict, f"TorchRec's planner gave no plan ({exc})")
    seconds = time.perf_counter() - started
    note = f"TorchRec's planner, {seconds:.2f} s (timeout_seconds={timeout})"
    return Reference(TORCHREC, replace(placement, method=TORCHREC), None, note, seconds)
