"""The baselines' placing rules: random placement and the memory-aware greedy heuristics of the
paper (registered as planners in `planners.baselines`; the split ratings and training's warm
start use them directly).

The greedy rule (the paper's): sort tables by a cost key, largest first, and put each on the
device with the smallest accumulated key that still has room. Unlike the original code, every
rule respects memory (random included) and raises InfeasibleError instead of overloading the
last device.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import numpy as np

from dreamshard.lazy import load_object
from dreamshard.placement.packing import (
    assign_within_memory,
    largest_first,
    least_load_dive,
)
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.tables.table import Table

# What each greedy heuristic balances across devices.
HEURISTIC_KEYS: dict[str, Callable[[Table], float]] = {
    "dim": lambda t: float(t.dim),
    "size": lambda t: float(t.size),
    "lookup": lambda t: t.dim * t.pooling_factor,
    "size_lookup": lambda t: t.dim * t.pooling_factor * math.log10(t.rows),
}


def heuristic_keys(task: PlacementTask, key_name: str) -> np.ndarray:
    key = HEURISTIC_KEYS[key_name]
    return np.array([key(t) for t in task.tables], dtype=np.float64)


def key_order(task: PlacementTask, key_name: str) -> tuple[np.ndarray, list[int]]:
    """The heuristic's keys of the task's tables and the order it places them in: largest key
    first, ties by index."""
    keys = heuristic_keys(task, key_name)
    return keys, sorted(range(len(keys)), key=lambda i: (-keys[i], i))


def greedy_place(task: PlacementTask, key_name: str) -> Placement:
    """Largest key first, each to the device with the smallest key sum that has room."""
    keys, order = key_order(task, key_name)

    def smallest_load_first(_table, load, _used):
        return np.argsort(load, kind="stable")

    devices = least_load_dive(task, order, keys)  # the search's first path, when memory allows
    if devices is None:
        devices = assign_within_memory(task, order, smallest_load_first, key_name, keys)
    return Placement(tuple(devices), method=key_name)


def quick_greedy_place(task: PlacementTask, key_name: str) -> Placement:
    """`greedy_place` where its first path holds (the plain greedy, memory allowing); where
    memory stops that path, the same preference with the tables largest first (the first path
    of the packing search's second try), and only where that is stopped too, `greedy_place`'s
    search. A few milliseconds at 856 tables on 128 devices where the search can take a tenth
    of a second: what split candidates are rated on (`placement.splitting`), where many are
    weighed within a planner's budget and a close placement rates a candidate as well."""
    keys, order = key_order(task, key_name)
    devices = least_load_dive(task, order, keys)
    if devices is None:
        devices = least_load_dive(task, largest_first(task), keys)
    if devices is None:
        return greedy_place(task, key_name)
    return Placement(tuple(devices), method=key_name)


def random_place(task: PlacementTask, seed: int = 0) -> Placement:
    """Each table on a uniformly random device with room (largest tables placed first)."""
    rng = np.random.default_rng(seed)

    def any_device(_table, _load, _used):
        return rng.permutation(task.num_devices)

    devices = assign_within_memory(task, largest_first(task), any_device, "random")
    return Placement(tuple(devices), method="random")


def __getattr__(name: str):
    """`PLANNERS` and `Planner`, from before the planner registry (0.2), for one release."""
    new = {
        "PLANNERS": ("dreamshard.placement.registry:baseline_planners", True),
        "Planner": ("dreamshard.placement.planner:SeededPlanner", False),
    }
    if name not in new:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    target, call = new[name]
    warnings.warn(
        f"dreamshard.placement.heuristics.{name} is now {target.replace(':', '.')}"
        f"{'()' if call else ''}; the old name goes in dreamshard 0.3",
        DeprecationWarning,
        stacklevel=2,
    )
    found = load_object(target)
    return found() if call else found
