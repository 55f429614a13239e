"""Synthetic tables and their lookup traces, regenerated on demand from a seed.

Every table is drawn from its own random stream (seed, index), so one table's trace can be
rebuilt without the others. Access within a table follows a bounded power law over its rows
(density proportional to (rank + 1) ** -alpha), with ranks scattered over rows by a fixed
bijection so hot rows do not sit next to each other. A table's histogram is the *expected*
histogram of its generator at the profile's batch size (computed exactly from Poisson counts),
so tables are cheap to make even at full data-set scale; the trace realises it.
Calibration against the public data set: docs/tables.md and tests/test_synthetic.py.

The `wide` profile is a family of its own, not fitted to the data set: rows, dims and pooling
factors drawn log-uniformly over wider ranges (rows 1e3-5e7, dims 8-256, pooling 1-200) and
skew over the data set's range, for the scale study's third table set (issue 27).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy import special

from dreamshard.errors import DreamshardError
from dreamshard.tables.table import NUM_BINS, Table, TraceRef

DIMS = (4, 8, 16, 32, 64, 128)
DIM_WEIGHTS = (0.10, 0.15, 0.25, 0.25, 0.15, 0.10)
_SCATTER_PRIME = 2_654_435_761  # prime larger than any row count, so rank -> row is a bijection


@dataclass(frozen=True)
class Profile:
    """A scale of tables: `dlrm` as on GPUs, `cpu` scaled down to time on this machine.

    The cpu profile divides rows and batch size by the same factor, so each row is accessed
    about as often per batch as at full scale and the histograms keep their shape.
    """

    name: str
    batch_size: int
    row_scale: int
    max_rows: int
    family: str = "dataset"  # "dataset": fitted to the data set; "wide": the wide family


PROFILES = {
    "dlrm": Profile("dlrm", batch_size=65_536, row_scale=1, max_rows=40_000_000),
    "cpu": Profile("cpu", batch_size=2_048, row_scale=32, max_rows=1_250_000),
    "wide": Profile("wide", batch_size=65_536, row_scale=1, max_rows=50_000_000, family="wide"),
}
WIDE_DIMS = (8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class TableDraw:
    """The generator's parameters for one table (at the profile's scale)."""

    rows: int
    dim: int
    pooling_factor: float
    alpha: float
    one_hot: bool


def get_profile(name: str) -> Profile:
    if name not in PROFILES:
        raise DreamshardError(f"unknown profile {name!r}; choose one of {', '.join(PROFILES)}")
    return PROFILES[name]


def draw_table(profile: Profile, seed: int, index: int) -> TableDraw:
    """Draw one table's parameters; the same (seed, index) gives the same table.

    The constants were fitted (coarse grid search) to the data set's aggregate statistics:
    mean pooling factor, unique-row and access histograms (docs/tables.md).
    """
    rng = np.random.default_rng([seed, index])
    if profile.family == "wide":
        rows = int(np.exp(rng.uniform(np.log(1e3), np.log(5e7))))
        pooling = float(np.exp(rng.uniform(0.0, np.log(200.0))))
        dim, alpha = int(rng.choice(WIDE_DIMS)), float(rng.uniform(0.5, 1.15))
        return TableDraw(rows=rows, dim=dim, pooling_factor=pooling, alpha=alpha, one_hot=False)
    rows = int(np.clip(rng.lognormal(np.log(200_000), 1.8), 100, 40_000_000))
    dim = int(rng.choice(DIMS, p=DIM_WEIGHTS))
    one_hot = bool(rng.random() < 0.15)
    pooling = 1.0 if one_hot else float(np.clip(rng.lognormal(np.log(8.8), 1.3), 1.0, 500.0))
    hot = rng.random() < 0.15  # a few tables with a very hot head, as in the data set
    alpha = float(rng.uniform(0.9, 1.15) if hot else rng.uniform(0.5, 0.8))
    rows = max(100, min(rows // profile.row_scale, profile.max_rows))
    return TableDraw(rows=rows, dim=dim, pooling_factor=pooling, alpha=alpha, one_hot=one_hot)


def generate_tables(profile_name: str, num_tables: int, seed: int) -> list[Table]:
    """`num_tables` synthetic tables named t0000.. with expected statistics and trace refs."""
    return list(_generate_tables(profile_name, num_tables, seed))


@functools.lru_cache(maxsize=8)
def _generate_tables(profile_name: str, num_tables: int, seed: int) -> tuple[Table, ...]:
    profile = get_profile(profile_name)
    tables = []
    for index in range(num_tables):
        draw = draw_table(profile, seed, index)
        lookups = profile.batch_size * draw.pooling_factor
        tables.append(
            Table(
                name=f"t{index:04d}",
                rows=draw.rows,
                dim=draw.dim,
                pooling_factor=draw.pooling_factor,
                histogram=expected_histogram(draw.rows, draw.alpha, lookups)[0],
                trace=TraceRef("synthetic", index, profile.batch_size, profile.name, seed),
            )
        )
    return tuple(tables)


def _rank_cdf(x: np.ndarray, rows: int, alpha: float) -> np.ndarray:
    """CDF at x of the density proportional to (x + 1) ** -alpha on [0, rows)."""
    x = np.asarray(x, dtype=np.float64)
    if abs(alpha - 1.0) < 1e-9:
        return np.log1p(x) / np.log1p(rows)
    e = 1.0 - alpha
    return ((x + 1.0) ** e - 1.0) / ((rows + 1.0) ** e - 1.0)


def _sample_ranks(rng: np.random.Generator, n: int, rows: int, alpha: float) -> np.ndarray:
    u = rng.random(n)
    if abs(alpha - 1.0) < 1e-9:
        x = np.expm1(u * np.log1p(rows))
    else:
        e = 1.0 - alpha
        x = (1.0 + u * ((rows + 1.0) ** e - 1.0)) ** (1.0 / e) - 1.0
    return np.minimum(x.astype(np.int64), rows - 1)


def _rank_groups(rows: int, alpha: float, head: int = 256, buckets: int = 256):
    """Ranks as (multiplicity, probability of one rank): exact head, log-spaced tail buckets."""
    edges = np.arange(min(rows, head) + 1, dtype=np.float64)
    if rows > head:
        tail = np.unique(np.geomspace(head, rows, buckets + 1).astype(np.int64))
        edges = np.concatenate([edges, tail[1:].astype(np.float64)])
    mult = np.diff(edges)
    prob = np.diff(_rank_cdf(edges, rows, alpha)) / mult
    return mult, prob


def _bin_edges() -> tuple[np.ndarray, np.ndarray]:
    """Lowest and highest access count of each bin (the last bin is open-ended)."""
    lo = np.array([1] + [2 ** (j - 1) + 1 for j in range(1, NUM_BINS)], dtype=np.float64)
    hi = np.array([1] + [2**j for j in range(1, NUM_BINS - 1)] + [np.inf], dtype=np.float64)
    return lo, hi


def _poisson_cdf(k: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """P(Poisson(lam) <= k), with k = -1 giving 0 and k = inf giving 1."""
    finite = np.where(np.isfinite(k), np.maximum(k, 0.0), 0.0)
    cdf = special.pdtr(finite, lam)
    return np.where(k < 0, 0.0, np.where(np.isinf(k), 1.0, cdf))


def expected_histogram(
    rows: int, alpha: float, lookups: float
) -> tuple[tuple[float, ...], np.ndarray, np.ndarray]:
    """Expected unique-row histogram of `lookups` draws, plus per-bin unique rows and accesses.

    Each rank's access count is Poisson with mean lookups * p(rank). Returns
    (fractions of unique rows per bin, expected unique rows per bin, expected accesses per bin).
    """
    mult, prob = _rank_groups(rows, alpha)
    lam = (lookups * prob)[:, None]
    lo, hi = _bin_edges()
    in_bin = _poisson_cdf(hi, lam) - _poisson_cdf(lo - 1, lam)
    # c * Pois(c; lam) = lam * Pois(c - 1; lam): accesses on rows whose count lies in a bin.
    access = lam * (_poisson_cdf(hi - 1, lam) - _poisson_cdf(lo - 2, lam))
    unique_rows = (mult[:, None] * in_bin).sum(axis=0)
    accesses = (mult[:, None] * access).sum(axis=0)
    total = unique_rows.sum()
    fractions = tuple(float(v) for v in unique_rows / total) if total > 0 else (0.0,) * NUM_BINS
    return fractions, unique_rows, accesses


def generate_trace(ref: TraceRef) -> tuple[np.ndarray, np.ndarray]:
    """Rebuild a synthetic table's lookups for one batch: (indices, offsets) as int64."""
    profile = get_profile(ref.profile)
    draw = draw_table(profile, ref.seed, ref.index)
    rng = np.random.default_rng([ref.seed, ref.index, 1])
    return trace_from_statistics(rng, ref.batch_size, draw)


