"""What a user requires of a placement beyond memory: tables pinned to a device, kept together
on one device, or kept apart on different ones, and tables no planner may split.

`Constraints` names tables; it travels in `PlanOptions.constraints`, and `BasePlanner.place`
binds it to the task (`PlacementTask.constraints`), so a placement that breaks it is illegal
like one over memory (`tasks.placement_problem`): every planner's legality check holds it. The
planners honour it where they choose devices, not by repairing a plan afterwards:

- the placing order (`placing_order`): pinned tables first, and the members of a together group
  one after the other, where its first member comes;
- the allowed devices of a table given the tables placed before it (`BoundConstraints.allowed`):
  its pin, its group's device (the first member needs room for the whole group), never a device
  that holds one of the tables it must be apart from. The greedy heuristics' and random's
  search (`packing.search_assignment`) and the learned planners' mask (`CompletionGuard`, what
  the policy, the RNN and the cost network's greedy placement choose within) read it;
- the local searches (`device_search`) never move a pinned table or one of a group alone, and
  never move a table next to one it must be apart from.

Tables a constraint names are never split (`splittable`). A set that cannot hold on the task
(an unknown table, a device out of range, a group pinned two ways, a group too big for one
device, tables both together and apart, apart sets that hold one by one but not all at once,
...) is a DreamshardError naming the conflict (`conflict`), before any planning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dreamshard.errors import DreamshardError, InfeasibleError
from dreamshard.report import format_bytes


@dataclass(frozen=True)
class Constraints:
    """Required of a placement: `pins` (table, device) pairs, `together` groups of tables on one
    device, `apart` groups of tables on different devices, `no_split` tables placed whole,
    `sharding` tables cut one way, and `offered` (table, the TorchRec sharding types it may
    take): what its sharder offers (`DreamShardPlanner`). An offered table is planned within its
    types (`allows`): whole where table_wise or column_wise is among them (a whole table is one
    column-wise shard) and it fits a device, the planner's own splits kept where their kind is
    offered; else cut by the first offered kind that holds it (`forced_splits`)."""

    pins: tuple[tuple[str, int], ...] = ()
    together: tuple[tuple[str, ...], ...] = ()
    apart: tuple[tuple[str, ...], ...] = ()
    no_split: tuple[str, ...] = ()
    sharding: tuple[tuple[str, str, int], ...] = ()  # (table, TorchRec kind, parts or 0)
    offered: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (table, TorchRec sharding types)

    def __bool__(self) -> bool:
        return bool(
            self.pins
            or self.together
            or self.apart
            or self.no_split
            or self.sharding
            or self.offered
        )

    def allows(self, name: str, kind: str | None) -> bool:
        """Whether table `name` may be cut `kind`-wise (ours: "column", "row", "replica",
        "table_row"; None: kept whole) under `offered`."""
        types = dict(self.offered).get(name)
        if types is None:
            return True
        if kind is None:
            return WHOLE in types or "column_wise" in types
        return OUR_TYPES[kind] in types

    def sharded(self) -> set[str]:
        """The tables `sharding` cuts (table_wise is `no_split`)."""
        return {name for name, _, _ in self.sharding}

    def named(self) -> set[str]:
        """Every table a constraint names."""
        names = {name for name, _ in self.pins} | set(self.no_split) | self.sharded()
        for group in self.together + self.apart:
            names |= set(group)
        return names

    def merged(self, other: Constraints) -> Constraints:
        """Both sets at once (a file and flags)."""
        return Constraints(
            self.pins + other.pins,
            self.together + other.together,
            self.apart + other.apart,
            self.no_split + other.no_split,
            self.sharding + other.sharding,
            self.offered + other.offered,
        )

    def as_dict(self) -> dict:
        return {
            "pin": {name: device for name, device in self.pins},
            "together": [list(g) for g in self.together],
            "apart": [list(g) for g in self.apart],
            "no_split": list(self.no_split),
            "sharding": {
                name: kind + (f":{parts}" if parts else "") for name, kind, parts in self.sharding
            },
        }


def joined(first: Constraints | None, second: Constraints | None) -> Constraints | None:
    """Both sets of constraints, or the one given."""
    if first is None or second is None:
        return first or second
    return first.merged(second)


class ConstraintsFile(BaseModel):
    """A constraints file (JSON): `{"pin": {"t3": 0}, "together": [["t1", "t2"]], "apart":
    [["t4", "t5"]], "no_split": ["t6"], "sharding": {"t7": "row_wise"}}`, every key
    optional."""

    model_config = ConfigDict(extra="forbid")

    pin: dict[str, int] = Field(default_factory=dict)
    together: list[list[str]] = Field(default_factory=list)
    apart: list[list[str]] = Field(default_factory=list)
    no_split: list[str] = Field(default_factory=list)
    sharding: dict[str, str] = Field(default_factory=dict)

    def constraints(self) -> Constraints:
        for key, groups in (("together", self.together), ("apart", self.apart)):
            for group in groups:
                if len(set(group)) < 2:
                    raise DreamshardError(
                        f"{key} {group}: name at least two distinct tables in each group"
                    )
        sharding = [parse_sharding(f"{name}={kind}") for name, kind in self.sharding.items()]
        return Constraints(
            tuple(self.pin.items()),
            tuple(tuple(g) for g in self.together),
            tuple(tuple(g) for g in self.apart),
            tuple(self.no_split) + tuple(name for name, kind, _ in sharding if kind == WHOLE),
            tuple(s for s in sharding if s[1] != WHOLE),
        )


def read_constraints(path: str | Path) -> Constraints:
    """A constraints file's constraints; a DreamshardError naming the file and the field."""
    from dreamshard.files import read_json, validate

    return validate(ConstraintsFile, read_json(path, "constraints file"), str(path)).constraints()


