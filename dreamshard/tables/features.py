"""The 21-number feature vector of a table, under one fixed transform.

Raw features (the paper's): dim, rows, pooling factor, size = rows * dim, and the 17-bin access
histogram. The paper z-scores rows, size and pooling factor within each task, which gives the
same table different features in different tasks (and NaN when they all agree). Here every
feature has a fixed transform that depends on the table alone, so it is the same in every task
and needs no statistics saved beside a model beyond FEATURE_TRANSFORM (its name and version):

    dim            -> log2(dim) / 7                (4..128 -> 0.29..1)
    rows           -> log10(rows) / 8              (1e2..1e8 -> 0.25..1)
    pooling factor -> log10(1 + pooling) / 3       (1..1000 -> 0.1..1)
    size           -> log10(rows * dim) / 10
    bin_j          -> the fraction itself (already in [0, 1])
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dreamshard.tables.table import NUM_BINS, Table

FEATURE_NAMES: tuple[str, ...] = ("dim", "rows", "pooling_factor", "size") + tuple(
    f"bin_{j}" for j in range(NUM_BINS)
)
NUM_FEATURES = len(FEATURE_NAMES)  # 21
FEATURE_TRANSFORM = "log-fixed-v1"


def feature_vector(table: Table) -> np.ndarray:
    """The table's 21 transformed features, float32."""
    head = (
        math.log2(table.dim) / 7.0,
        math.log10(table.rows) / 8.0,
        math.log10(1.0 + table.pooling_factor) / 3.0,
        math.log10(table.size) / 10.0,
    )
    return np.array(head + tuple(table.histogram), dtype=np.float32)


def feature_matrix(tables: Sequence[Table]) -> np.ndarray:
    """[len(tables), 21] features, one row per table."""
    if not tables:
        return np.zeros((0, NUM_FEATURES), dtype=np.float32)
    return np.stack([feature_vector(t) for t in tables])


def raw_features(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(dims, rows, pooling factors, histograms) back from feature rows [T, 21]: the inverse
    of `feature_vector` (dims and rows rounded to whole numbers)."""
    matrix = np.asarray(matrix, dtype=np.float64)
    dims = np.rint(2.0 ** (7.0 * matrix[:, 0]))
    rows = np.rint(10.0 ** (8.0 * matrix[:, 1]))
    pooling = 10.0 ** (3.0 * matrix[:, 2]) - 1.0
    return dims, rows, pooling, matrix[:, 4:]
