"""A TorchRec plan read back as our placement of a task, checked as it is read.

One path for every TorchRec plan: a live `ShardingPlan`'s `ParameterSharding`s (TorchRec's own
planner, `DreamShardPlanner`, `check_sharding_plan`) and the JSON form that `place --format
torchrec` writes (`dreamshard check`, `torchrec_export.table_shardings`) both become
`TableSharding`s, and `placement_from_sharding` reads those. What it refuses comes in two
kinds, as `dreamshard check` reports them:

- a plan that cannot be read in our terms (DreamshardError, `check` exit 2): a sharding type we
  do not map (grid_shard, table_column_wise, ...), `ranks` that disagree with the shards'
  placements, shards that tile a table but not as ours do (column shards of unequal widths,
  row ranges that are not `row_bounds`), a table the task does not have;
- a plan that reads but breaks the task (`IllegalPlanError`, `check` exit 1, the table named):
  a rank outside the devices, a table missing, a table with no shards, a data-parallel table
  not on every device, a shard past its table's rows or width (negative offsets included),
  shards that overlap or leave a gap.

Empty shards (no rows or no columns) are skipped: TorchRec pads a row-wise plan with them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dreamshard.errors import DreamshardError, IllegalPlanError
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.tables.shards import Split, row_bounds, split_problem, split_table
from dreamshard.tables.table import Table

# the weight axis each sharding type's shards cut (data_parallel: none, a copy per rank)
CUT_AXIS = {"table_wise": 0, "row_wise": 0, "table_row_wise": 0, "column_wise": 1}
MAPPED_TYPES = (*CUT_AXIS, "data_parallel")
PLACEMENT = re.compile(r"rank:(\d+)/\S+")  # how TorchRec writes a shard's placement


@dataclass(frozen=True)
class ShardExtent:
    """One shard: its offsets and sizes in its table's weight [rows, dim], and the rank its
    placement names."""

    offsets: tuple[int, int]
    sizes: tuple[int, int]
    rank: int


@dataclass(frozen=True)
class TableSharding:
    """One table's `ParameterSharding` as plain data."""

    sharding_type: str
    ranks: tuple[int, ...]
    shards: tuple[ShardExtent, ...]


def as_table_sharding(sharding) -> TableSharding:
    """A live `ParameterSharding` as a `TableSharding` (a `TableSharding` as it is)."""
    if isinstance(sharding, TableSharding):
        return sharding
    spec = sharding.sharding_spec
    return TableSharding(
        str(sharding.sharding_type),
        tuple(int(r) for r in sharding.ranks or []),
        tuple(
            ShardExtent(
                tuple(int(x) for x in s.shard_offsets),
                tuple(int(x) for x in s.shard_sizes),
                int(s.placement.rank()),
            )
            for s in (spec.shards if spec is not None else [])
        ),
    )


def shard_rank(name: str, placement: str) -> int:
    """The rank of a shard's placement as the JSON form writes it (`rank:R/DEVICE`)."""
    found = PLACEMENT.fullmatch(placement)
    if found is None:
        raise DreamshardError(
            f"table {name}: shard placement {placement!r} is not 'rank:R/DEVICE' (rank:0/cuda:0)"
        )
    return int(found.group(1))


def placement_from_sharding(
    task: PlacementTask, module_plan, method: str = "torchrec"
) -> Placement:
    """Our placement from a module plan ({table name: ParameterSharding or TableSharding}):
    a table-wise table on its rank, a column-wise or row-wise table as our split on its
    shards' ranks, a data-parallel table as a replica on each of its ranks (module
    docstring for what it refuses)."""
    names = {t.name for t in task.tables}
    unknown = sorted(set(module_plan) - names)
    if unknown:
        raise DreamshardError(
            f"the plan shards table {unknown[0]}, which is not among the task's "
            f"{len(names)} tables (another model's plan, or another table file?)"
        )
    devices: list[int] = []
    splits: list[Split] = []
    for table in task.tables:
        sharding = module_plan.get(table.name)
        if sharding is None:
            raise IllegalPlanError(f"table {table.name} is missing from the plan")
        split, ranks = table_sharding(table, as_table_sharding(sharding), task.num_devices)
        devices.extend(ranks)
        if split is not None:
            splits.append(split)
    return Placement(tuple(devices), method=method, splits=tuple(splits))


