"""Each table's additive share of a fused group's numbers: what both analytic kernel models
(the CPU's calibrated one, `costs.simulated`, and the GPU roofline, `costs.roofline`) and the
cost network's hybrid features price a group from, as sums over its tables."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dreamshard.tables.table import NUM_BINS, Table
from dreamshard.tables.traces import unique_rows


def table_quantities(tables: Sequence[Table], batch_size: int) -> np.ndarray:
    """[T, 6] each table's additive share of a group's features: tables (1), lookups, lookup
    volume, touched row bytes / 4, output width, dim. A group's sums give `features_of_sums`."""
    return quantities_of(
        np.array([t.dim for t in tables], dtype=np.float64),
        np.array([t.rows for t in tables], dtype=np.float64),
        np.array([t.pooling_factor for t in tables], dtype=np.float64),
        np.array([t.histogram for t in tables], dtype=np.float64).reshape(len(tables), NUM_BINS),
        batch_size,
    )


def quantities_of(
    dims: np.ndarray, rows: np.ndarray, pooling: np.ndarray, histograms: np.ndarray, batch: int
) -> np.ndarray:
    """`table_quantities` from the tables' numbers: dims, rows, pooling factors [T] and access
    histograms [T, bins] (what the cost network's hybrid design reads from its features)."""
    lookups = batch * pooling
    touched = unique_rows(rows, pooling, histograms, batch) * dims
    return np.stack(
        [np.ones_like(dims), lookups, lookups * dims, touched, batch * dims, dims], axis=1
    ).reshape(-1, 6)
