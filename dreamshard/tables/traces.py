"""Lookup traces for measurement: regenerated, re-read, or synthesized from a table's statistics.

A trace is one batch of a table's lookups: (indices, offsets) with offsets of length B + 1
starting at 0. Tables from the synthetic generator regenerate theirs from the seed; tables from
the data set re-read theirs; tables known only by statistics (a hand-written spec) get a trace
that matches their rows, pooling factor and access histogram at the requested batch size.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from dreamshard.errors import DreamshardError
from dreamshard.tables.synthetic import generate_trace
from dreamshard.tables.table import NUM_BINS, Table

# A typical access count inside each histogram bin: 1, 2, then the middle of (2^(j-1), 2^j].
_BIN_LOW = np.array([1, 2] + [2 ** (j - 1) + 1 for j in range(2, NUM_BINS)], dtype=np.float64)
_BIN_HIGH = np.array([1, 2] + [2**j for j in range(2, NUM_BINS - 1)] + [65536], dtype=np.float64)
TYPICAL_COUNT = (_BIN_LOW + _BIN_HIGH) / 2
# The batch for tables known only by statistics: the cpu profile's batch.
DEFAULT_BATCH = 2048


def expected_unique_rows(table: Table, batch_size: int) -> float:
    """Unique rows a batch touches: lookups over the mean access count, at most rows."""
    return float(
        unique_rows(table.rows, table.pooling_factor, np.asarray(table.histogram), batch_size)
    )


def unique_rows(rows, pooling, histogram: np.ndarray, batch_size: int) -> np.ndarray:
    """`expected_unique_rows` of many tables at once: rows [T], pooling factors [T] and access
    histograms [T, NUM_BINS] (or one table's scalars and [NUM_BINS])."""
    mean_count = np.asarray(histogram, dtype=np.float64) @ TYPICAL_COUNT
    mean_count = np.where(mean_count > 0, mean_count, 1.0)
    return np.minimum(np.asarray(rows, np.float64), batch_size * np.asarray(pooling) / mean_count)


def table_batch_size(tables: Sequence[Table], default: int) -> int:
    """The batch size the tables' traces share; tables known by statistics take `default`."""
    sizes = {t.trace.batch_size for t in tables if t.trace is not None}
    if len(sizes) > 1:
        raise DreamshardError(
            f"the tables' traces have different batch sizes {sorted(sizes)}; "
            "one fused kernel needs one batch size"
        )
    return sizes.pop() if sizes else default


def trace_for(table: Table, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The table's lookups for one batch of `batch_size` bags. A shard reads its table's trace
    and keeps its rows (`tables.shards.shard_trace`); a column shard of a table known only by
    statistics gets its table's trace, a row shard one from its own statistics."""
    ref = table.trace
    if ref is not None and ref.batch_size == batch_size:
        if ref.kind == "synthetic":
            return shard_trace(table, *_synthetic_trace(ref))
        if ref.kind == "dlrm":
            from dreamshard.tables.dlrm_data import read_dataset_trace  # torch: only for .pt files

            return shard_trace(table, *read_dataset_trace(ref))
    shard = table.shard
    if shard is not None and shard.kind == "column":
        table = replace(table, name=shard.of, dim=shard.extent, shard=None)
    return _trace_from_statistics(table, batch_size)


@functools.lru_cache(maxsize=1024)
def _synthetic_trace(ref) -> tuple[np.ndarray, np.ndarray]:
    indices, offsets = generate_trace(ref)
    indices.flags.writeable = offsets.flags.writeable = False  # shared by the cache
    return indices, offsets


def shard_trace(
    table: Table, indices: np.ndarray, offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """A shard's lookups from its table's: a column shard reads the same rows; a row shard keeps
    the lookups inside its rows, renumbered from 0, in the same bags (some may be empty); a
    replica keeps the bags of its slice of the batch, the other bags empty."""
    shard = table.shard
    if shard is None or shard.kind == "column":
        return indices, offsets
    if shard.kind == "replica":
        bags = len(offsets) - 1
        first, last = shard.start * bags // shard.extent, shard.stop * bags // shard.extent
        low, high = offsets[first] - offsets[0], offsets[last] - offsets[0]
        kept = np.clip(offsets - offsets[0] - low, 0, high - low).astype(np.int64)
        return indices[low:high], kept
    keep = (indices >= shard.start) & (indices < shard.stop)
    kept_before = np.concatenate(([0], np.cumsum(keep)))
    return indices[keep] - shard.start, kept_before[offsets - offsets[0]].astype(np.int64)


def _trace_from_statistics(table: Table, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Bags of mean length `pooling_factor` whose unique rows follow the histogram."""
    seed = zlib.crc32(f"{table.name}:{table.rows}:{table.dim}:{batch_size}".encode())
    rng = np.random.default_rng(seed)
    lookups = max(1, int(round(batch_size * table.pooling_factor)))
    unique = max(1, int(round(expected_unique_rows(table, batch_size))))
    hist = np.asarray(table.histogram, dtype=np.float64)
    hist = hist / hist.sum() if hist.sum() > 0 else np.eye(NUM_BINS)[0]
    bins = rng.choice(NUM_BINS, size=unique, p=hist)
    counts = rng.integers(_BIN_LOW[bins], _BIN_HIGH[bins], endpoint=True).astype(np.float64)
    # scale counts so they add up to the lookups the pooling factor asks for
    counts = np.maximum(1, np.round(counts * lookups / counts.sum())).astype(np.int64)
    rows = rng.choice(table.rows, size=unique, replace=unique > table.rows)
    indices = np.repeat(rows, counts)
    rng.shuffle(indices)
    lengths = rng.multinomial(len(indices), np.full(batch_size, 1.0 / batch_size))
    offsets = np.zeros(batch_size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return indices.astype(np.int64), offsets


def concat_traces(tables: Sequence[Table], batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """One fused kernel's input: the tables' indices table-major, offsets of length T*B + 1."""
    if not tables:
        return np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    parts, offsets, position = [], [np.zeros(1, dtype=np.int64)], 0
    for table in tables:
        indices, bags = trace_for(table, batch_size)
        parts.append(indices)
        offsets.append(bags[1:] + position)
        position += len(indices)
    return np.concatenate(parts), np.concatenate(offsets)
