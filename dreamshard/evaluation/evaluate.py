"""The one evaluation: place tasks with planners, measure in interleaved rounds, keep it all.

Every (task, planner) placement is measured once per round, rounds interleaved in a fresh order.
With a cost dataset, every measurement is stored under a key that includes its round:
re-running an evaluation with the same inputs reads the stored costs instead of measuring
again, and a run killed half-way measures only what is missing. Without one (the demo, the
benchmarks), placements are measured directly. The ratios live in `evaluation.results`.

A planner may decline a task (TorchRec's planner rejecting it, an RNN trained for another device
count) when `evaluate` is told which exceptions mean so: the placement is then None, its costs
NaN, and the reason is kept in `Evaluation.declined`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from dreamshard.costs.backends import describe_costs
from dreamshard.costs.collect import Job, measure_and_store
from dreamshard.costs.dataset import CostDataset
from dreamshard.costs.types import COST_TERMS, CostBackend, PlacementCost
from dreamshard.evaluation.results import Evaluation
from dreamshard.placement.heuristics import Planner
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.progress import Progress

EVAL_ROUND_BASE = 1000  # evaluation rounds are stored as rounds 1000, 1001, ... (collection: 0)


def place_all(
    tasks: Sequence[PlacementTask],
    planners: dict[str, Planner],
    declines: tuple[type[Exception], ...] = (),
    seed: int = 0,
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
                row.append(planner(task, seed))
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
    planners: dict[str, Planner],
    backend: CostBackend,
    dataset: CostDataset | None = None,
    rounds: int = 3,
    suite_name: str = "",
    seed: int = 0,
    measure: Callable[[Job], PlacementCost] | None = None,
    declines: tuple[type[Exception], ...] = (),
) -> Evaluation:
    """Place every task with every planner and measure all placements in interleaved rounds.

    `measure(job)` may replace the measuring step (a Prefect task with retries does); by
    default it is `measure_and_store` on `backend` and `dataset`, or `backend.measure` without
    a dataset. A planner that raises one of `declines` on a task declines it (not measured; NaN
    costs); any other error propagates. Identical placements are measured once per round.
    """
    tasks = list(tasks)
    names = list(planners)
    placements, plan_seconds, declined = place_all(tasks, planners, declines, seed)
    if measure is None and dataset is None:
        measure = lambda job: backend.measure(job.task, job.placement)  # noqa: E731
    elif measure is None:
        measure = lambda job: measure_and_store(job, backend, dataset, suite_name)[0]  # noqa: E731

    items = [
        (t, j) for t in range(len(tasks)) for j in range(len(names)) if placements[t][j] is not None
    ]
    costs = np.full((rounds, len(tasks), len(names)), np.nan)
    seen: dict[tuple[int, int], list[PlacementCost]] = {item: [] for item in items}
    rng = np.random.default_rng(seed)
    progress = Progress(rounds * len(items), f"evaluating on {backend.name}")
    for r in range(rounds):
        this_round: dict[tuple, PlacementCost] = {}
        for i in rng.permutation(len(items)):
            t, j = items[i]
            same = (t, placements[t][j].splits, placements[t][j].devices)
            if same not in this_round:
                this_round[same] = measure(Job(tasks[t], placements[t][j], EVAL_ROUND_BASE + r))
            cost = this_round[same]
            costs[r, t, j] = cost.overall
            seen[(t, j)].append(cost)
            progress.step(f"{tasks[t].name} {names[j]}: {cost.overall:.2f} ms")
    progress.close()
    breakdowns = [
        [mean_breakdown(seen[(t, j)]) if (t, j) in seen else [] for j in range(len(names))]
        for t in range(len(tasks))
    ]
    return Evaluation(
        tasks,
        names,
        placements,
        costs,
        breakdowns,
        plan_seconds,
        backend.name,
        declined,
        describe_costs(backend.config()),
    )


def summary_table(evaluation: Evaluation) -> tuple[list[str], list[list[object]]]:
    """Header and rows of the evaluation's summary for `report.format_table`."""
    header = [
        "planner",
        "mean cost ms",
        "vs strongest heuristic",
        "vs per-task best heuristic",
        "(worst task)",
        "vs best known",
        "best on tasks",
        "plan ms",
        "placement picked",
    ]
    rows = [
        [
            r["planner"] + ("" if r["tasks_placed"] == len(evaluation.tasks) else " [declined]"),
            r["mean_cost_ms"],
            r["vs_strongest_heuristic"],
            r["vs_per_task_best_heuristic"],
            r["vs_per_task_best_heuristic_worst"],
            r["vs_best_known"],
            r["best_on_tasks"],
            r["plan_ms"],
            r["picked"] or "-",
        ]
        for r in evaluation.summary_rows()
    ]
    if all(row[-1] == "-" for row in rows):  # no planner picks among candidates
        header, rows = header[:-1], [row[:-1] for row in rows]
    return header, rows


def evaluation_note(evaluation: Evaluation) -> str:
    """One line under every table of an evaluation: how its figures were made."""
    rounds, tasks = evaluation.costs.shape[0], len(evaluation.tasks)
    made = evaluation.costs_made or f"{evaluation.backend} backend"
    spread = ""
    if rounds > 1:
        placed = evaluation.costs[:, ~np.isnan(evaluation.costs[0])]  # [rounds, placements]
        cv = placed.std(axis=0) / placed.mean(axis=0)
        spread = (
            f" Spread of a placement's cost over the rounds (CV): median {np.median(cv):.1%}, "
            f"max {cv.max():.1%}."
        )
    return (
        f"Costs: {made}. {tasks} task(s), {rounds} interleaved round(s).{spread} Ratios are paired "
        "within rounds (geometric mean over rounds, then over tasks). Strongest heuristic: "
        f"{evaluation.strongest_heuristic()} (best mean over the tasks); per-task best "
        "heuristic: the cheapest heuristic on each task; best known: the cheapest placement "
        "of each task in these rounds."
    )
