"""Splitting, in one place: which tables a planner splits under `--split auto`, the candidate
split sets, how a set is rated, and how a split task is placed. (How a table is cut into
shards, each a `Table`, is `tables.shards`; a planner's own split choice is its `splits`.)

Two reasons to split a table:

- **Memory.** A table larger than one device cannot be placed whole. It is halved column-wise
  until its shards fit, up to as many shards as devices and widths of 4; a table that still
  fits no device is split row-wise instead, over all D devices in blocks of ceil(rows / D)
  rows, shard r on device r: TorchRec's row-wise layout, so the plan trains in its
  `DistributedModelParallel`. Those row shards sit on every device, so a table must fit what
  they leave, not the whole cap. `memory_splits` gives these; without them such a task is
  infeasible.
- **Balance.** A table whose cost alone exceeds the mean device load bounds every table-wise
  plan from below: no device can be lighter than the one that holds it. The heuristics'
  documented rule (`balance_splits`): while the costliest shard's key exceeds the mean device
  load (the sum of all keys over the devices), halve its table column-wise once more, as long
  as the table has at most as many shards as devices and widths stay multiples of 4. A column
  shard keeps its table's rows and lookups, so halving a table halves its dim-based,
  size-based, lookup-based and size-lookup keys and leaves their sum, the mean load, alone.

A planner that rates splits with a cost model (`dreamshard` with its cost network,
`search_analytic` and the heuristics' check with the calibrated analytic model) weighs the
`candidate_splits` by `choose_splits`: each candidate's shards placed by the heuristics (in
milliseconds, where the policy would take tenths of a second at 856 tables on 128 devices),
those placements rated by the planner's `SplitRating`, the cheapest kept. A candidate cuts the
tables the balance rule names either into column halvings or into row ranges over all D
devices (TorchRec's row-wise layout, shard r on device r). On a CPU a column shard repeats all
of its table's lookups while a row shard has only those of its rows, so for a hot table rows
can win where columns cannot (the retired split_tables study, commit ea3bb69: half the rows of a
5.1M-row table 0.50x, half its width 0.75x); which wins is the cost model's call, never
assumed.

- **Small tables: data-parallel.** A table replicated on every device (`replica`) looks up
  each device's own slice of the batch and keeps its pooled output there: it leaves the
  all-to-all, and its gradients are all-reduced instead. The all-reduce moves about
  2 x rows x dim numbers per device, the all-to-all the table's holder about batch x dim, so
  replicas pay where rows are fewer than half the batch; each costs its whole memory on every
  device. `replica_splits` names them (the smallest first, while they take at most a tenth of a
  device); the candidates offer them beside the memory splits and beside each balance rule,
  and the rating decides.

`split_place` places a task's shards with any table-wise planner and returns the placement
with its splits (row shards over all devices and replicas pinned: shard r on device r).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

import numpy as np

from dreamshard.errors import InfeasibleError
from dreamshard.placement.budget import Deadline
from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place, quick_greedy_place
from dreamshard.placement.tasks import Placement, PlacementTask, shard_task
from dreamshard.report import format_bytes
from dreamshard.tables.shards import Split, max_column_parts, split_problem, split_table
from dreamshard.tables.table import Table
from dreamshard.tables.traces import DEFAULT_BATCH, table_batch_size

SPLIT_MODES = ("none", "auto")

# How a planner rates a split candidate: the shard task and the heuristics' placements of its
# shards -> a cost (ms, lower is better).
SplitRating = Callable[[PlacementTask, list[Placement]], float]


def memory_splits(task: PlacementTask) -> tuple[Split, ...]:
    """The splits without which some table fits no device (see the module's docstring). Row
    shards sit on every device (shard r on device r), so the other tables must fit what they
    leave: a table that fits one device's cap but not that room is split too, until no split
    changes the room. (Until 2026-12-07 the room was the whole cap: at 428 dlrm tables on 128
    devices under binding memory a 210 MiB table stayed whole beside row shards that left
    207 MiB, and every heuristic found no placement on 4 of 8 tasks.)"""
    cap, d = task.memory_cap_bytes, task.num_devices
    by_name, room = {t.name: t for t in task.tables}, cap
    while True:
        splits = _splits_to_fit(task, room)
        rows = [s for s in splits if s.kind == "row"]
        pinned = sum(task.bytes_of(split_table(by_name[s.table], "row", d)[0]) for s in rows)
        if cap - pinned == room:
            return splits
        room = cap - pinned
        if room <= 0:
            raise InfeasibleError(
                f"the tables cut row-wise ({len(rows)}) take {format_bytes(pinned)} of each "
                f"device's {format_bytes(cap)}, leaving no memory for the other tables; "
                "raise the memory per device or add devices"
            )


def _splits_to_fit(task: PlacementTask, room: int) -> tuple[Split, ...]:
    """`memory_splits` for a given room a device: each table above it halved column-wise until
    its shards fit, else cut row-wise over all devices (each row shard within the cap)."""
    cap, splits = task.memory_cap_bytes, []
    for table in task.tables:
        size = task.bytes_of(table)
        if size <= room:
            continue
        most = max_column_parts(table, task.num_devices)
        parts, shard = 1, size
        while shard > room and parts < most:
            parts *= 2  # a column shard's bytes: its width's weights, its own optimizer state
            shard = task.bytes_of(split_table(table, "column", parts)[0])
        if shard <= room:
            splits.append(Split(table.name, "column", parts))
            continue
        d = task.num_devices
        if split_problem(table, "row", d) or task.bytes_of(split_table(table, "row", d)[0]) > cap:
            raise InfeasibleError(
                f"table {table.name} needs {format_bytes(size)}: split row-wise over all "
                f"{d} devices it still exceeds one device's {format_bytes(cap)}; "
                "raise the memory per device or add devices"
            )
        splits.append(Split(table.name, "row", d))
    return tuple(splits)


def pinned_shards(shards: PlacementTask, splits: tuple[Split, ...]) -> dict[int, int]:
    """Shard index -> device for the shards whose device is fixed: a table split row-wise over
    all D devices keeps shard r on device r, TorchRec's row-wise layout (the only one its
    training routes ids by; `integrations.torchrec_export`), replica r of a data-parallel
    table sits on device r, and shard r of a table-row-wise table on device r of its host
    (`table_row_hosts`)."""
    d = shards.num_devices
    first = {s.table: 0 for s in splits if s.kind in ("row", "replica") and s.parts == d}
    first |= table_row_hosts(shards, splits)
    pinned, rank = {}, {}
    for i, table in enumerate(shards.tables):
        if table.shard is not None and table.shard.of in first:
            of = table.shard.of
            pinned[i] = first[of] + rank.setdefault(of, 0)
            rank[of] += 1
    return pinned


def table_row_hosts(shards: PlacementTask, splits: tuple[Split, ...]) -> dict[str, int]:
    """The first device of the host each table-row-wise table goes to: the largest table first,
    each to the host its predecessors loaded least (by bytes; the first of equal hosts)."""
    d = shards.num_devices
    hosts = {s.table: s.parts for s in splits if s.kind == "table_row"}
    if not hosts:
        return {}
    sizes: dict[str, int] = {}
    for table, size in zip(shards.tables, shards.table_bytes().tolist()):
        if table.shard is not None and table.shard.of in hosts:
            sizes[table.shard.of] = sizes.get(table.shard.of, 0) + size
    first = {}
    for size in set(hosts.values()):
        if d % size:
            raise InfeasibleError(f"{d} devices do not fill hosts of {size} (table-row-wise)")
        load = np.zeros(d // size, dtype=np.int64)
        for name in sorted((n for n in hosts if hosts[n] == size), key=lambda n: (-sizes[n], n)):
            host = int(np.argmin(load))
            first[name] = host * size
            load[host] += sizes[name]
    return first


REPLICA_SHARE = 0.1  # at most this share of a device's memory goes to data-parallel tables


def named_tables(task: PlacementTask) -> set[str]:
    """The tables the task's constraints name: none of them is split."""
    return task.constraints.named() if task.constraints else set()


