import numpy as np
import pytest
from test_synthetic import DATASET_UNIQUE

from dreamshard.errors import DreamshardError
from dreamshard.tables.features import FEATURE_NAMES, feature_matrix, feature_vector
from dreamshard.tables.sources import read_csv_tables
from dreamshard.tables.table import (
    NUM_BINS,
    Table,
    access_histogram,
    histogram_bin,
    table_from_trace,
    validate_table,
)


def test_bins_follow_powers_of_two():
    # bin 0 = once, bin j = (2^(j-1), 2^j], bin 16 = more than 32768
    counts = [1, 2, 3, 4, 5, 8, 9, 16, 17, 32768, 32769, 10**6]
    assert histogram_bin(np.array(counts)).tolist() == [0, 1, 2, 2, 3, 3, 4, 4, 5, 15, 16, 16]


def test_histogram_counted_by_hand():
    # row 7 once; row 3 twice; row 5 three times; row 9 four times; row 1 five times
    indices = [7, 3, 3, 5, 5, 5, 9, 9, 9, 9, 1, 1, 1, 1, 1]
    hist = access_histogram(np.array(indices))
    expected = [0.0] * NUM_BINS
    expected[0] = 1 / 5  # row 7
    expected[1] = 1 / 5  # row 3 (count 2)
    expected[2] = 2 / 5  # rows 5 and 9 (counts 3, 4)
    expected[3] = 1 / 5  # row 1 (count 5)
    assert hist == pytest.approx(expected)


def test_table_from_trace_counts_bags_and_rows():
    # three bags: [4, 4], [], [0, 2, 4]
    indices = np.array([4, 4, 0, 2, 4])
    offsets = np.array([10, 12, 12, 15])  # positions may start anywhere; only gaps count
    t = table_from_trace("x", indices, offsets, dim=8)
    assert t.pooling_factor == pytest.approx(5 / 3)
    assert t.rows == 100  # max index + 1 = 5, floored at 100 like DreamShard
    assert t.histogram[0] == pytest.approx(2 / 3)  # rows 0 and 2 once
    assert t.histogram[2] == pytest.approx(1 / 3)  # row 4 three times
    assert table_from_trace("y", indices, offsets, dim=8, rows=5000).rows == 5000


def test_bytes_by_precision():
    t = Table("t", rows=1000, dim=64, pooling_factor=1.0)
    assert t.size == 64_000
    assert t.bytes("fp16") == 128_000
    assert t.bytes("fp32") == 256_000


def test_a_spec_without_a_histogram_gets_the_data_set_aggregate(tmp_path):
    spec = tmp_path / "tables.csv"
    spec.write_text("name,rows,dim,pooling_factor\na,1000,16,2\n")
    [table] = read_csv_tables(spec)
    validate_table(table)
    assert sum(table.histogram) == pytest.approx(1.0)
    # the published aggregate (locality_stats.txt), transcribed on its own in test_synthetic;
    # its "below 0.001 beyond 512" is folded into one bin
    assert np.abs(np.subtract(table.histogram, DATASET_UNIQUE)).max() <= 0.001 + 1e-12


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(rows=0), "rows must be positive"),
        (dict(dim=6), "multiple of 4"),
        (dict(dim=0), "multiple of 4"),
        (dict(pooling_factor=0.0), "pooling_factor"),
        (dict(pooling_factor=float("nan")), "pooling_factor"),
    ],
)
def test_validate_table_names_the_problem(kwargs, words):
    fields = dict(name="t", rows=10, dim=8, pooling_factor=1.0) | kwargs
    with pytest.raises(DreamshardError, match=words):
        validate_table(Table(**fields))


def test_feature_vector_is_fixed_per_table():
    a = Table("a", rows=10_000, dim=32, pooling_factor=4.0)
    b = Table("b", rows=10_000, dim=32, pooling_factor=4.0)
    c = Table("c", rows=10, dim=4, pooling_factor=300.0)
    v = feature_vector(a)
    assert v.shape == (21,) and len(FEATURE_NAMES) == 21
    # the same table gets the same features whatever shares its task (no per-task z-scores)
    assert np.array_equal(feature_matrix([a, c])[0], feature_matrix([b])[0])
    assert np.isfinite(feature_matrix([a, b])).all()  # identical tables: no NaN
    assert v[0] == pytest.approx(5 / 7) and v[1] == pytest.approx(0.5)
    assert np.array_equal(v[4:], np.array(a.histogram, dtype=np.float32))
