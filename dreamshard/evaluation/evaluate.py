"""The one evaluation: place tasks with planners, measure in interleaved rounds, keep it all.

Every (task, planner) placement is measured once per round, rounds interleaved in a fresh order.
With a cost dataset, every measurement is stored under a key that includes its round:
re-running an evaluation with the same inputs reads the stored costs instead of measuring
again, and a run killed half-way measures only what is missing. Without one (the demo, the
benchmarks), placements are measured directly. A benchmark that measures more in the same
rounds (tables alone, say) places with `place_all`, measures `distinct_items` and its own items
with `rounds.measure_costs`, and gets the same `Evaluation` from `evaluation_of`. The ratios
live in `evaluation.results`.

A planner may decline a task (TorchRec's planner rejecting it, an RNN trained for another device
count) when `evaluate` is told which exceptions mean so: the placement is then None, its costs
NaN, and the reason is kept in `Evaluation.declined`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from dreamshard.costs.backends import describe_costs
from dreamshard.costs.collect import Job, measure_and_store, store_measured
from dreamshard.costs.dataset import CostDataset, measurement_key
from dreamshard.costs.fanout import measuring_setups
from dreamshard.costs.types import COST_TERMS, CostBackend, PlacementCost
from dreamshard.errors import DreamshardError
from dreamshard.evaluation.results import Evaluation
from dreamshard.evaluation.rounds import cv
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.progress import Progress

EVAL_ROUND_BASE = 1000  # evaluation rounds are stored as rounds 1000, 1001, ... (collection: 0)
Planners = dict[str, Callable[[PlacementTask, int], Placement]]  # name: plan(task, seed)
Placed = tuple[list[list[Placement | None]], np.ndarray, dict[tuple[int, int], str]]


def place_all(
    tasks: Sequence[PlacementTask],
    planners: Planners,
    declines: tuple[type[Exception], ...] = (),
    seed: int = 0,
) -> Placed:
    """Every task placed by every planner: the placements [task][planner] (None where declined),
    each planner's wall time [task, planner] and why it declined, by (task, planner).

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


def distinct_items(
    tasks: Sequence[PlacementTask], placements: list[list[Placement | None]]
) -> tuple[list[tuple[PlacementTask, Placement]], dict[tuple[int, int], int]]:
    """The distinct (task, placement) pairs to measure (identical placements of a task once;
    declined ones not at all), and for each (task, planner) its item's index."""
    items, index, known = [], {}, {}
    for t, row in enumerate(placements):
        for j, placement in enumerate(row):
            if placement is None:
                continue
            key = (t, placement.splits, placement.devices)
            if key not in known:
                known[key] = len(items)
                items.append((tasks[t], placement))
            index[(t, j)] = known[key]
    return items, index


def mean_breakdown(costs: list[PlacementCost]) -> list[dict]:
    """Per device, the mean of each cost term over rounds."""
    devices = len(costs[0].devices)
    return [
        {term: float(np.mean([getattr(c.devices[d], term) for c in costs])) for term in COST_TERMS}
        for d in range(devices)
    ]


def evaluation_of(
    tasks: Sequence[PlacementTask],
    names: list[str],
    placed: Placed,
    costs: list[list[PlacementCost]],
    index: dict[tuple[int, int], int],
    backend: CostBackend,
) -> Evaluation:
    """The `Evaluation` of placements whose items (`distinct_items`) were measured in rounds,
    `costs` [round][item]; a declined placement has NaN costs."""
    placements, plan_seconds, declined = placed
    overall = np.full((len(costs), len(tasks), len(names)), np.nan)
    breakdowns = []
    for t in range(len(tasks)):
        row = []
        for j in range(len(names)):
            if (t, j) not in index:
                row.append([])
                continue
            measured = [r[index[(t, j)]] for r in costs]
            overall[:, t, j] = [c.overall for c in measured]
            row.append(mean_breakdown(measured))
        breakdowns.append(row)
    made = describe_costs(backend.config())
    return Evaluation(
        list(tasks),
        names,
        placements,
        overall,
        breakdowns,
        plan_seconds,
        backend.name,
        declined,
        made,
    )


