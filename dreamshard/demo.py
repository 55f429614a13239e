"""The main job: make a suite, place its test tasks with every planner, print a comparison."""

from __future__ import annotations

import time

import numpy as np

from dreamshard.planners import PLANNERS, heuristic_keys, place
from dreamshard.report import format_table
from dreamshard.suites import make_suite, parse_suite_name
from dreamshard.tasks import device_memory


def imbalance(load: np.ndarray) -> float:
    """Most loaded device over the mean: 1.0 is perfectly balanced."""
    return float(load.max() / load.mean()) if load.mean() > 0 else 1.0


def run_demo(suite_name: str, num_tasks: int) -> None:
    spec = parse_suite_name(suite_name, num_train_tasks=1, num_test_tasks=num_tasks)
    print(f"making suite {spec.name} ({num_tasks} test tasks)...", flush=True)
    suite = make_suite(spec)
    rows = []
    for method in PLANNERS:
        lookups, fills, times = [], [], []
        for task in suite.test_tasks:
            start = time.perf_counter()
            placement = place(task, method)
            times.append(time.perf_counter() - start)
            devices = np.asarray(placement.devices)
            keys = heuristic_keys(task, "lookup")
            load = np.bincount(devices, weights=keys, minlength=task.num_devices)
            lookups.append(imbalance(load))
            fills.append(device_memory(task, placement).max() / task.memory_cap_bytes)
        rows.append(
            [
                method,
                float(np.mean(lookups)),
                float(np.max(lookups)),
                float(np.max(fills)),
                float(np.mean(times) * 1000),
            ]
        )
    print(
        format_table(
            ["planner", "lookup imbalance (mean)", "(worst)", "max memory fill", "ms per task"],
            rows,
        )
    )
    print("lookup imbalance: the busiest device's sum of dim*pooling over the mean (1.0 = even);")
    print("a proxy for compute until placements are measured. Every placement is memory-legal.")