def allowed(task: PlacementTask, name: str, kind: str) -> bool:
    """Whether the task's constraints let table `name` be cut `kind`-wise (its sharder's
    offered types, `Constraints.allows`)."""
    return task.constraints is None or task.constraints.allows(name, kind)


def replica_splits(task: PlacementTask, taken: tuple[Split, ...] = ()) -> tuple[Split, ...]:
    """Data-parallel copies of the tables, not split by `taken`, whose rows are fewer than half
    the batch (module docstring), the smallest first while their copies take at most
    REPLICA_SHARE of a device's memory; none on one device."""
    d = task.num_devices
    if d < 2:
        return ()
    split = {s.table for s in taken} | named_tables(task)
    batch = table_batch_size(task.tables, DEFAULT_BATCH)
    sizes = dict(zip((t.name for t in task.tables), task.table_bytes().tolist()))
    small = sorted(
        (
            t
            for t in task.tables
            if t.name not in split and 2 * t.rows < batch and allowed(task, t.name, "replica")
        ),
        key=lambda t: (sizes[t.name], t.name),
    )
    chosen, used = [], 0
    for table in small:
        if used + sizes[table.name] > REPLICA_SHARE * task.memory_cap_bytes:
            break
        chosen.append(Split(table.name, "replica", d))
        used += sizes[table.name]
    return tuple(chosen)