def evaluate(
    tasks: Sequence[PlacementTask],
    planners: Planners,
    backend: CostBackend,
    dataset: CostDataset | None = None,
    rounds: int = 3,
    suite_name: str = "",
    seed: int = 0,
    measure: Callable[[Job], PlacementCost] | None = None,
    declines: tuple[type[Exception], ...] = (),
    fanout=None,
) -> Evaluation:
    """Place every task with every planner and measure all placements in interleaved rounds.

    `measure(job)` may replace the measuring step (a Prefect task with retries does); by
    default it is `measure_and_store` on `backend` and `dataset`, or `backend.measure` without
    a dataset. With `fanout` (a `costs.fanout.Fanout`, or the flows' `TaskFanout`) each task's
    rounds go to one worker as one job instead (`rounds_by_task`). A planner that raises one of
    `declines` on a task declines it (not measured; NaN costs); any other error propagates.
    Identical placements are measured once per round.
    """
    tasks = list(tasks)
    placed = place_all(tasks, planners, declines, seed)
    if fanout is not None:
        items, index = distinct_items(tasks, placed[0])
        costs = rounds_by_task(items, rounds, seed, backend, dataset, suite_name, fanout)
        return evaluation_of(tasks, list(planners), placed, costs, index, backend)
    if measure is None and dataset is None:
        measure = lambda job: backend.measure(job.task, job.placement)  # noqa: E731
    elif measure is None:
        measure = lambda job: measure_and_store(job, backend, dataset, suite_name)[0]  # noqa: E731
    items, index = distinct_items(tasks, placed[0])
    costs: list[list] = [[None] * len(items) for _ in range(rounds)]
    rng = np.random.default_rng(seed)
    progress = Progress(rounds * len(items), f"evaluating on {backend.name}")
    for r in range(rounds):
        for i in rng.permutation(len(items)):
            task, placement = items[i]
            costs[r][i] = cost = measure(Job(task, placement, EVAL_ROUND_BASE + r))
            progress.step(f"{task.name} {placement.method}: {cost.overall:.2f} ms")
    progress.close()
    return evaluation_of(tasks, list(planners), placed, costs, index, backend)


def rounds_by_task(
    items: list[tuple[PlacementTask, Placement]],
    rounds: int,
    seed: int,
    backend: CostBackend,
    dataset: CostDataset | None,
    suite_name: str,
    fanout,
) -> list[list[PlacementCost]]:
    """The costs [round][item] with each task's interleaved rounds measured as one job on one
    worker of `fanout` (its items round after round, each round in a fresh order), so that a
    task's paired ratios are never split between two machines.

    With a dataset, a task's stored costs are read instead of measured when they all come from
    one machine and the rest (if any) can only be measured there (every measurer is that
    machine); otherwise the whole task is measured again on one worker. What comes back is
    stored here as it comes back; a measurement that failed is stored as an error and, once
    everything else is stored, stops the evaluation."""
    setups = measuring_setups(fanout, backend) or [("", backend.config())]
    rng = np.random.default_rng(seed)
    costs: list[list] = [[None] * len(items) for _ in range(rounds)]
    members: dict[int, list[int]] = {}  # a task's items, by the task's identity
    for i, (task, _) in enumerate(items):
        members.setdefault(id(task), []).append(i)
    sequences, slots = [], []
    for mine in members.values():
        order = [(r, i) for r in range(rounds) for i in rng.permutation(mine)]
        keyed, stored, machines = [], {}, set()
        for r, i in order:
            task, placement = items[i]
            job = Job(task, placement, EVAL_ROUND_BASE + r)
            keys = [measurement_key(task, placement, c, job.round, m) for m, c in setups]
            keyed.append((keys[0], job))
            for key, (machine, _) in zip(keys, setups, strict=True):
                cost = dataset.stored_cost(key) if dataset is not None else None
                if cost is not None:
                    stored[(r, i)] = cost
                    machines.add(machine)
                    break
        missing = len(stored) < len(order)
        one_machine = len(machines) <= 1 and (
            not missing or not machines or {m for m, _ in setups} == machines
        )
        if not one_machine:
            stored = {}  # measured again, all of it, on one worker
        for (r, i), cost in stored.items():
            costs[r][i] = cost
        todo = [(spot, job) for spot, job in zip(order, keyed, strict=True) if spot not in stored]
        sequences.append([job for _, job in todo])
        slots.append([spot for spot, _ in todo])
    progress = Progress(sum(map(len, sequences)), f"evaluating on {backend.name}, a task a job")
    done = [0] * len(sequences)  # records back so far, per sequence (they come back in order)
    failed = []
    for n, measured in fanout.measure_sequences(sequences):
        for record in measured:
            r, i = slots[n][done[n]]
            done[n] += 1
            if dataset is not None:
                store_measured(record, dataset, suite_name)
            costs[r][i] = record.cost
            progress.step(record.told())
            if record.cost is None:
                failed.append(record.told())
    progress.close()
    if failed:
        raise DreamshardError(f"{len(failed)} measurement(s) failed; the first: {failed[0]}")
    return costs


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
        spreads = cv(evaluation.costs[:, ~np.isnan(evaluation.costs[0])])  # per placement
        spread = (
            f" Spread of a placement's cost over the rounds (CV): median {np.median(spreads):.1%}, "
            f"max {spreads.max():.1%}."
        )
    return (
        f"Costs: {made}. {tasks} task(s), {rounds} interleaved round(s).{spread} Ratios are paired "
        "within rounds (geometric mean over rounds, then over tasks). Strongest heuristic: "
        f"{evaluation.strongest_heuristic()} (best mean over the tasks); per-task best "
        "heuristic: the cheapest heuristic on each task; best known: the cheapest placement "
        "of each task in these rounds."
    )
