"""What a model was trained on, and whether a task lies outside it (the planner still places).

A model keeps the ranges of its training tasks in its metadata: tables per task, devices,
rows, dim and pooling factor. A task outside them is placed all the same (the default planner
weighs the heuristics too), but the plan and the command say so in one line.
"""

from __future__ import annotations

from collections.abc import Sequence

from dreamshard.placement.tasks import PlacementTask


def training_ranges(tasks: Sequence[PlacementTask]) -> dict[str, list[float]]:
    """[min, max] of each quantity over the training tasks and their tables."""
    tables = [t for task in tasks for t in task.tables]
    values = {
        "tables per task": [len(task.tables) for task in tasks],
        "devices": [task.num_devices for task in tasks],
        "rows": [t.rows for t in tables],
        "dim": [t.dim for t in tables],
        "pooling factor": [t.pooling_factor for t in tables],
    }
    return {name: [min(v), max(v)] for name, v in values.items()}


def outside_training(task: PlacementTask, ranges: dict | None) -> str | None:
    """One line naming what in `task` lies outside `ranges`; None inside, or without ranges."""
    if not ranges:
        return None
    seen = {
        "tables per task": [len(task.tables)] * 2,
        "devices": [task.num_devices] * 2,
        "rows": [min(t.rows for t in task.tables), max(t.rows for t in task.tables)],
        "dim": [min(t.dim for t in task.tables), max(t.dim for t in task.tables)],
        "pooling factor": [
            min(t.pooling_factor for t in task.tables),
            max(t.pooling_factor for t in task.tables),
        ],
    }
    outside = [
        f"{name} {low:g}-{high:g} (trained on {ranges[name][0]:g}-{ranges[name][1]:g})"
        for name, (low, high) in seen.items()
        if name in ranges and (low < ranges[name][0] or high > ranges[name][1])
    ]
    if not outside:
        return None
    return "outside what the model was trained on: " + "; ".join(outside)