def shard_key(
    key: Callable[[Table], float], table: Table, split: Split | None, exact: bool = False
) -> float:
    """`key` of one shard of `table` cut by `split` (None: whole): the shard's own (`exact`:
    `key` rates a shard `Table` itself), else its table's over the parts."""
    if split is None or split.parts == 1:
        return key(table)
    if exact:
        return key(split_table(table, split.kind, split.parts)[0])
    return key(table) / split.parts


# Under an `exact` key, a table is halved once more only if that takes at least a quarter off
# its shard's key (a key linear in the width halves it; a GPU's kernel time of a column
# narrower than the fewest bytes a row read costs hardly moves).
HALVING_GAIN = 0.75


def balance_splits(
    task: PlacementTask,
    key: Callable[[Table], float],
    start: tuple[Split, ...] = (),
    max_parts: int | None = None,
    exact: bool = False,
) -> tuple[Split, ...]:
    """`start` plus the column halvings of the balance rule under `key` (module docstring),
    each table halved into at most `max_parts` shards by the rule (None: no cap but the
    table's). `exact`: `key` rates a column shard itself (its own `Table`), not as its table's
    key over the parts, and a table is halved only while that lowers its shard's key: under a
    GPU's kernel time an 8-wide column of a 32-wide table reads as many bytes a row as the
    whole (`row_bytes_min`), so halving it again only repeats its lookups."""
    splits = {s.table: s for s in start}
    tables = {t.name: t for t in task.tables}
    keys = {name: key(t) for name, t in tables.items()}
    mean = sum(keys.values()) / task.num_devices
    whole = named_tables(task)  # a table a constraint names stays whole
    tables = {
        name: t for name, t in tables.items() if name not in whole and allowed(task, name, "column")
    }
    limit = {name: max_column_parts(t, task.num_devices) for name, t in tables.items()}

    def halved(name: str) -> Split:
        return Split(name, "column", splits[name].parts * 2 if name in splits else 2)

    def can_halve(name: str) -> bool:
        split = splits.get(name)
        cap = limit[name] if max_parts is None else min(limit[name], max_parts)
        fits = split is None or (split.kind == "column" and split.parts * 2 <= cap)
        if not (fits and exact):
            return fits
        table, half = tables[name], halved(name)
        if split_problem(table, "column", half.parts):
            return False
        now = shard_key(key, table, split, exact)
        return shard_key(key, table, half, exact) <= HALVING_GAIN * now

    for name in sorted(tables, key=lambda n: (-keys[n], n)):
        while (
            shard_key(key, tables[name], splits.get(name), exact) > mean
            and can_halve(name)
            and limit[name] > 1
        ):
            splits[name] = halved(name)
    return tuple(splits[t.name] for t in task.tables if t.name in splits)