def trace_from_statistics(
    rng: np.random.Generator, batch_size: int, draw: TableDraw
) -> tuple[np.ndarray, np.ndarray]:
    """Bags with mean length `pooling_factor`, power-law access, hot rows scattered."""
    if draw.one_hot:
        lengths = np.ones(batch_size, dtype=np.int64)
    else:
        lengths = 1 + rng.poisson(draw.pooling_factor - 1.0, batch_size)
    offsets = np.zeros(batch_size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ranks = _sample_ranks(rng, int(offsets[-1]), draw.rows, draw.alpha)
    shift = int(rng.integers(draw.rows))
    indices = (ranks * _SCATTER_PRIME + shift) % draw.rows
    return indices, offsets


# The public data set's aggregate statistics (its locality_stats.txt; docs/tables.md): per
# histogram bin, the share of unique rows and the share of accesses; the mean pooling factor
# and the mean accesses per unique row. The generator is calibrated against these.
DATASET_UNIQUE = (0.473, 0.152, 0.139, 0.112, 0.072, 0.032, 0.011, 0.005, 0.002, 0.001, 0.001)
DATASET_UNIQUE += (0.0,) * (NUM_BINS - len(DATASET_UNIQUE))
DATASET_ACCESS = (0.069, 0.044, 0.068, 0.101, 0.121, 0.104, 0.073, 0.058, 0.052, 0.050)
DATASET_ACCESS += (0.049, 0.048, 0.048, 0.043, 0.031, 0.023, 0.019)
DATASET_POOLING, DATASET_ACCESSES_PER_ROW = 15.8, 6.9


@dataclass(frozen=True)
class Aggregate:
    """What `num_tables` generated tables look like in all, as the data set's statistics."""

    unique: np.ndarray  # [NUM_BINS] share of unique rows per histogram bin
    access: np.ndarray  # [NUM_BINS] share of accesses per bin
    pooling: float  # mean pooling factor
    accesses_per_row: float  # mean accesses per unique row


def aggregate(profile_name: str, num_tables: int, seed: int = 0) -> Aggregate:
    """The expected aggregate statistics of a profile's first `num_tables` tables."""
    profile = get_profile(profile_name)
    unique, access, pooling = np.zeros(NUM_BINS), np.zeros(NUM_BINS), []
    for i in range(num_tables):
        draw = draw_table(profile, seed, i)
        lookups = profile.batch_size * draw.pooling_factor
        _, u, a = expected_histogram(draw.rows, draw.alpha, lookups)
        unique, access = unique + u, access + a
        pooling.append(draw.pooling_factor)
    per_row = float(access.sum() / unique.sum())
    return Aggregate(unique / unique.sum(), access / access.sum(), float(np.mean(pooling)), per_row)
