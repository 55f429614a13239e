"""Evaluating planners on held-out tasks: place with each, measure in interleaved rounds, compare.

Every (task, planner) placement is measured once per round, rounds interleaved in a fresh order
(`dreamshard.compare`), and every measurement is stored in the cost dataset under a key that
includes its round: re-running an evaluation with the same inputs reads the stored costs instead
of measuring again, and a run killed half-way measures only what is missing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dreamshard.collect import Job, measure_and_store
from dreamshard.compare import geometric_mean
from dreamshard.costs import COST_TERMS, CostBackend, PlacementCost
from dreamshard.dataset import CostDataset
from dreamshard.planners import HEURISTIC_KEYS
from dreamshard.progress import Progress
from dreamshard.table_io import table_to_dict
from dreamshard.tasks import Placement, PlacementTask, device_memory

EVAL_ROUND_BASE = 1000  # evaluation rounds are stored as rounds 1000, 1001, ... (collection: 0)

PlannerFn = Callable[[PlacementTask], Placement]


@dataclass
class Evaluation:
    """Costs of every planner's placement of every task, per interleaved round."""

    tasks: list[PlacementTask]
    planners: list[str]
    placements: list[list[Placement]]  # [task][planner]
    costs: np.ndarray  # [round, task, planner] overall ms
    breakdowns: list[list[list[dict]]]  # [task][planner][device] mean ms per term over rounds
    plan_seconds: np.ndarray  # [task, planner]
    backend: str

    @property
    def heuristics(self) -> list[str]:
        return [p for p in self.planners if p in HEURISTIC_KEYS]

    def ratios_to(self, reference: np.ndarray) -> np.ndarray:
        """[task, planner]: geometric mean over rounds of cost / reference (paired per round)."""
        return geometric_mean(self.costs / reference[:, :, None], axis=0)

    def per_task_best_heuristic(self) -> np.ndarray:
        """[round, task]: the cheapest heuristic's cost in each round."""
        columns = [self.planners.index(h) for h in self.heuristics]
        best_by_mean = self.costs[:, :, columns].mean(axis=0).argmin(axis=1)  # per task
        return np.stack(
            [self.costs[:, t, columns[b]] for t, b in enumerate(best_by_mean)], axis=1
        )

    def strongest_heuristic(self) -> str:
        """The fixed heuristic with the best mean cost over the tasks (the paper's baseline)."""
        means = {h: self.costs[:, :, self.planners.index(h)].mean() for h in self.heuristics}
        return min(means, key=means.__getitem__)

    def summary_rows(self) -> list[dict]:
        """Per planner: mean cost, ratios to the strongest and per-task best heuristic, wins."""
        strongest = self.costs[:, :, self.planners.index(self.strongest_heuristic())]
        vs_strongest = self.ratios_to(strongest)
        vs_best = self.ratios_to(self.per_task_best_heuristic())
        winner = self.costs.mean(axis=0).argmin(axis=1)
        rows = []
        for j, planner in enumerate(self.planners):
            rows.append({
                "planner": planner,
                "mean_cost_ms": float(self.costs[:, :, j].mean()),
                "vs_strongest_heuristic": float(geometric_mean(vs_strongest[:, j])),
                "vs_best_heuristic": float(geometric_mean(vs_best[:, j])),
                "vs_best_heuristic_worst": float(vs_best[:, j].max()),
                "best_on_tasks": int((winner == j).sum()),
                "plan_ms": float(self.plan_seconds[:, j].mean() * 1000),
            })  # fmt: skip
        return rows

    def paired_ratio(self, planner: str, reference: str) -> float:
        """Geometric mean over tasks and rounds of planner cost / reference cost."""
        a = self.costs[:, :, self.planners.index(planner)]
        b = self.costs[:, :, self.planners.index(reference)]
        return float(geometric_mean((a / b).ravel()))

    def to_dict(self) -> dict:
        """Everything a report or the dashboard needs, as plain JSON."""
        return {
            "backend": self.backend,
            "planners": self.planners,
            "strongest_heuristic": self.strongest_heuristic(),
            "summary": self.summary_rows(),
            "tasks": [
                {
                    "name": task.name,
                    "num_devices": task.num_devices,
                    "memory_cap_bytes": task.memory_cap_bytes,
                    "precision": task.precision,
                    "tables": [table_to_dict(t) for t in task.tables],
                    "results": {
                        planner: {
                            "placement": list(self.placements[t][j].devices),
                            "memory_bytes": device_memory(task, self.placements[t][j]).tolist(),
                            "costs_ms": self.costs[:, t, j].tolist(),
                            "devices": self.breakdowns[t][j],
                            "plan_seconds": float(self.plan_seconds[t, j]),
                        }
                        for j, planner in enumerate(self.planners)
                    },
                }
                for t, task in enumerate(self.tasks)
            ],
        }


