"""Splits chosen by a cost model: the candidates the splitting rules give, each placed and
scored cheaply, the cheapest kept (`dreamshard` with its cost network, `search_analytic` with
the analytic model; the heuristics apply their own rule, `placement.splitting`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from dreamshard.placement.heuristics import HEURISTIC_KEYS
from dreamshard.placement.splitting import balance_splits, memory_splits
from dreamshard.placement.tasks import PlacementTask, shard_task
from dreamshard.tables.shards import Split
from dreamshard.tables.table import Table


def candidate_splits(
    task: PlacementTask, keys: Iterable[Callable[[Table], float]] = ()
) -> list[tuple[Split, ...]]:
    """Distinct split sets: the memory splits alone, then the balance rule over them under each
    heuristic's key and each of `keys` (the memory splits come first)."""
    base = memory_splits(task)
    found = {_identity(base): base}
    for key in (*HEURISTIC_KEYS.values(), *keys):
        splits = balance_splits(task, key, base)
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


def _identity(splits: tuple[Split, ...]) -> tuple:
    return tuple(sorted((s.table, s.kind, s.parts) for s in splits))