def table_sharding(
    table: Table, sharding: TableSharding, num_devices: int
) -> tuple[Split | None, list[int]]:
    """One table's sharding as our split (None: whole) and its shards' ranks."""
    kind, ranks, shards = sharding.sharding_type, list(sharding.ranks), list(sharding.shards)
    name = table.name
    if kind not in MAPPED_TYPES:
        raise DreamshardError(
            f"table {name}: sharding type {kind!r} does not map to ours ({', '.join(MAPPED_TYPES)})"
        )
    if shards and [s.rank for s in shards] != ranks:
        raise DreamshardError(
            f"table {name}: its ranks {ranks} disagree with its shards' placements "
            f"{[s.rank for s in shards]}"
        )
    outside = [r for r in ranks if not 0 <= r < num_devices]
    if outside:
        raise IllegalPlanError(
            f"table {name}: rank {outside[0]} is outside the {num_devices} devices "
            f"(0..{num_devices - 1})"
        )
    if kind == "data_parallel":  # a copy on every rank: replica r on rank r
        if len(ranks) < 2 or len(set(ranks)) < len(ranks):
            raise DreamshardError(
                f"table {name} is data_parallel on ranks {ranks}; one replica on each of "
                "several ranks maps to ours"
            )
        if len(ranks) != num_devices:  # TorchRec copies it to every rank
            raise IllegalPlanError(
                f"table {name} is data_parallel on ranks {sorted(ranks)}, not a replica on each "
                f"of the {num_devices} devices"
            )
        return Split(name, "replica", len(ranks)), sorted(ranks)
    if not shards:
        raise IllegalPlanError(f"table {name} has no shards: none of its weight is placed")
    if len(ranks) != len(shards):
        raise DreamshardError(f"table {name}: {len(ranks)} ranks for {len(shards)} shards")
    pieces = [s for s in shards if s.sizes[0] != 0 and s.sizes[1] != 0]
    check_tiling(table, pieces)
    axis = CUT_AXIS[kind]  # 0: rows, 1: columns
    pieces.sort(key=lambda s: s.offsets[axis])
    ranges = [(s.offsets[axis], s.offsets[axis] + s.sizes[axis]) for s in pieces]
    if not cuts_like_ours(table, kind, ranges, pieces):
        what = "columns" if axis else "rows"
        raise DreamshardError(
            f"table {name} ({table.rows} x {table.dim}): its {kind} shards cover {what} "
            f"{', '.join(f'{a}:{b}' for a, b in ranges)}, not shards dreamshard cuts (k equal "
            "column shards, k a power of two, widths multiples of 4; or the even row ranges of "
            "tables.shards.row_bounds)"
        )
    cut = "column" if axis else ("table_row" if kind == "table_row_wise" else "row")
    split = Split(name, cut, len(ranges)) if len(ranges) > 1 else None
    return split, [s.rank for s in pieces]


def check_tiling(table: Table, shards: list[ShardExtent]) -> None:
    """IllegalPlanError unless the (non-empty) shards cover the table's [rows, dim] weight
    exactly once: none past its edges, none overlapping, no gap."""
    extent = (table.rows, table.dim)
    for s in shards:
        if any(o < 0 or z < 0 or o + z > e for o, z, e in zip(s.offsets, s.sizes, extent)):
            raise IllegalPlanError(
                f"table {table.name}: a shard at offsets {list(s.offsets)} of sizes "
                f"{list(s.sizes)} lies past its {table.rows} x {table.dim} weight"
            )
    for i, a in enumerate(shards):
        for b in shards[i + 1 :]:
            if all(
                max(a.offsets[k], b.offsets[k])
                < min(a.offsets[k] + a.sizes[k], b.offsets[k] + b.sizes[k])
                for k in (0, 1)
            ):
                raise IllegalPlanError(
                    f"table {table.name}: its shards at offsets {list(a.offsets)} and "
                    f"{list(b.offsets)} overlap"
                )
    covered = sum(s.sizes[0] * s.sizes[1] for s in shards)  # no overlap: the area they cover
    if covered != table.rows * table.dim:
        raise IllegalPlanError(
            f"table {table.name}: its shards cover {covered:,} of its {table.rows} x "
            f"{table.dim} weight's {table.rows * table.dim:,} elements, leaving a gap"
        )


def cuts_like_ours(
    table: Table, kind: str, ranges: list[tuple[int, int]], shards: list[ShardExtent]
) -> bool:
    """Whether shards of a `kind` sharding covering `ranges` (in order) of the axis it cuts,
    and the other axis whole, are the shards of one of our splits (or the whole table)."""
    axis = CUT_AXIS[kind]
    cut, parts = ("column" if axis else "row"), len(ranges)
    if parts != 1 and (kind == "table_wise" or split_problem(table, cut, parts)):
        return False
    full = (table.rows, table.dim)[1 - axis]
    return ranges == our_ranges(table, cut, parts) and all(
        s.offsets[1 - axis] == 0 and s.sizes[1 - axis] == full for s in shards
    )


def our_ranges(table: Table, cut: str, parts: int) -> list[tuple[int, int]]:
    """The column or row ranges of our `parts` shards of `table` along `cut`."""
    if parts == 1:
        return [(0, table.dim if cut == "column" else table.rows)]
    if cut == "row":
        return row_bounds(table.rows, parts)  # as split_table cuts them, without the trace
    return [(s.shard.start, s.shard.stop) for s in split_table(table, cut, parts)]
