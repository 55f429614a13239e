import numpy as np
import pytest

from dreamshard.tables.synthetic import (
    DIMS,
    PROFILES,
    _bin_edges,
    draw_table,
    expected_histogram,
    generate_tables,
    generate_trace,
)
from dreamshard.tables.table import NUM_BINS, table_from_trace

# The public data set's aggregate statistics (its locality_stats.txt; docs/tables.md)
DATASET_UNIQUE = [0.473, 0.152, 0.139, 0.112, 0.072, 0.032, 0.011, 0.005, 0.002, 0.001] + [0.0] * 7
DATASET_ACCESS = [
    0.069,
    0.044,
    0.068,
    0.101,
    0.121,
    0.104,
    0.073,
    0.058,
    0.052,
    0.050,
    0.049,
    0.048,
    0.048,
    0.043,
    0.031,
    0.023,
    0.019,
]


def aggregate(profile: str, num_tables: int):
    prof = PROFILES[profile]
    unique = np.zeros(NUM_BINS)
    access = np.zeros(NUM_BINS)
    pooling = []
    for i in range(num_tables):
        draw = draw_table(prof, 0, i)
        _, u, a = expected_histogram(draw.rows, draw.alpha, prof.batch_size * draw.pooling_factor)
        unique += u
        access += a
        pooling.append(draw.pooling_factor)
    return (
        unique / unique.sum(),
        access / access.sum(),
        float(np.mean(pooling)),
        access.sum() / unique.sum(),
    )


def test_generator_matches_the_data_set_aggregates():
    unique, access, pooling, per_row = aggregate("dlrm", 856)
    assert np.abs(unique - DATASET_UNIQUE).sum() < 0.10
    assert np.abs(access - DATASET_ACCESS).sum() < 0.25
    assert pooling == pytest.approx(15.8, rel=0.10)
    assert per_row == pytest.approx(6.9, rel=0.25)


def test_cpu_profile_keeps_the_histogram_shape():
    dlrm_unique, *_ = aggregate("dlrm", 300)
    cpu_unique, *_ = aggregate("cpu", 300)
    assert np.abs(dlrm_unique - cpu_unique).sum() < 0.15


def test_tables_are_deterministic_and_realistic():
    a = generate_tables("dlrm", 200, seed=3)
    b = generate_tables("dlrm", 200, seed=3)
    assert a == b and [t.trace for t in a] == [t.trace for t in b]
    assert a != generate_tables("dlrm", 200, seed=4)
    assert {t.dim for t in a} <= set(DIMS) and len({t.dim for t in a}) >= 5
    rows = np.array([t.rows for t in a])
    assert rows.min() >= 100 and rows.max() / np.median(rows) > 20  # heavy tail
    assert all(abs(sum(t.histogram) - 1) < 1e-6 for t in a)


def test_cpu_profile_is_scaled_down():
    dlrm = generate_tables("dlrm", 100, seed=0)
    cpu = generate_tables("cpu", 100, seed=0)
    assert [t.dim for t in dlrm] == [t.dim for t in cpu]
    assert sum(t.bytes("fp32") for t in cpu) < sum(t.bytes("fp32") for t in dlrm) / 10
    assert max(t.bytes("fp32") for t in cpu) < 2**30


def test_trace_regenerates_and_realises_the_statistics():
    for table in generate_tables("cpu", 12, seed=1):
        indices, offsets = generate_trace(table.trace)
        again, _ = generate_trace(table.trace)
        assert np.array_equal(indices, again)
        assert len(offsets) == PROFILES["cpu"].batch_size + 1
        assert indices.min() >= 0 and indices.max() < table.rows
        measured = table_from_trace(table.name, indices, offsets, table.dim, rows=table.rows)
        assert measured.pooling_factor == pytest.approx(table.pooling_factor, rel=0.05)
        assert np.abs(np.subtract(measured.histogram, table.histogram)).sum() < 0.12


def test_bin_edges_cover_every_count_once():
    lo, hi = _bin_edges()
    assert lo[0] == hi[0] == 1
    assert all(lo[j] == hi[j - 1] + 1 for j in range(1, NUM_BINS))
    assert hi[-1] == np.inf
