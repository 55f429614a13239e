"""Splits chosen by a cost model: the candidates the splitting rules give, each placed and
scored cheaply, the cheapest kept (`dreamshard` with its cost network, `search_analytic` with
the analytic model; the heuristics apply their own rule, `placement.splitting`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.errors import InfeasibleError
from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place
from dreamshard.placement.splitting import balance_splits, memory_splits
from dreamshard.placement.tasks import PlacementTask, shard_task
from dreamshard.tables.shards import Split
from dreamshard.tables.table import Table


def candidate_splits(
    task: PlacementTask, keys: Iterable[Callable[[Table], float]] = ()
) -> list[tuple[Split, ...]]:
    """Distinct split sets: the memory splits alone, then the balance rule over them under each
    heuristic's key and each of `keys` (the memory splits come first), each also stopped at
    every halving level on the way (at most 2, 4, ... shards a table): on a CPU a column
    shard repeats all of its table's lookups, so one halving can beat the rule's quarters."""
    base = memory_splits(task)
    found = {_identity(base): base}
    for key in (*HEURISTIC_KEYS.values(), *keys):
        full = balance_splits(task, key, base)
        deepest = max((s.parts for s in full if s.kind == "column"), default=1)
        levels = [2**k for k in range(1, deepest.bit_length() - 1)]  # 2, 4, ... below deepest
        for splits in [full, *(balance_splits(task, key, base, cap) for cap in levels)]:
            found.setdefault(_identity(splits), splits)
    return list(found.values())


def choose_splits(
    task: PlacementTask,
    candidates: list[tuple[Split, ...]],
    cost: Callable[[PlacementTask], float],
) -> tuple[tuple[Split, ...], float]:
    """The candidate whose shard task `cost` rates cheapest (the first on ties), and its cost."""
    costs = [cost(shard_task(task, splits)) for splits in candidates]
    best = min(range(len(candidates)), key=costs.__getitem__)
    return candidates[best], costs[best]


def heuristic_placements(shards: PlacementTask, keys=tuple(HEURISTIC_KEYS)) -> list:
    """The placements of `shards` by the heuristics `keys` whose packing search finds one:
    what a split candidate is rated on (the policy would take tenths of a second where these
    take milliseconds at 856 tables on 128 devices)."""
    placements = []
    for key in keys:
        try:
            placements.append(greedy_place(shards, key))
        except InfeasibleError:  # its packing search gave up; the others may not
            continue
    return placements


def _identity(splits: tuple[Split, ...]) -> tuple:
    return tuple(sorted((s.table, s.kind, s.parts) for s in splits))


def checked_balance_splits(task: PlacementTask, key_name: str) -> tuple[Split, ...]:
    """The heuristic `key_name`'s balance rule (`placement.splitting.balance_splits`), kept only
    where the calibrated analytic model (the `simulated` backend) rates the heuristic's own
    placement of the shards cheaper than of the tables with only the memory splits. The rule's
    key does not see that a column shard still does all of its table's lookups; on real kernels
    the unchecked rule made 4-6 of 32 heuristic plans slower than whole tables beyond the
    noise, the checked one none (benchmarks/results/split_tables.md, 2026-12-01)."""
    base = memory_splits(task)
    balanced = balance_splits(task, HEURISTIC_KEYS[key_name], base)
    if _identity(balanced) == _identity(base):
        return base
    backend = SimulatedBackend()

    def cost(shards: PlacementTask) -> float:
        found = heuristic_placements(shards, [key_name])
        return float(backend.overall_many(shards, found)[0]) if found else float("inf")

    return choose_splits(task, [base, balanced], cost)[0]
