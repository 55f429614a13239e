import numpy as np
import pytest

from dreamshard.tables.synthetic import (
    DATASET_ACCESS,
    DATASET_ACCESSES_PER_ROW,
    DATASET_POOLING,
    DATASET_UNIQUE,
    DIMS,
    PROFILES,
    _bin_edges,
    aggregate,
    generate_tables,
    generate_trace,
)
from dreamshard.tables.table import NUM_BINS, table_from_trace


def test_generator_matches_the_data_set_aggregates():
    found = aggregate("dlrm", 856)
    assert np.abs(found.unique - DATASET_UNIQUE).sum() < 0.10
    assert np.abs(found.access - DATASET_ACCESS).sum() < 0.25
    assert found.pooling == pytest.approx(DATASET_POOLING, rel=0.10)
    assert found.accesses_per_row == pytest.approx(DATASET_ACCESSES_PER_ROW, rel=0.25)


def test_cpu_profile_keeps_the_histogram_shape():
    dlrm, cpu = aggregate("dlrm", 300), aggregate("cpu", 300)
    assert np.abs(dlrm.unique - cpu.unique).sum() < 0.15


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