def place_all(
    tasks: Sequence[PlacementTask], planners: dict[str, PlannerFn]
) -> tuple[list[list[Placement]], np.ndarray]:
    """Every task placed by every planner, with each planner's wall time."""
    placements, seconds = [], np.zeros((len(tasks), len(planners)))
    for t, task in enumerate(tasks):
        row = []
        for j, planner in enumerate(planners.values()):
            start = time.perf_counter()
            row.append(planner(task))
            seconds[t, j] = time.perf_counter() - start
        placements.append(row)
    return placements, seconds


def mean_breakdown(costs: list[PlacementCost]) -> list[dict]:
    """Per device, the mean of each cost term over rounds."""
    devices = len(costs[0].devices)
    return [
        {term: float(np.mean([getattr(c.devices[d], term) for c in costs])) for term in COST_TERMS}
        for d in range(devices)
    ]


def evaluate(
    tasks: Sequence[PlacementTask],
    planners: dict[str, PlannerFn],
    backend: CostBackend,
    dataset: CostDataset,
    rounds: int = 3,
    suite_name: str = "",
    seed: int = 0,
    measure: Callable[[Job], PlacementCost] | None = None,
) -> Evaluation:
    """Place every task with every planner and measure all placements in interleaved rounds.

    `measure(job)` may replace the stored-or-measure step (a Prefect task with retries does);
    by default it is `measure_and_store` on `backend` and `dataset`.
    """
    tasks = list(tasks)
    names = list(planners)
    placements, plan_seconds = place_all(tasks, planners)
    if measure is None:
        measure = lambda job: measure_and_store(job, backend, dataset, suite_name)[0]  # noqa: E731

    items = [(t, j) for t in range(len(tasks)) for j in range(len(names))]
    costs = np.zeros((rounds, len(tasks), len(names)))
    seen: dict[tuple[int, int], list[PlacementCost]] = {item: [] for item in items}
    rng = np.random.default_rng(seed)
    progress = Progress(rounds * len(items), f"evaluating on {backend.name}")
    for r in range(rounds):
        for i in rng.permutation(len(items)):
            t, j = items[i]
            cost = measure(Job(tasks[t], placements[t][j], EVAL_ROUND_BASE + r))
            costs[r, t, j] = cost.overall
            seen[(t, j)].append(cost)
            progress.step(f"{tasks[t].name} {names[j]}: {cost.overall:.2f} ms")
    progress.close()
    breakdowns = [[mean_breakdown(seen[(t, j)]) for j in range(len(names))]
                  for t in range(len(tasks))]  # fmt: skip
    return Evaluation(tasks, names, placements, costs, breakdowns, plan_seconds, backend.name)


def summary_table(evaluation: Evaluation) -> tuple[list[str], list[list[object]]]:
    """Header and rows of the evaluation's summary for `report.format_table`."""
    header = ["planner", "mean cost ms", "vs strongest heuristic", "vs best heuristic (mean)",
              "(worst)", "best on tasks", "plan ms"]  # fmt: skip
    rows = [[r["planner"], r["mean_cost_ms"], r["vs_strongest_heuristic"], r["vs_best_heuristic"],
             r["vs_best_heuristic_worst"], r["best_on_tasks"], r["plan_ms"]]
            for r in evaluation.summary_rows()]  # fmt: skip
    return header, rows

