"""Local search over placements: moves and swaps of tables between devices, legal ones only.

`local_search` improves any starting placement under any scorer (placements -> costs, lower is
better): the cost network's predicted overall cost (`dreamshard_planner.costnet_scorer`), or a
measured cost for a "best known" reference. Each round lists every legal neighbour of the
current placement (a table moved to another device with room; two tables on different devices
swapped, both devices staying within the cap; none that breaks the task's constraints),
shuffles them with the seed, and scores them in batches; the first batch holding a better
placement moves the search to its best one. The search stops at a local optimum (no neighbour
is better), after `max_rounds` accepted steps, or when `seconds` run out. Given the seed and
no time limit reached, it repeats exactly.

Planners `dreamshard_search` (the `dreamshard` planner's placement refined on the cost network)
and `search_analytic` (the best heuristic's placement refined on the calibrated analytic model,
the `simulated` backend's costs: the strong non-learned baseline) search with the faster
`device_search`, which exploits that both models are sums over a device's tables.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.learn.model_file import DreamShardModel
from dreamshard.placement.budget import SPLIT_SHARE, Deadline
from dreamshard.placement.constraints import bind
from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place
from dreamshard.placement.planner import BasePlanner, PlanOptions
from dreamshard.placement.tasks import Placement, PlacementTask, device_memory
from dreamshard.planners.device_search import analytic_model, costnet_model, device_search
from dreamshard.planners.dreamshard_planner import (
    DreamShardMethod,
    Scorer,
    ranked_candidates,
)
from dreamshard.planners.for_hardware import analytic_splits
from dreamshard.tables.shards import Split

SEARCH_SECONDS = 5.0  # the planner's defaults
SEARCH_ROUNDS = 200
SEARCH_STARTS = 4  # dreamshard_search: the planner's cheapest candidates it searches from
# Of the time left when placing starts, the share `dreamshard_search` gives the `dreamshard`
# planner's candidates before it searches from them.
PLACE_SHARE = 0.5


@dataclass(frozen=True)
class SearchResult:
    placement: Placement
    cost: float
    start_cost: float
    steps: int  # improving moves or swaps accepted
    scored: int  # placements scored, the start included
    seconds: float
    local_optimum: bool  # True when it stopped because no neighbour was better


def legal_neighbours(task: PlacementTask, devices: np.ndarray) -> np.ndarray:
    """[N, 4] rows (table a, its new device, table b or -1, b's new device or -1)."""
    sizes = task.table_bytes()
    used = device_memory(task, Placement(tuple(devices)))
    cap, t, d = task.memory_cap_bytes, len(devices), task.num_devices
    table, target = np.divmod(np.arange(t * d), d)
    moves = (target != devices[table]) & (used[target] + sizes[table] <= cap)
    a, b = np.triu_indices(t, k=1)
    da, db = devices[a], devices[b]
    swaps = (da != db) & (used[db] - sizes[b] + sizes[a] <= cap)
    swaps &= used[da] - sizes[a] + sizes[b] <= cap
    none = np.full(int(moves.sum()), -1)
    rows = np.concatenate(
        [
            np.stack([table[moves], target[moves], none, none], axis=1),
            np.stack([a[swaps], db[swaps], b[swaps], da[swaps]], axis=1),
        ]
    )
    bound = bind(task)
    return rows if bound is None else rows[bound.keep(devices, rows)]


def apply_neighbours(devices: np.ndarray, rows: np.ndarray) -> list[Placement]:
    candidates = np.repeat(devices[None], len(rows), axis=0)
    index = np.arange(len(rows))
    candidates[index, rows[:, 0]] = rows[:, 1]
    swap = rows[:, 2] >= 0
    candidates[index[swap], rows[swap, 2]] = rows[swap, 3]
    return [Placement(tuple(int(v) for v in c)) for c in candidates]


def local_search(
    task: PlacementTask,
    start: Placement,
    score: Scorer,
    seconds: float | None = None,
    max_rounds: int | None = None,
    seed: int = 0,
    batch: int = 128,
) -> SearchResult:
    """Improve `start` by legal moves and swaps until a local optimum or the budget ends."""
    began = time.perf_counter()
    deadline = began + seconds if seconds is not None else float("inf")
    rng = np.random.default_rng(seed)
    devices = np.asarray(start.devices, dtype=np.int64)
    start_cost = cost = float(score([start])[0])
    steps, scored, local_optimum = 0, 1, False
    while (max_rounds is None or steps < max_rounds) and time.perf_counter() < deadline:
        rows = legal_neighbours(task, devices)
        rows = rows[rng.permutation(len(rows))]
        improved = False
        for lo in range(0, len(rows), batch):
            if time.perf_counter() >= deadline:
                break
            candidates = apply_neighbours(devices, rows[lo : lo + batch])
            costs = np.asarray(score(candidates), dtype=np.float64)
            scored += len(candidates)
            best = int(costs.argmin())
            if costs[best] < cost:
                devices, cost, improved = np.asarray(candidates[best].devices), costs[best], True
                steps += 1
                break
        if not improved:
            local_optimum = time.perf_counter() < deadline
            break
    placement = Placement(tuple(int(v) for v in devices), start.method)
    return SearchResult(
        placement,
        float(cost),
        start_cost,
        steps,
        scored,
        time.perf_counter() - began,
        local_optimum,
    )


def dreamshard_search_place(
    task: PlacementTask,
    model: DreamShardModel,
    samples: int = 8,
    seed: int = 0,
    deadline: Deadline | None = None,
    max_rounds: int = SEARCH_ROUNDS,
) -> Placement:
    """The `dreamshard` planner with more search: `device_search` on the predicted cost from
    each of its `SEARCH_STARTS` cheapest candidates (its own answer first), sharing the time
    left before `deadline` (default: SEARCH_SECONDS from now); the cheapest result by the cost
    network."""
    deadline = deadline or Deadline.after(SEARCH_SECONDS)
    ranked = ranked_candidates(task, model, samples, seed, deadline.share(PLACE_SHARE))
    searched = costnet_model(model.costnet, task)
    scale = float(model.costnet.scale)
    best, best_cost, note = ranked[0][0], ranked[0][1], ""
    starts = [placement for placement, _ in ranked[:SEARCH_STARTS]]
    for i, start in enumerate(starts):
        seconds = deadline.left() / (len(starts) - i)
        found, cost, steps = device_search(task, start, searched, seconds, max_rounds)
        if steps and cost * scale < best_cost - 1e-9 * abs(best_cost):
            best, best_cost = found, cost * scale
            note = f"{steps} search steps from {start.candidate}"
    if not note:  # nothing better: the planner's answer keeps its own name
        return replace(best, candidate=f"{best.candidate}; search found nothing better")
    return Placement(best.devices, "dreamshard_search", note)


def analytic_scorer(task: PlacementTask, backend: SimulatedBackend | None = None) -> Scorer:
    """The calibrated analytic model's overall cost (ms) of placements of `task`: exactly what
    the `simulated` backend would report, thousands of placements a second."""
    backend = backend or SimulatedBackend()
    return lambda placements: backend.overall_many(task, placements).tolist()


def search_analytic_place(
    task: PlacementTask,
    seed: int = 0,
    seconds: float = SEARCH_SECONDS,
    max_rounds: int | None = None,
    backend: SimulatedBackend | None = None,
) -> Placement:
    """The strong non-learned baseline: the heuristic placement the analytic model rates best,
    then local search scored by that model (calibrated weights from `dreamshard calibrate`,
    else the shipped ones), until a local optimum or `seconds` run out."""
    score = analytic_scorer(task, backend)
    starts = {key: greedy_place(task, key) for key in HEURISTIC_KEYS}
    costs = score(list(starts.values()))
    name = min(starts, key=lambda key: costs[list(starts).index(key)])
    found, _, steps = device_search(
        task, starts[name], analytic_model(task, backend), seconds, max_rounds
    )
    return Placement(found.devices, "search_analytic", f"{steps} search steps from {name}")


class DreamShardSearch(DreamShardMethod):
    """`dreamshard_search`: the `dreamshard` planner with more search (`dreamshard_search_place`)
    on the same splits; `options.time_budget` bounds its search (default SEARCH_SECONDS)."""

    name = "dreamshard_search"

    def default_budget(self, task: PlacementTask) -> float:
        return max(SEARCH_SECONDS, super().default_budget(task))

    def place_tables(self, task: PlacementTask, options: PlanOptions) -> Placement:
        return dreamshard_search_place(
            task, options.model, options.samples, options.seed, options.until()
        )

    def candidates(self, task: PlacementTask, options: PlanOptions, top: int) -> list[Placement]:
        return [self.place(task, options)]


class AnalyticSearch(BasePlanner):
    """`search_analytic`: the strong non-learned baseline (`search_analytic_place`) on the
    splits the analytic model picks (`analytic_splits`)."""

    name = "search_analytic"

    def default_budget(self, task: PlacementTask) -> float:
        return max(SEARCH_SECONDS, super().default_budget(task))

    def splits(self, task: PlacementTask, options: PlanOptions) -> tuple[Split, ...]:
        backend = SimulatedBackend(topology=options.topology, hardware=options.hardware)
        return analytic_splits(task, backend, options.until().share(SPLIT_SHARE))

    def place_tables(self, task: PlacementTask, options: PlanOptions) -> Placement:
        backend = SimulatedBackend(topology=options.topology, hardware=options.hardware)
        return search_analytic_place(task, options.seed, options.until().left(), backend=backend)


DREAMSHARD_SEARCH = DreamShardSearch()
SEARCH_ANALYTIC = AnalyticSearch()