def parse_pin(text: str) -> tuple[str, int]:
    """`TABLE=DEVICE` (the `--pin` flag)."""
    name, sep, device = text.rpartition("=")
    if not sep or not name or not device.strip().isdigit():
        raise DreamshardError(f"--pin {text!r}: write TABLE=DEVICE, the device a number from 0")
    return name, int(device)


# `--sharding` kinds (TorchRec's names) and ours (`tables.shards`): table_wise keeps a table
# whole (`no_split`); the others cut it so
WHOLE = "table_wise"
SHARDING_KINDS = {"column_wise": "column", "row_wise": "row", "data_parallel": "replica"}
OUR_TYPES = {v: k for k, v in SHARDING_KINDS.items()} | {"table_row": "table_row_wise"}


def parse_sharding(text: str) -> tuple[str, str, int]:
    """`TABLE=KIND[:PARTS]` (the `--sharding` flag): KIND one of table_wise, column_wise,
    row_wise, data_parallel (table_row_wise is not asked for by name: `--split auto` weighs
    it across hosts); PARTS (column_wise only) the shards, a power of
    two (default: the fewest that fit a device)."""
    name, sep, spec = text.rpartition("=")
    kind, _, parts = spec.partition(":")
    kinds = ", ".join((WHOLE, *SHARDING_KINDS))
    if not sep or not name or kind not in (WHOLE, *SHARDING_KINDS):
        raise DreamshardError(f"--sharding {text!r}: write TABLE=KIND, KIND one of {kinds}")
    if parts and (kind != "column_wise" or not parts.isdigit() or int(parts) < 2):
        raise DreamshardError(
            f"--sharding {text!r}: only column_wise takes a shard count (column_wise:4)"
        )
    return name, kind, int(parts or 0)


def forced_splits(task, constraints: Constraints | None) -> tuple:
    """The splits `constraints.sharding` asks for on `task` (`tables.shards.Split`): column_wise
    into its PARTS or the fewest power-of-two shards that fit a device (at least 2), row_wise
    over all D devices (TorchRec's layout), data_parallel a copy on each device; a
    DreamshardError where one cannot be made."""
    from dreamshard.tables.shards import Split, max_column_parts, split_problem, split_table

    if not constraints:
        return ()
    by_name = {t.name: t for t in task.tables}
    d, cap, found = task.num_devices, task.memory_cap_bytes, []
    for name, kind, parts in constraints.sharding + offered_cuts(task, constraints):
        table = by_name.get(name)
        if table is None:
            raise DreamshardError(f"--sharding: no table is named {name!r}")
        ours = SHARDING_KINDS[kind]
        if kind == "column_wise" and not parts:
            most, parts = max_column_parts(table, d), 2
            while parts < most and task.bytes_of(split_table(table, "column", parts)[0]) > cap:
                parts *= 2
        elif kind in ("row_wise", "data_parallel"):
            parts = d
        problem = split_problem(table, ours, parts)
        if problem:
            raise DreamshardError(f"--sharding {name}={kind}: {problem}")
        shard = task.bytes_of(split_table(table, ours, parts)[0])
        if shard > cap:
            raise DreamshardError(
                f"--sharding {name}={kind}: a shard needs {format_bytes(shard)}, more than one "
                f"device's {format_bytes(cap)}"
                + ("; ask for more shards (column_wise:8) or row_wise" if ours == "column" else "")
            )
        found.append(Split(name, ours, parts))
    return tuple(found)