def bound_variants(
    task: PlacementTask,
    key: Callable[[Table], float],
    base: tuple[Split, ...],
    host_size: int = 0,
    exact: bool = False,
) -> list[tuple[Split, ...]]:
    """The balance rule under `key` over `base` (`balance_splits`, `exact`: `key` rates a
    column shard itself) with each table that alone, or as its rule's column shard, keys
    above a device's mean cut instead into row ranges:
    over all D devices (row-wise), and over the `host_size` devices of one host (table-row-wise,
    on hosts of that size). A column cut repeats its table's lookups in every shard and stops
    at widths of 4, so a hot narrow table (hundreds of lookups a sample, 8 wide) stays the
    busiest device's load by itself; row ranges share its lookups out. Tables `base` splits,
    or that cannot be cut so, keep their split."""
    d = task.num_devices
    mean = sum(key(t) for t in task.tables) / d
    rule = {s.table: s for s in balance_splits(task, key, base, exact=exact)}
    kept = set(base)
    ways = [("row", d)] + ([("table_row", host_size)] if 1 < host_size < d else [])
    found = []
    for kind, parts in ways:
        splits = dict(rule)
        for table in task.tables:
            split = rule.get(table.name)
            if split in kept or (split and split.kind != "column"):
                continue
            bound = shard_key(key, table, split, exact) > mean
            if bound and allowed(task, table.name, kind) and not split_problem(table, kind, parts):
                splits[table.name] = Split(table.name, kind, parts)
        found.append(tuple(splits[t.name] for t in task.tables if t.name in splits))
    return found


def row_variant(
    task: PlacementTask, splits: tuple[Split, ...], base: tuple[Split, ...]
) -> tuple[Split, ...]:
    """`splits` with each table the balance rule cut (those not in `base`, the memory splits)
    cut instead into row ranges over all D devices, TorchRec's row-wise layout (pinned, shard r
    on device r: `pinned_shards`); a table that cannot be cut so keeps its
    column split."""
    d, kept = task.num_devices, set(base)
    by_name = {t.name: t for t in task.tables}

    def keeps(s: Split) -> bool:
        return (
            s in kept
            or bool(split_problem(by_name[s.table], "row", d))
            or not allowed(task, s.table, "row")
        )

    return tuple(s if keeps(s) else Split(s.table, "row", d) for s in splits)


def host_variant(
    task: PlacementTask, splits: tuple[Split, ...], base: tuple[Split, ...], host_size: int
) -> tuple[Split, ...]:
    """`splits` with each table the balance rule cut (those not in `base`), and each table
    memory cut row-wise over all devices whose rows fit `host_size` devices, cut instead into
    row ranges over the `host_size` devices of one host (table-row-wise: their partial sums
    reduced on the host's links, 1/L of them crossing the network from each device); a table
    that cannot be cut so keeps its split."""
    kept, by_name = set(base), {t.name: t for t in task.tables}

    def fits(split: Split) -> bool:
        table = by_name[split.table]
        if not allowed(task, table.name, "table_row"):
            return False
        if split_problem(table, "table_row", host_size):
            return False
        if split not in kept:
            return True
        shard = split_table(table, "table_row", host_size)[0]
        return split.kind == "row" and task.bytes_of(shard) <= task.memory_cap_bytes

    return tuple(Split(s.table, "table_row", host_size) if fits(s) else s for s in splits)


def split_place(
    task: PlacementTask,
    splits: tuple[Split, ...],
    planner: Callable[[PlacementTask], Placement],
    method: str = "",
) -> Placement:
    """`planner`'s placement of the shards of `task` under `splits`, carrying the splits.

    Row shards pinned to their devices (`pinned_shards`) are placed first; the planner places
    the other shards within what they leave (each device's cap less the largest pinned load,
    so every device keeps room), without weighing the pinned shards' cost, which row ranges of
    one table spread over every device alike."""
    shards = shard_task(task, splits)
    pinned, free, rest = planned_shards(task, splits)
    if not pinned:
        return replace(planner(shards), splits=tuple(splits))
    devices = np.zeros(len(shards.tables), dtype=np.int64)
    devices[list(pinned)] = list(pinned.values())
    placement = Placement((), method)  # when every shard is pinned, the planner has none
    if free:
        placement = planner(rest)
        devices[free] = placement.devices
    return replace(placement, devices=tuple(int(d) for d in devices), splits=tuple(splits))


