"""The main job: make a suite, place its test tasks with every planner, measure, compare."""

from __future__ import annotations

import time

import numpy as np

from dreamshard.costs.types import CostBackend
from dreamshard.evaluation.rounds import geometric_mean, measure_interleaved
from dreamshard.methods import place
from dreamshard.placement.heuristics import HEURISTIC_KEYS, PLANNERS
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.progress import Progress
from dreamshard.report import format_table


def run_demo(suite_name: str, num_tasks: int, rounds: int, backend: CostBackend) -> None:
    spec = parse_suite_name(suite_name, num_train_tasks=1, num_test_tasks=num_tasks)
    print(f"making suite {spec.name} ({num_tasks} test tasks)...", flush=True)
    suite = make_suite(spec)
    methods = list(PLANNERS)
    items, plan_ms = [], {m: [] for m in methods}
    for task in suite.test_tasks:
        for method in methods:
            start = time.perf_counter()
            items.append((task, place(task, method)))
            plan_ms[method].append((time.perf_counter() - start) * 1000)
    total = len(items) * rounds
    print(
        f"measuring {len(items)} placements x {rounds} interleaved rounds on {backend.name}...",
        flush=True,
    )

    progress = Progress(total, "  measuring")
    costs = measure_interleaved(
        backend,
        items,
        rounds,
        on_measure=lambda r, i, cost: progress.step(f"{items[i][0].name} {items[i][1].method}"),
    )
    progress.close()
    # costs[round, task * len(methods) + method]
    costs = costs.reshape(rounds, num_tasks, len(methods))
    heuristics = [methods.index(m) for m in HEURISTIC_KEYS]
    best = costs[:, :, heuristics].min(axis=2, keepdims=True)  # per task and round
    ratio = geometric_mean(costs / best, axis=0)  # [task, method], paired within rounds
    winner = costs.mean(axis=0).argmin(axis=1)  # per task: the planner with the lowest mean
    rows = []
    for j, method in enumerate(methods):
        wins = int((winner == j).sum())
        rows.append(
            [
                method,
                float(costs[:, :, j].mean()),
                float(ratio[:, j].mean()),
                float(ratio[:, j].max()),
                wins,
                float(np.mean(plan_ms[method])),
            ]
        )
    print(
        format_table(
            [
                "planner",
                "mean cost ms",
                "vs best heuristic (mean)",
                "(worst)",
                "best on tasks",
                "plan ms",
            ],
            rows,
        )
    )
    print(
        f"cost: the slowest device's fwd_comp + fwd_comm + bwd_comm + bwd_comp per training "
        f"step, {backend.name} backend; ratios are to the best heuristic on each task, paired "
        "within each round. Every placement is memory-legal."
    )