def offered_cuts(task, constraints: Constraints) -> tuple[tuple[str, str, int], ...]:
    """`sharding` entries for the offered tables no other constraint names that cannot stay
    whole (its types keep none whole, or it fits no device): the first offered of
    column_wise (the fewest shards that fit, when whole is allowed but too big), row_wise
    and data_parallel whose shard fits a device; DreamshardError naming a table none holds."""
    from dreamshard.tables.shards import max_column_parts, split_problem, split_table

    named, cap, d = constraints.named(), task.memory_cap_bytes, task.num_devices
    by_name = {t.name: t for t in task.tables}
    cuts = []
    for name, types in constraints.offered:
        table = by_name.get(name)
        if name in named or table is None:  # `conflict` says what is wrong with those
            continue
        if constraints.allows(name, None) and task.bytes_of(table) <= cap:
            continue
        for kind in ("column_wise", "row_wise", "data_parallel"):
            ours = SHARDING_KINDS[kind]
            parts = max_column_parts(table, d) if kind == "column_wise" else d
            if kind not in types or split_problem(table, ours, parts):
                continue
            if task.bytes_of(split_table(table, ours, parts)[0]) <= cap:
                cuts.append((name, kind, 0))
                break
        else:
            raise DreamshardError(
                f"table {name} ({format_bytes(task.bytes_of(table))}) fits no device of "
                f"{format_bytes(cap)} in any sharding its sharder offers "
                f"({', '.join(types) or 'none'})"
            )
    return tuple(cuts)


def planned_splits(task, constraints: Constraints | None, own=None) -> tuple:
    """The splits a plan of `task` uses: `forced_splits` (first, so that what cannot hold is
    said before a planner weighs anything), and the planner's own split choice of the tables
    they leave (`own()`, None under split="none"; `splittable`)."""
    forced = forced_splits(task, constraints)
    cut = {s.table for s in forced}
    chosen = splittable(constraints, own()) if own is not None else ()
    return tuple(s for s in chosen if s.table not in cut) + forced


def sharding_problem(constraints: Constraints | None, splits: tuple) -> str | None:
    """Why a plan's `splits` do not cut the tables as `constraints.sharding` asks (the kind,
    and the shard count where one was given) or split a table kept whole, or None."""
    if not constraints:
        return None
    cut = {s.table: s for s in splits}
    for name, kind, parts in constraints.sharding:
        split = cut.get(name)
        if split is None or split.kind != SHARDING_KINDS[kind] or (parts and split.parts != parts):
            return f"table {name} is not sharded {kind}{f':{parts}' if parts else ''}"
    for name in constraints.no_split:
        if name in cut:
            return f"table {name} is split, but must stay whole"
    for name, types in constraints.offered:
        kind = cut[name].kind if name in cut else None
        if not constraints.allows(name, kind):
            how = "whole" if kind is None else f"{OUR_TYPES[kind]}"
            return f"table {name} is {how}, but its sharder offers only {', '.join(types)}"
    return None