def planned_shards(
    task: PlacementTask, splits: tuple[Split, ...]
) -> tuple[dict[int, int], list[int], PlacementTask]:
    """What `split_place` hands a planner: (the shards pinned to their devices, shard index ->
    device; the other shards' indices; the task of those others, each device's cap less the
    largest pinned load, or the shard task itself when none is pinned)."""
    shards = shard_task(task, splits)
    pinned = pinned_shards(shards, splits)
    free = [i for i in range(len(shards.tables)) if i not in pinned]
    if not pinned:
        return pinned, free, shards
    sizes = shards.table_bytes()
    load = np.zeros(task.num_devices, dtype=np.int64)
    for i, d in pinned.items():
        load[d] += sizes[i]
    rest = replace(
        shards,
        tables=tuple(shards.tables[i] for i in free),
        memory_cap_bytes=int(task.memory_cap_bytes - load.max()),
    )
    if free and rest.memory_cap_bytes <= 0:
        raise InfeasibleError(
            "the row-wise shards leave no memory for the other tables; raise the memory "
            "per device or add devices"
        )
    return pinned, free, rest


def candidate_splits(
    task: PlacementTask,
    keys: Iterable[Callable[[Table], float]] = (),
    host_size: int = 0,
    first: Iterable[tuple[Split, ...]] = (),
) -> Iterator[tuple[Split, ...]]:
    """Distinct split sets, most telling first, each made when asked for (a budget may rate
    only the first few): the memory splits alone; the balance rule over them under each of
    `keys` (a planner's own: the cost network's cost of each table alone, the rule it rates
    best most often at 428-856 tables on 64-128 devices) and each heuristic's key (the memory
    splits come first); the rule's tables cut
    row-wise instead (`row_variant`); on hosts of `host_size` devices (0: one host) the memory
    splits and the rules table-row-wise (`host_variant`); each rule stopped at every halving
    level on the way (at most 2, 4, ... shards a table): on a CPU a column shard repeats all of
    its table's lookups, so one halving can beat the rule's quarters; last, the memory splits
    and the rules with the small tables data-parallel (`replica_splits`; at 856 dlrm tables on
    128 devices these cost the most to place and rate, and rated the dearest). `first`: a
    planner's own candidates, weighed right after the memory splits."""
    base = memory_splits(task)
    seen = set()

    def unseen(splits: tuple[Split, ...]) -> bool:
        identity = _identity(splits)
        fresh = identity not in seen
        seen.add(identity)
        return fresh

    unseen(base)
    yield base
    yield from (splits for splits in first if unseen(splits))
    keys = (*keys, *HEURISTIC_KEYS.values())
    rules = [balance_splits(task, key, base) for key in keys]
    variants = [lambda splits: splits, lambda splits: row_variant(task, splits, base)]
    if 1 < host_size < task.num_devices:
        variants.append(lambda splits: host_variant(task, splits, base, host_size))
    for variant in variants:
        for splits in (base, *rules):
            splits = variant(splits)
            if unseen(splits):
                yield splits
    for key, full in zip(keys, rules):
        deepest = max((s.parts for s in full if s.kind == "column"), default=1)
        for cap in [2**k for k in range(1, deepest.bit_length() - 1)]:  # 2, 4, ... below deepest
            splits = balance_splits(task, key, base, cap)
            if unseen(splits):
                yield splits
    for splits in (base, *rules):
        replicated = splits + replica_splits(task, splits)
        if unseen(replicated):
            yield replicated


