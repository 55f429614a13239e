"""Shards of a table: column ranges (column-wise), row ranges (row-wise, or table-row-wise
over the devices of one host) and replicas (data-parallel).

A column-wise split cuts a table into k shards of equal width, k a power of two and each width a
multiple of 4 (fbgemm's rule). A column shard keeps its table's rows, pooling factor and access
histogram: every lookup still reads a row, only a narrower slice of it. A row-wise split cuts the
rows into k nearly equal ranges; a row shard has its share of the table's lookups (rows in
proportion) and the table's histogram, what a range of hashed or scattered ids holds on
average, known without reading the trace. A data-parallel table is replicated on every one of
the D devices: replica r, `name[dp r]`, holds the whole table and looks up the bags of the r-th
of D slices of the batch (its pooling factor is the table's over D: the same lookups in all),
its pooled output stays on its device (no all-to-all, `pooled_width` 0), and its gradients are
all-reduced over the D replicas (`costs.comm.allreduce_ms`). A table-row-wise table
(`table_row`, TorchRec's table_row_wise) is cut into the row ranges of a row split over the L
devices of one host: each computes partial sums of the whole batch, a reduce-scatter inside the
host adds them up (`reduce_width`, on the host's links), and each device then sends its 1/L of
the sums to the world like a table of that share of the width (`pooled_width`). An unsplit
table is one shard: itself.

A shard is a `Table` like any other (features, costs, memory and planners need nothing else),
named `name[c0:c1]` or `name[r0:r1]`, whose `shard` field says what it is cut from. Its `trace`
is its table's: measuring a shard reads its table's trace and keeps its columns or rows
(`tables.traces.trace_for`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dreamshard.errors import DreamshardError
from dreamshard.tables.table import ShardRange, Table

SPLIT_KINDS = ("column", "row", "replica", "table_row")
ROW_KINDS = ("row", "table_row")  # cut into row ranges


@dataclass(frozen=True)
class Split:
    """Cut table `table` into `parts` shards along `kind` ("column" or "row"; "table_row": row
    ranges over the `parts` devices of one host), or replicate it on `parts` devices (kind
    "replica": all of them, data-parallel)."""

    table: str
    kind: str
    parts: int


def split_problem(table: Table, kind: str, parts: int) -> str | None:
    """Why `table` cannot be split `kind`-wise into `parts` shards, or None when it can."""
    if table.shard is not None:
        return f"table {table.name} is already a shard"
    if kind not in SPLIT_KINDS:
        return f"unknown split kind {kind!r}; choose one of {', '.join(SPLIT_KINDS)}"
    if parts < 1:
        return f"table {table.name}: parts must be positive, got {parts}"
    if kind == "replica":
        return None if parts >= 2 else f"table {table.name}: a replica needs 2 devices or more"
    if kind == "column":
        if parts & (parts - 1):
            return f"table {table.name}: column-wise parts must be a power of two, got {parts}"
        if table.dim % (4 * parts):
            return (
                f"table {table.name}: dim {table.dim} does not split into {parts} column shards "
                "whose widths are multiples of 4"
            )
    elif parts > table.rows or (parts - 1) * -(-table.rows // parts) >= table.rows:
        return f"table {table.name}: {table.rows} rows do not split into {parts} row shards"
    return None


def max_column_parts(table: Table, limit: int) -> int:
    """The most column shards `table` splits into, at most `limit` (a power of two)."""
    parts = 1
    while parts * 2 <= limit and table.dim % (8 * parts) == 0:
        parts *= 2
    return parts


def split_table(table: Table, kind: str, parts: int) -> tuple[Table, ...]:
    """The shards of `table` (itself when parts is 1); DreamshardError if it cannot be split so."""
    problem = split_problem(table, kind, parts)
    if problem:
        raise DreamshardError(problem)
    if parts == 1:
        return (table,)
    if kind == "replica":
        return tuple(
            replace(
                table,
                name=f"{table.name}[dp{r}]",
                pooling_factor=table.pooling_factor / parts,
                shard=ShardRange(table.name, "replica", r, r + 1, parts),
            )
            for r in range(parts)
        )
    if kind in ROW_KINDS:
        return _row_shards(table, parts, kind)
    width = table.dim // parts
    return tuple(
        replace(
            table,
            name=f"{table.name}[c{c}:{c + width}]",
            dim=width,
            shard=ShardRange(table.name, "column", c, c + width, table.dim),
        )
        for c in range(0, table.dim, width)
    )


def row_bounds(rows: int, parts: int) -> list[tuple[int, int]]:
    """`parts` contiguous row ranges of ceil(rows / parts) rows, the last one shorter: the
    blocks TorchRec's row-wise sharding routes ids by, so our row shards are its shards."""
    block = -(-rows // parts)
    return [(k * block, min((k + 1) * block, rows)) for k in range(parts)]


def _row_shards(table: Table, parts: int, kind: str = "row") -> tuple[Table, ...]:
    """Row ranges with their expected statistics: each range's share of the table's lookups
    (rows in proportion) and the table's histogram. Ids are hashed or scattered (the synthetic
    generator scatters its hot rows), so a range of rows holds a like sample of the table's
    rows, which its share describes; TorchRec's planner assumes the same. Reading the trace
    instead cost 0.5 s to generate and 1.6 s to cut per dlrm table over 128 devices (48 s for
    one heuristic's plan of 856 tables); a shard's measured lookups still come from the trace
    (`tables.traces.shard_trace`). A range holding a hot row does more than its share: cut in
    three, the cpu profile's ranges had 0.66-1.35x their share of the lookups."""
    share = table.pooling_factor / table.rows
    return tuple(
        replace(
            table,
            name=f"{table.name}[r{r0}:{r1}]",
            rows=r1 - r0,
            pooling_factor=share * (r1 - r0),
            shard=ShardRange(table.name, kind, r0, r1, table.rows),
        )
        for r0, r1 in row_bounds(table.rows, parts)
    )


def describe_split(split: Split) -> str:
    """A split in words: "t7 column-wise into 4 shards", "t3 data-parallel on 8 devices"."""
    if split.kind == "replica":
        return f"{split.table} data-parallel on {split.parts} devices"
    if split.kind == "table_row":
        return f"{split.table} table-row-wise over the {split.parts} devices of a host"
    return f"{split.table} {split.kind}-wise into {split.parts} shards"


def pooled_width(table: Table) -> float:
    """The width a shard adds to its device's pooled outputs in the all-to-all: its dim; 0 for a
    data-parallel replica, whose output stays on its device; a table-row-wise shard's share of
    its table's dim (its rows' share: 1/L of the batch's sums after the host's reduce-scatter)."""
    cut = table.shard
    if cut is None or cut.kind in ("column", "row"):
        return table.dim
    if cut.kind == "replica":
        return 0
    return table.dim * (cut.stop - cut.start) / cut.extent


def reduce_width(table: Table) -> float:
    """The width a table-row-wise shard's device sends and receives in its host's
    reduce-scatter of partial sums ((L - 1) / L of its table's dim, by its rows' share); 0 for
    any other shard."""
    cut = table.shard
    if cut is None or cut.kind != "table_row":
        return 0.0
    return table.dim * (1 - (cut.stop - cut.start) / cut.extent)


def validate_splits(tables: tuple[Table, ...] | list[Table], splits: tuple[Split, ...]) -> None:
    """DreamshardError unless every split names a distinct table of `tables` and is possible."""
    by_name = {t.name: t for t in tables}
    seen = set()
    for split in splits:
        if split.table not in by_name:
            raise DreamshardError(f"a split names unknown table {split.table!r}")
        if split.table in seen:
            raise DreamshardError(f"table {split.table} is split twice")
        seen.add(split.table)
        problem = split_problem(by_name[split.table], split.kind, split.parts)
        if problem:
            raise DreamshardError(problem)
