"""Evaluating planners on held-out tasks: place with each, measure in interleaved rounds, compare.

Every (task, planner) placement is measured once per round, rounds interleaved in a fresh order
(`dreamshard.evaluation.rounds`), and every measurement is stored in the cost dataset under a
key that includes its round: re-running an evaluation with the same inputs reads the stored
costs instead of measuring again, and a run killed half-way measures only what is missing.

A planner may decline a task (TorchRec's planner rejecting it, an RNN trained for another device
count) when `evaluate` is told which exceptions mean so: the placement is then None, its costs
NaN, and the reason is kept in `Evaluation.declined`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from dreamshard.costs.collect import Job, measure_and_store
from dreamshard.costs.dataset import CostDataset
from dreamshard.costs.types import COST_TERMS, CostBackend, PlacementCost
from dreamshard.evaluation.rounds import geometric_mean
from dreamshard.placement.heuristics import HEURISTIC_KEYS
from dreamshard.placement.tasks import Placement, PlacementTask, device_memory
from dreamshard.progress import Progress
from dreamshard.tables.sources import table_to_dict

EVAL_ROUND_BASE = 1000  # evaluation rounds are stored as rounds 1000, 1001, ... (collection: 0)

PlannerFn = Callable[[PlacementTask], Placement]


@dataclass
class Evaluation:
    """Costs of every planner's placement of every task, per interleaved round."""

    tasks: list[PlacementTask]
    planners: list[str]
    placements: list[list[Placement | None]]  # [task][planner]; None where it declined
    costs: np.ndarray  # [round, task, planner] overall ms; NaN where it declined
    breakdowns: list[list[list[dict]]]  # [task][planner][device] mean ms per term over rounds
    plan_seconds: np.ndarray  # [task, planner]
    backend: str
    declined: dict[tuple[int, int], str] = field(default_factory=dict)  # (task, planner): why

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
        return np.stack([self.costs[:, t, columns[b]] for t, b in enumerate(best_by_mean)], axis=1)

    def strongest_heuristic(self) -> str:
        """The fixed heuristic with the best mean cost over the tasks (the paper's baseline)."""
        means = {h: self.costs[:, :, self.planners.index(h)].mean() for h in self.heuristics}
        return min(means, key=means.__getitem__)

    def summary_rows(self) -> list[dict]:
        """Per planner: mean cost, ratios to the strongest and per-task best heuristic, wins."""
        strongest = self.costs[:, :, self.planners.index(self.strongest_heuristic())]
        vs_strongest = self.ratios_to(strongest)
        vs_best = self.ratios_to(self.per_task_best_heuristic())
        winner = np.nanargmin(self.costs.mean(axis=0), axis=1)
        rows = []
        for j, planner in enumerate(self.planners):
            rows.append(
                {
                    "planner": planner,
                    "mean_cost_ms": float(self.costs[:, :, j].mean()),
                    "vs_strongest_heuristic": float(geometric_mean(vs_strongest[:, j])),
                    "vs_best_heuristic": float(geometric_mean(vs_best[:, j])),
                    "vs_best_heuristic_worst": float(vs_best[:, j].max()),
                    "best_on_tasks": int((winner == j).sum()),
                    "plan_ms": float(self.plan_seconds[:, j].mean() * 1000),
                }
            )
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
                        planner: self._result(t, j) for j, planner in enumerate(self.planners)
                    },
                }
                for t, task in enumerate(self.tasks)
            ],
        }

    def _result(self, t: int, j: int) -> dict:
        placement = self.placements[t][j]
        if placement is None:
            return {
                "declined": self.declined[(t, j)],
                "plan_seconds": float(self.plan_seconds[t, j]),
            }
        return {
            "placement": list(placement.devices),
            "memory_bytes": device_memory(self.tasks[t], placement).tolist(),
            "costs_ms": self.costs[:, t, j].tolist(),
            "devices": self.breakdowns[t][j],
            "plan_seconds": float(self.plan_seconds[t, j]),
        }


def place_all(
    tasks: Sequence[PlacementTask],
    planners: dict[str, PlannerFn],
    declines: tuple[type[Exception], ...] = (),
) -> tuple[list[list[Placement | None]], np.ndarray, dict[tuple[int, int], str]]:
    """Every task placed by every planner, with each planner's wall time and its declines.

    Tasks go one at a time, each through the planners in their order.
    """
    placements, seconds = [], np.zeros((len(tasks), len(planners)))
    declined: dict[tuple[int, int], str] = {}
    for t, task in enumerate(tasks):
        row: list[Placement | None] = []
        for j, planner in enumerate(planners.values()):
            start = time.perf_counter()
            try:
                row.append(planner(task))
            except declines as exc:
                row.append(None)
                declined[(t, j)] = str(exc)
            seconds[t, j] = time.perf_counter() - start
        placements.append(row)
    return placements, seconds, declined


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
    declines: tuple[type[Exception], ...] = (),
) -> Evaluation:
    """Place every task with every planner and measure all placements in interleaved rounds.

    `measure(job)` may replace the stored-or-measure step (a Prefect task with retries does);
    by default it is `measure_and_store` on `backend` and `dataset`. A planner that raises one
    of `declines` on a task declines it (not measured; NaN costs); any other error propagates.
    """
    tasks = list(tasks)
    names = list(planners)
    placements, plan_seconds, declined = place_all(tasks, planners, declines)
    if measure is None:
        measure = lambda job: measure_and_store(job, backend, dataset, suite_name)[0]  # noqa: E731

    items = [
        (t, j) for t in range(len(tasks)) for j in range(len(names)) if placements[t][j] is not None
    ]
    costs = np.full((rounds, len(tasks), len(names)), np.nan)
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
    breakdowns = [
        [mean_breakdown(seen[(t, j)]) if (t, j) in seen else [] for j in range(len(names))]
        for t in range(len(tasks))
    ]
    return Evaluation(
        tasks, names, placements, costs, breakdowns, plan_seconds, backend.name, declined
    )


def summary_table(evaluation: Evaluation) -> tuple[list[str], list[list[object]]]:
    """Header and rows of the evaluation's summary for `report.format_table`."""
    header = [
        "planner",
        "mean cost ms",
        "vs strongest heuristic",
        "vs best heuristic (mean)",
        "(worst)",
        "best on tasks",
        "plan ms",
    ]
    rows = [
        [
            r["planner"],
            r["mean_cost_ms"],
            r["vs_strongest_heuristic"],
            r["vs_best_heuristic"],
            r["vs_best_heuristic_worst"],
            r["best_on_tasks"],
            r["plan_ms"],
        ]
        for r in evaluation.summary_rows()
    ]
    return header, rows