def choose_splits(
    task: PlacementTask,
    candidates: Iterable[tuple[Split, ...]],
    rating: SplitRating,
    keys=tuple(HEURISTIC_KEYS),
    deadline: Deadline | None = None,
    exact: bool = False,
    also: Callable[[tuple[Split, ...]], list[Placement]] | None = None,
) -> tuple[tuple[Split, ...], float]:
    """The candidate whose shards the heuristics `keys` place cheapest as `rating` rates their
    placements (`heuristic_placements`; a candidate none of them places rates infinite), the
    first on ties, and that cost, in two passes until `deadline` passes (the first candidate
    is always rated). First every candidate in order: the first placed by every key, each of
    the others only by the key whose placement of the first rated cheapest (falling back to
    the next where its packing fails), one placement and one rating each, not four. Then,
    cheapest first, each candidate again by every key, as time allows: on a small task every
    candidate is weighed by all four, as it was before the first pass existed. Unless `exact`,
    a heuristic whose greedy path memory stops places by its quick stand-in
    (`quick_greedy_place`): its packing search took a tenth of a second a placement at 856
    tables on 128 devices under binding memory, so the default budget (then half a second)
    rated the memory splits alone and split nothing else. With the cost network's rating and
    the default budget, 856 dlrm tables on 128 devices see 16 (binding memory) and 17 (loose)
    of their 22 candidates (2026-12-05, this 2-core host). `also`: more placements of a
    candidate's shards (a planner's own), rated with the heuristics' in both passes."""
    deadline = deadline or Deadline()
    order, rated = list(keys), []  # (cost, position, splits, placed by every key)
    extra: list[list[Placement]] = []  # `also`'s placements of each rated candidate
    for splits in candidates:
        if rated and deadline.passed():
            break
        shards = shard_task(task, splits)
        extra.append(also(splits) if also else [])
        if not rated:  # the first: every key, each placement rated alone
            found = heuristic_placements(task, splits, order, named=True, exact=exact)
            costs = {key: rating(shards, [p]) for key, p in found}
            order.sort(key=lambda k: costs.get(k, float("inf")))
            own = rating(shards, extra[0]) if extra[0] else float("inf")
            rated.append((min([own, *costs.values()]), 0, splits, True))
            continue
        found = heuristic_placements(task, splits, order, first_only=True, exact=exact)
        found += extra[-1]
        cost = rating(shards, found) if found else float("inf")
        rated.append((cost, len(rated), splits, len(order) == 1))
    for _, position, splits, complete in sorted(rated, key=lambda r: r[:2]):
        if complete:
            continue
        if deadline.passed():
            break
        found = heuristic_placements(task, splits, order, exact=exact) + extra[position]
        if found:
            rated[position] = (rating(shard_task(task, splits), found), position, splits, True)
    cost, _, best, _ = min(rated, key=lambda r: r[:2])
    return best, cost


def heuristic_placements(
    task: PlacementTask,
    splits: tuple[Split, ...],
    keys=tuple(HEURISTIC_KEYS),
    named: bool = False,
    first_only: bool = False,
    exact: bool = True,
) -> list:
    """The placements of `task`'s shards under `splits` by the heuristics `keys` whose packing
    search finds one, row shards over all devices and replicas pinned (`split_place`): what a
    split candidate is rated on. `named`: (key, placement) pairs; `first_only`: only the first
    key that finds one; `exact`: each heuristic's own placement (`greedy_place`), else its
    quick stand-in where memory binds (`quick_greedy_place`)."""
    place = greedy_place if exact else quick_greedy_place
    placements = []
    for key in keys:
        try:
            found = split_place(task, splits, lambda s, key=key: place(s, key))
        except InfeasibleError:  # its packing search gave up; the others may not
            continue
        placements.append((key, found) if named else found)
        if first_only:
            break
    return placements


def _identity(splits: tuple[Split, ...]) -> tuple:
    return tuple(sorted((s.table, s.kind, s.parts) for s in splits))


def checked_balance_splits(
    task: PlacementTask,
    key_name: str,
    rating: SplitRating,
    deadline: Deadline | None = None,
    host_size: int = 0,
) -> tuple[Split, ...]:
    """The heuristic `key_name`'s balance rule (`balance_splits`), its column halvings or the
    same tables cut row-wise over all devices (`row_variant`) or, on hosts of `host_size`
    devices, over one host's (`host_variant`), kept only where `rating` (the
    calibrated analytic model, for the heuristics) rates the heuristic's own placement of the
    shards cheaper than of the tables with only the memory splits (which win ties). The rule's
    key does not see that a column shard still does all of its table's lookups; on real
    kernels the unchecked rule made 4-6 of 32 heuristic plans slower than whole tables beyond
    the noise, the checked one none (the retired split_tables study of 2026-12-01, in git
    history at commit ea3bb69)."""
    base = memory_splits(task)
    balanced = balance_splits(task, HEURISTIC_KEYS[key_name], base)
    if _identity(balanced) == _identity(base):
        return base
    candidates = [base, balanced, row_variant(task, balanced, base)]
    if 1 < host_size < task.num_devices:
        candidates.append(host_variant(task, balanced, base, host_size))
    return choose_splits(task, candidates, rating, [key_name], deadline, exact=True)[0]
