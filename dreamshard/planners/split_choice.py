"""Splits chosen by a cost model: the candidates the splitting rules give, each placed and
scored cheaply, the cheapest kept (`dreamshard` with its cost network, `search_analytic` with
the analytic model, the heuristics their own rule checked by the analytic model).

A candidate cuts the tables the balance rule names (`placement.splitting.balance_splits`)
either into column halvings or into row ranges over all D devices (TorchRec's row-wise layout,
shard r on device r). On a CPU a column shard repeats all of its table's lookups while a row
shard has only those of its rows, so for a hot table rows can win where columns cannot
(benchmarks/results/split_tables.md: half the rows of a 5.1M-row table 0.50x, half its width
0.75x); which wins is the cost model's call, never assumed."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.errors import InfeasibleError
from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place
from dreamshard.placement.splitting import (
    balance_splits,
    memory_splits,
    row_variant,
    split_place,
)
from dreamshard.placement.tasks import Placement, PlacementTask, shard_task
from dreamshard.tables.shards import Split
from dreamshard.tables.table import Table


def candidate_splits(
    task: PlacementTask, keys: Iterable[Callable[[Table], float]] = ()
) -> list[tuple[Split, ...]]:
    """Distinct split sets: the memory splits alone, then the balance rule over them under each
    heuristic's key and each of `keys` (the memory splits come first), each also stopped at
    every halving level on the way (at most 2, 4, ... shards a table): on a CPU a column
    shard repeats all of its table's lookups, so one halving can beat the rule's quarters.
    Each rule's tables are also offered cut row-wise (`row_variant`)."""
    base = memory_splits(task)
    found = {_identity(base): base}
    for key in (*HEURISTIC_KEYS.values(), *keys):
        full = balance_splits(task, key, base)
        deepest = max((s.parts for s in full if s.kind == "column"), default=1)
        levels = [2**k for k in range(1, deepest.bit_length() - 1)]  # 2, 4, ... below deepest
        for splits in [full, *(balance_splits(task, key, base, cap) for cap in levels)]:
            found.setdefault(_identity(splits), splits)
        rows = row_variant(task, full, base)
        found.setdefault(_identity(rows), rows)
    return list(found.values())


def choose_splits(
    task: PlacementTask,
    candidates: list[tuple[Split, ...]],
    cost: Callable[[PlacementTask, list[Placement]], float],
    keys=tuple(HEURISTIC_KEYS),
) -> tuple[tuple[Split, ...], float]:
    """The candidate whose shards the heuristics `keys` place cheapest as `cost` rates their
    placements (`heuristic_placements`; a candidate none of them places rates infinite), the
    first on ties, and that cost."""

    def rate(splits: tuple[Split, ...]) -> float:
        found = heuristic_placements(task, splits, keys)
        return cost(shard_task(task, splits), found) if found else float("inf")

    costs = [rate(splits) for splits in candidates]
    best = min(range(len(candidates)), key=costs.__getitem__)
    return candidates[best], costs[best]


def heuristic_placements(
    task: PlacementTask, splits: tuple[Split, ...], keys=tuple(HEURISTIC_KEYS)
) -> list[Placement]:
    """The placements of `task`'s shards under `splits` by the heuristics `keys` whose packing
    search finds one, row shards over all devices pinned (`split_place`): what a split
    candidate is rated on (the policy would take tenths of a second where these take
    milliseconds at 856 tables on 128 devices)."""
    placements = []
    for key in keys:
        try:
            placements.append(split_place(task, splits, lambda s, key=key: greedy_place(s, key)))
        except InfeasibleError:  # its packing search gave up; the others may not
            continue
    return placements


def _identity(splits: tuple[Split, ...]) -> tuple:
    return tuple(sorted((s.table, s.kind, s.parts) for s in splits))


def checked_balance_splits(task: PlacementTask, key_name: str) -> tuple[Split, ...]:
    """The heuristic `key_name`'s balance rule (`placement.splitting.balance_splits`), its
    column halvings or the same tables cut row-wise over all devices (`row_variant`), kept only
    where the calibrated analytic model (the `simulated` backend) rates the heuristic's own
    placement of the shards cheaper than of the tables with only the memory splits (which win
    ties). The rule's key does not see that a column shard still does all of its table's
    lookups; on real kernels the unchecked rule made 4-6 of 32 heuristic plans slower than
    whole tables beyond the noise, the checked one none (benchmarks/results/split_tables.md,
    2026-12-01)."""
    base = memory_splits(task)
    balanced = balance_splits(task, HEURISTIC_KEYS[key_name], base)
    if _identity(balanced) == _identity(base):
        return base
    backend = SimulatedBackend()

    def cost(shards: PlacementTask, found: list[Placement]) -> float:
        return float(backend.overall_many(shards, found)[0])

    candidates = [base, balanced, row_variant(task, balanced, base)]
    return choose_splits(task, candidates, cost, [key_name])[0]
