"""Embedding tables: their shape, their access statistics, and statistics from lookup traces."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from dreamshard.errors import DreamshardError

NUM_BINS = 17
BYTES_PER_WEIGHT = {"fp32": 4, "fp16": 2}
# Optimizer state a fused TBE keeps per table, in fp32 (fbgemm's optimizers, as TorchRec fuses
# them): plain SGD none, row-wise Adagrad one number per row, Adagrad one per weight, Adam two.
OPTIMIZER_STATE_WORDS = {
    "sgd": lambda rows, dim: 0,
    "rowwise_adagrad": lambda rows, dim: rows,
    "adagrad": lambda rows, dim: rows * dim,
    "adam": lambda rows, dim: 2 * rows * dim,
}
MIN_ROWS_FROM_TRACE = 100  # DreamShard floors rows taken from a trace (max index + 1) at 100

# Fraction of unique rows by access count in the public data set's main 2021 file
# (locality_stats.txt, see docs/tables.md). Used when a table spec gives no histogram.
# "Beyond 512 below 0.001" is put in bin 10, (512, 1024], so that the fractions sum to 1.
DEFAULT_HISTOGRAM: tuple[float, ...] = (
    0.473,
    0.152,
    0.139,
    0.112,
    0.072,
    0.032,
    0.011,
    0.005,
    0.002,
    0.001,
    0.001,
) + (0.0,) * 6


@dataclass(frozen=True)
class TraceRef:
    """Where a table's lookup trace can be regenerated or re-read from.

    kind "synthetic": regenerate from (profile, seed, index) with the synthetic generator.
    kind "dlrm": table `index` of the data-set file at `path`.
    Tables without a TraceRef get a trace synthesized from their statistics when measured.
    """

    kind: str
    index: int
    batch_size: int
    profile: str = ""
    seed: int = 0
    path: str = ""


@dataclass(frozen=True)
class ShardRange:
    """What a shard is cut from: columns (kind "column") or rows ("row", or "table_row" over one
    host's devices) [start, stop) of table `of`, whose extent along that axis (its dim or its
    rows) is `extent`; or replica `start` of `extent` (kind "replica", stop = start + 1), the
    table whole on one of `extent` devices."""

    of: str
    kind: str
    start: int
    stop: int
    extent: int


@dataclass(frozen=True)
class Table:
    """One embedding table: hash size, embedding dim, mean bag length and access histogram.

    `histogram[j]` is the fraction of the unique rows accessed in a batch whose access count
    falls in bin j: bin 0 = exactly once, bin j = (2^(j-1), 2^j] for j = 1..15, bin 16 = more
    than 32768.
    """

    name: str
    rows: int
    dim: int
    pooling_factor: float
    histogram: tuple[float, ...] = DEFAULT_HISTOGRAM
    trace: TraceRef | None = field(default=None, compare=False)
    shard: ShardRange | None = None  # set on a shard of a split table (tables.shards)

    @property
    def size(self) -> int:
        """Number of weights, rows * dim."""
        return self.rows * self.dim

    def bytes(self, precision: str = "fp16", optimizer: str = "sgd") -> int:
        """Bytes the weights take at `precision`, plus the state `optimizer` keeps (fp32;
        plain SGD, what we measure with, keeps none)."""
        state = OPTIMIZER_STATE_WORDS[optimizer](self.rows, self.dim) * 4
        return self.size * BYTES_PER_WEIGHT[precision] + state


def histogram_bin(counts: np.ndarray) -> np.ndarray:
    """Bin index of each access count (counts >= 1): ceil(log2(count)) capped at 16."""
    counts = np.asarray(counts, dtype=np.float64)
    # log2 of a power of two is exact in IEEE doubles, so the bin edges are exact.
    return np.minimum(np.ceil(np.log2(counts)), NUM_BINS - 1).astype(np.int64)


def access_histogram(indices: np.ndarray) -> tuple[float, ...]:
    """The 17-bin histogram of how often each unique accessed row occurs in `indices`."""
    indices = np.asarray(indices)
    if indices.size == 0:
        return (0.0,) * NUM_BINS
    _, counts = np.unique(indices, return_counts=True)
    per_bin = np.bincount(histogram_bin(counts), minlength=NUM_BINS)
    return tuple(float(x) for x in per_bin / counts.size)


def table_from_trace(
    name: str,
    indices: np.ndarray,
    offsets: np.ndarray,
    dim: int,
    rows: int | None = None,
    trace: TraceRef | None = None,
) -> Table:
    """Statistics of one table from its lookups in one batch.

    `offsets` has B+1 entries delimiting B bags in `indices` (positions may start anywhere:
    only differences matter). Rows is the given hash size, else max index + 1 floored at 100.
    """
    indices = np.asarray(indices)
    offsets = np.asarray(offsets)
    num_bags = len(offsets) - 1
    if num_bags <= 0:
        raise ValueError("a trace needs at least one bag (offsets of length >= 2)")
    lookups = int(offsets[-1] - offsets[0])
    if rows is None:
        max_index = int(indices.max()) if indices.size else -1
        rows = max(max_index + 1, MIN_ROWS_FROM_TRACE)
    return Table(
        name=name,
        rows=int(rows),
        dim=int(dim),
        pooling_factor=lookups / num_bags,
        histogram=access_histogram(indices),
        trace=trace,
    )


def validate_table(table: Table) -> None:
    """Raise DreamshardError naming what is wrong with a table's fields."""
    if not table.name:
        raise DreamshardError("a table has an empty name")
    if table.rows <= 0:
        raise DreamshardError(f"table {table.name}: rows must be positive, got {table.rows}")
    if table.dim <= 0 or table.dim % 4:
        raise DreamshardError(
            f"table {table.name}: dim must be a positive multiple of 4 (fbgemm needs it), "
            f"got {table.dim}"
        )
    if not (table.pooling_factor > 0 and math.isfinite(table.pooling_factor)):
        raise DreamshardError(
            f"table {table.name}: pooling_factor must be positive, got {table.pooling_factor}"
        )
    if len(table.histogram) != NUM_BINS:
        raise DreamshardError(f"table {table.name}: histogram needs {NUM_BINS} bins")
    if any(not (0.0 <= h <= 1.0) for h in table.histogram):
        raise DreamshardError(f"table {table.name}: histogram fractions must lie in [0, 1]")