def parse_group(text: str, flag: str) -> tuple[str, ...]:
    """`T1,T2,...` (the `--together` and `--apart` flags): at least two distinct tables."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if len(set(names)) < 2:
        raise DreamshardError(f"{flag} {text!r}: name at least two tables, comma-separated")
    return names


@dataclass
class BoundConstraints:
    """Constraints as indices of one task's tables (see `bind`)."""

    pin: np.ndarray  # [T] the device each table is pinned to, or -1 (pins reach whole groups)
    group: np.ndarray  # [T] each table's together group, or -1
    members: list[np.ndarray]  # each together group's tables
    group_bytes: np.ndarray  # [groups] bytes of each group's tables
    partners: dict[int, np.ndarray] = field(default_factory=dict)  # table -> tables apart

    @property
    def frozen(self) -> np.ndarray:
        """[T] the tables a search may not move alone: pinned ones and group members."""
        return (self.pin >= 0) | (self.group >= 0)

    def allowed(
        self, table: int, devices: np.ndarray, used: np.ndarray, sizes: np.ndarray, cap: int
    ) -> np.ndarray:
        """[E, D] where `table` may go in each of E partial placements: `devices` [E, T] the
        device of each table placed so far (-1 where not yet), `used` [E, D] their bytes."""
        e, d = used.shape
        allowed = np.ones((e, d), dtype=bool)
        if self.pin[table] >= 0:
            allowed[:] = False
            allowed[:, self.pin[table]] = True
        g = self.group[table]
        if g >= 0:
            where = devices[:, self.members[g]].max(axis=1)  # placed members share a device
            placed = where >= 0
            allowed[placed] &= np.arange(d)[None, :] == where[placed, None]
            # the first member to go needs room for the group (the rest follow at once)
            rest = self.group_bytes[g] - sizes[table]
            allowed[~placed] &= used[~placed] + sizes[table] + rest <= cap
        for partner in self.partners.get(table, ()):
            where = devices[:, partner]
            hit = np.flatnonzero(where >= 0)
            allowed[hit, where[hit]] = False
        return allowed

    def keep(self, devices: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """[N] which neighbours of a placement (`devices` [T]) hold the constraints: `rows`
        [N, 4] (table a, a's new device, table b or -1, b's new device), a move or a swap. No
        neighbour moves a pinned table or a group member, or puts a table beside one it must
        be apart from."""
        a, to_a, b, to_b = rows.T
        frozen = self.frozen
        keep = ~frozen[a] & ~((b >= 0) & frozen[np.maximum(b, 0)])
        if not self.partners:
            return keep
        watched = np.zeros(len(devices), dtype=bool)
        watched[list(self.partners)] = True
        for n in np.flatnonzero(keep & (watched[a] | ((b >= 0) & watched[np.maximum(b, 0)]))):
            after = {int(a[n]): int(to_a[n])}
            if b[n] >= 0:
                after[int(b[n])] = int(to_b[n])
            for table, device in after.items():
                others = self.partners.get(table, ())
                if any(after.get(int(o), int(devices[o])) == device for o in others):
                    keep[n] = False
                    break
        return keep

    def problem(self, names: list[str], devices: np.ndarray) -> str | None:
        """Why a placement's `devices` [T] break the constraints, or None."""
        for i in np.flatnonzero((self.pin >= 0) & (devices != self.pin)):
            return f"table {names[i]} is pinned to device {self.pin[i]}, not on {devices[i]}"
        for tables in self.members:
            if len(set(devices[tables].tolist())) > 1:
                return f"tables {', '.join(names[i] for i in tables)} must share one device"
        for table, others in self.partners.items():
            for other in others:
                if devices[other] == devices[table]:
                    return f"tables {names[table]} and {names[other]} must be on different devices"
        return None

    def order(self, order: list[int]) -> list[int]:
        """`order` with the pinned tables first and each together group's members one after
        another where its first member stands (each part in `order`'s own order)."""
        pinned = [t for t in order if self.pin[t] >= 0]
        position = {int(m): k for k, m in enumerate(order)}
        rest, seen = [], set()
        for t in order:
            if self.pin[t] >= 0:
                continue
            g = int(self.group[t])
            if g < 0:
                rest.append(t)
            elif g not in seen:
                seen.add(g)
                rest.extend(sorted(self.members[g].tolist(), key=position.__getitem__))
        return pinned + rest


def bind(task) -> BoundConstraints | None:
    """`task.constraints` as indices of its tables (None when none place a table: no pins,
    groups or apart sets), computed once per task; a DreamshardError naming the first
    conflict (`conflict`)."""
    constraints = task.constraints
    if not constraints:
        return None
    if "_bound_constraints" not in task.__dict__:
        problem = conflict(task, constraints)
        if problem:  # no legal placement: a split candidate's reduced cap skips that candidate
            raise InfeasibleError(f"the constraints cannot hold: {problem}")
        places = constraints.pins or constraints.together or constraints.apart
        bound = _bind(task, constraints) if places else None
        object.__setattr__(task, "_bound_constraints", bound)  # frozen: set past the guard
    return task.__dict__["_bound_constraints"]


def _components(index: dict[str, int], groups) -> list[list[int]]:
    """The together groups merged where they share a table (union-find)."""
    parent = list(range(len(index)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for group in groups:
        first = index[group[0]]
        for name in group[1:]:
            parent[find(index[name])] = find(first)
    found: dict[int, list[int]] = {}
    for group in groups:
        for name in group:
            found.setdefault(find(index[name]), [])
    for i in range(len(index)):
        if find(i) in found:
            found[find(i)].append(i)
    return [sorted(set(v)) for v in found.values() if len(set(v)) > 1]


def conflict(task, constraints: Constraints) -> str | None:
    """The first reason `constraints` cannot hold on `task`'s tables and devices, or None."""
    names = [t.name for t in task.tables]
    index = {name: i for i, name in enumerate(names)}
    shards = {t.shard.of for t in task.tables if t.shard is not None}
    sharded = constraints.sharded()
    # a sharded table is cut (its shards may be placed apart from the rest): `forced_splits`
    # finds it, `sharding_problem` checks its cut
    unknown = sorted(constraints.named() - set(index) - sharded)
    if unknown:
        if unknown[0] in shards:
            return f"table {unknown[0]} is split, so it cannot be constrained; raise memory"
        return f"no table is named {unknown[0]!r}"
    placing = {name for name, _ in constraints.pins}
    for group in constraints.together + constraints.apart:
        placing |= set(group)
    both = sorted(sharded & (placing | set(constraints.no_split)))
    if both:
        return f"table {both[0]} is sharded, so it cannot also be pinned, grouped or kept whole"
    asked = {name: kind for name, kind, _ in constraints.sharding}
    for name, types in constraints.offered:  # what sharders offer: named by the planner
        if name not in index:  # split already (`sharding_problem` checks its kind)
            continue
        if name in asked and asked[name] not in types:
            return f"table {name} is sharded {asked[name]}, which its sharder does not offer"
        if name in constraints.named() - sharded and not constraints.allows(name, None):
            return f"table {name} must stay whole, which no sharding its sharder offers does"
    twice = [name for name, *_ in constraints.sharding]
    if len(set(twice)) < len(twice):
        return f"table {next(n for n in twice if twice.count(n) > 1)} is sharded twice"
    sizes, cap = task.table_bytes(), task.memory_cap_bytes
    for name in sorted(constraints.named() - sharded):
        if sizes[index[name]] > cap:
            return (
                f"table {name} must stay whole (a constraint names it) but needs "
                f"{format_bytes(sizes[index[name]])}, more than one device's {format_bytes(cap)}"
            )
    pins: dict[str, int] = {}
    for name, device in constraints.pins:
        if not 0 <= device < task.num_devices:
            return f"table {name} is pinned to device {device}, outside 0..{task.num_devices - 1}"
        if pins.setdefault(name, device) != device:
            return f"table {name} is pinned to both device {pins[name]} and device {device}"
    groups = _components(index, constraints.together)
    group_of = {i: g for g, members in enumerate(groups) for i in members}
    group_pin: dict[int, tuple[str, int]] = {}
    for name, device in pins.items():
        g = group_of.get(index[name])
        if g is None:
            continue
        other = group_pin.setdefault(g, (name, device))
        if other[1] != device:
            return (
                f"tables {other[0]} and {name} must be together but are pinned to devices "
                f"{other[1]} and {device}"
            )
    for members in groups:
        total = int(sizes[members].sum())
        if total > cap:
            listed = ", ".join(names[i] for i in members)
            return (
                f"tables {listed} must be together but need {format_bytes(total)}, more than one "
                f"device's {format_bytes(cap)}"
            )
    for group in constraints.apart:
        if len(set(group)) > task.num_devices:
            return f"{len(set(group))} tables must be apart on only {task.num_devices} devices"
        seen: dict[object, str] = {}
        for name in group:
            i = index[name]
            key = ("group", group_of[i]) if i in group_of else None
            device = pins.get(name)
            if device is None and i in group_of:
                device = group_pin.get(group_of[i], (None, None))[1]
            for k in (key, ("device", device) if device is not None else None):
                if k is None:
                    continue
                if k in seen and seen[k] != name:
                    why = "together" if k[0] == "group" else f"pinned to device {k[1]}"
                    return f"tables {seen[k]} and {name} must be apart but are {why}"
                seen.setdefault(k, name)
    problem = _apart_problem(task, constraints, index, group_of, pins, group_pin)
    if problem:
        return problem
    load = np.zeros(task.num_devices, dtype=np.int64)
    pinned = set()
    for name, device in pins.items():
        i = index[name]
        members = groups[group_of[i]] if i in group_of else [i]
        for m in members:
            if m not in pinned:
                pinned.add(m)
                load[device] += sizes[m]
    for g, (_, device) in group_pin.items():
        for m in groups[g]:
            if m not in pinned:
                pinned.add(m)
                load[device] += sizes[m]
    over = np.flatnonzero(load > cap)
    if over.size:
        d = int(over[0])
        return (
            f"the tables pinned to device {d} need {format_bytes(load[d])}, more than its "
            f"{format_bytes(cap)}"
        )
    return None


def _bind(task, constraints: Constraints) -> BoundConstraints:
    names = [t.name for t in task.tables]
    index = {name: i for i, name in enumerate(names)}
    t = len(names)
    groups = _components(index, constraints.together)
    group = np.full(t, -1, dtype=np.int64)
    for g, members in enumerate(groups):
        group[members] = g
    pin = np.full(t, -1, dtype=np.int64)
    for name, device in constraints.pins:
        i = index[name]
        pin[groups[group[i]] if group[i] >= 0 else [i]] = device
    sizes = task.table_bytes()
    partners: dict[int, set[int]] = {}
    for names_apart in constraints.apart:
        tables = sorted({index[n] for n in names_apart})
        for i in tables:
            partners.setdefault(i, set()).update(j for j in tables if j != i)
    # a group member must also keep away from its group-mates' partners
    for members in groups:
        away = set().union(*(partners.get(m, set()) for m in members))
        for m in members:
            if away:
                partners[m] = partners.get(m, set()) | away
        for other in away:
            partners.setdefault(other, set()).update(members)
    return BoundConstraints(
        pin,
        group,
        [np.array(m, dtype=np.int64) for m in groups],
        np.array([int(sizes[m].sum()) for m in groups], dtype=np.int64),
        {i: np.array(sorted(js), dtype=np.int64) for i, js in partners.items()},
    )


def describe_constraints(constraints: Constraints) -> str:
    """One line: how many of each kind, as `place` prints it."""
    parts = [
        (len(constraints.pins), "pinned table", "pinned tables"),
        (len(constraints.together), "group together", "groups together"),
        (len(constraints.apart), "set apart", "sets apart"),
        (len(constraints.no_split), "table kept whole", "tables kept whole"),
        (len(constraints.sharding), "sharded table", "sharded tables"),
    ]
    return ", ".join(f"{n} {one if n == 1 else many}" for n, one, many in parts if n)


def splittable(constraints: Constraints | None, splits: tuple) -> tuple:
    """`splits` without those of tables a constraint names (they are placed whole) or of a
    kind their offered types do not hold."""
    if not constraints:
        return splits
    named = constraints.named()
    return tuple(s for s in splits if s.table not in named and constraints.allows(s.table, s.kind))


# How many devices a colouring search tries before it gives up proving apart sets conflict (the
# planners' own search then says it found no placement).
APART_SEARCH_STEPS = 20_000
APART_SEARCH_UNITS = 500


def _apart_problem(task, constraints, index, group_of, pins, group_pin) -> str | None:
    """Why the apart sets cannot all hold on `task`'s devices though each set alone can (three
    tables pairwise apart on two devices), or None: the sets as a graph between the units they
    name (a together group is one unit, a pinned unit has its device), coloured with the
    devices by a backtracking search of at most `APART_SEARCH_STEPS` tries, most constrained
    unit first. None too when the search runs out of tries (no conflict proven)."""
    if len(constraints.apart) < 2:
        return None  # one set alone was checked against the device count and the pins
    unit_of = {name: group_of.get(index[name], ("table", index[name])) for name in index}
    edges: dict[object, set] = {}
    for group in constraints.apart:
        units = {unit_of[name] for name in group}
        for u in units:
            edges.setdefault(u, set()).update(units - {u})
    if len(edges) > APART_SEARCH_UNITS:  # the search recurses once a unit
        return None
    colour = {unit_of[name]: device for name, device in pins.items() if unit_of[name] in edges}
    colour.update({g: device for g, (_, device) in group_pin.items() if g in edges})
    steps = 0

    def taken(unit) -> set[int]:
        return {colour[v] for v in edges[unit] if v in colour}

    def search() -> bool | None:
        nonlocal steps
        free = [u for u in edges if u not in colour]
        if not free:
            return True
        unit = max(free, key=lambda u: (len(taken(u)), len(edges[u])))
        for device in sorted(set(range(task.num_devices)) - taken(unit)):
            steps += 1
            if steps > APART_SEARCH_STEPS:
                return None
            colour[unit] = device
            found = search()
            if found is not False:
                return found
            del colour[unit]
        return False

    if search() is not False:
        return None
    names = sorted({name for group in constraints.apart for name in group})
    listed = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return (
        f"the apart sets of tables {listed} cannot all hold on {task.num_devices} devices "
        "(each set alone can); keep fewer apart or plan on more devices"
    )
