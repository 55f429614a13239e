"""How far a measured plan is from balanced: its mean device load, a task's tables timed alone,
the floor of its costliest table, and what the plan's slowest device holds.

A plan's cost is its slowest device's; its mean device load is what it would cost were its
work spread evenly. The least mean load among a task's measured plans is the balanced bound
`benchmarks/split_tables.py` holds every plan to (docs/splitting.md).
"""

from __future__ import annotations

import numpy as np

from dreamshard.costs.comm import get_topology, transfer_ms
from dreamshard.costs.types import CostBackend, PlacementCost
from dreamshard.evaluation.results import Evaluation
from dreamshard.placement.tasks import Placement, PlacementTask, placement_task


def kernel_ms(cost: PlacementCost) -> float:
    """The placement's kernels, forward and backward, summed over its devices."""
    return sum(d.fwd_comp + d.bwd_comp for d in cost.devices)


def mean_load(cost: PlacementCost) -> float:
    """A plan's mean device load: per device its kernels and its exchange, without the wait
    for the slowest forward (fwd_comm - bwd_comm under the modeled exchange), over devices."""
    return float(np.mean([d.total - (d.fwd_comm - d.bwd_comm) for d in cost.devices]))


def mean_loads(
    costs: list[list[PlacementCost]], index: dict[tuple[int, int], int], tasks: int, planners: int
) -> np.ndarray:
    """[round, task, planner]: each plan's `mean_load` in each round, from the costs of its
    item (`evaluate.distinct_items`); NaN where the planner declined."""
    return np.array(
        [
            [
                [
                    mean_load(row[index[(t, j)]]) if (t, j) in index else np.nan
                    for j in range(planners)
                ]
                for t in range(tasks)
            ]
            for row in costs
        ]
    )


def tables_alone(task: PlacementTask) -> tuple[PlacementTask, Placement]:
    """Every table of `task` alone in its own kernel (one device each), to measure."""
    n = len(task.tables)
    spread = PlacementTask(task.tables, n, task.memory_cap_bytes, task.precision, task.name)
    return spread, Placement(tuple(range(n)), "alone")


def tables_alone_bound(
    task: PlacementTask, alone: list[PlacementCost], topology: str = "cpu-gloo"
) -> np.ndarray:
    """Per round, from `tables_alone`'s costs: the tables' kernels summed, over the devices,
    plus the exchange of a perfectly balanced plan (every device the mean width; forward and
    backward)."""
    batch = alone[0].info["batch"]
    width = sum(t.dim for t in task.tables) / task.num_devices
    even = transfer_ms(np.full(task.num_devices, width), batch, get_topology(topology))[0]
    return np.array([kernel_ms(c) / task.num_devices + 2 * even for c in alone])


def costliest_table_ms(task: PlacementTask, backend: CostBackend) -> float:
    """The costliest table's own cost, alone on one device (no exchange). Where a backend's
    device terms only grow as tables join a device and the exchange only adds (the analytic
    model), no table-wise placement of the task costs less: a floor."""
    alone = [PlacementTask((t,), 1, task.memory_cap_bytes, task.precision) for t in task.tables]
    return max(backend.measure(one, Placement((0,))).overall for one in alone)


def device_figures(evaluation: Evaluation, t: int, j: int) -> dict:
    """A placement's mean total per device over the rounds, its shards per device, and which
    shards its slowest device holds (the first four)."""
    totals = [sum(d.values()) for d in evaluation.breakdowns[t][j]]
    placement = evaluation.placements[t][j]
    tables = placement_task(evaluation.tasks[t], placement).tables
    slowest = int(np.argmax(totals))
    held = [tables[i].name for i, d in enumerate(placement.devices) if d == slowest]
    return {
        "total_ms": totals,
        "shards": np.bincount(placement.devices, minlength=len(totals)).tolist(),
        "slowest": slowest,
        "slowest_shards": len(held),
        "slowest_holds": held if len(held) <= 4 else held[:4] + [f"... {len(held) - 4} more"],
    }
