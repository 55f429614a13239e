import gzip
import shutil

import numpy as np
import pytest
import torch

from dreamshard.errors import DreamshardError
from dreamshard.tables.dlrm_data import read_dataset_trace
from dreamshard.tables.sources import load_tables, save_tables
from dreamshard.tables.synthetic import generate_tables
from dreamshard.tables.table import DEFAULT_HISTOGRAM, table_from_trace
from tests.conftest import error_line

BINS = ",".join(f"bin_{j}" for j in range(17))


def test_csv_spec_with_and_without_histogram(tmp_path):
    path = tmp_path / "spec.csv"
    hist = ",".join(["2"] + ["1"] * 3 + ["0"] * 13)  # counts are normalised to fractions
    path.write_text(
        f"name,rows,dim,pooling_factor,{BINS}\na,1000,16,2.5,{hist}\nb,50,8,1,{',' * 16}\n"
    )
    a, b = load_tables(path)
    assert (a.name, a.rows, a.dim, a.pooling_factor) == ("a", 1000, 16, 2.5)
    assert a.histogram[:4] == pytest.approx([0.4, 0.2, 0.2, 0.2])
    assert b.histogram == DEFAULT_HISTOGRAM


def test_json_spec_list_or_object(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text('[{"name": "a", "rows": 10, "dim": 4, "pooling_factor": 1}]')
    assert load_tables(path)[0].histogram == DEFAULT_HISTOGRAM
    path.write_text('{"tables": [{"name": "a", "rows": 10, "dim": 4, "pooling_factor": 1}]}')
    assert load_tables(path)[0].rows == 10


@pytest.mark.parametrize("suffix", [".json", ".csv"])
def test_generated_tables_round_trip(tmp_path, suffix):
    tables = generate_tables("cpu", 20, seed=5)
    path = tmp_path / f"tables{suffix}"
    save_tables(tables, path)
    back = load_tables(path)
    assert back == tables
    if suffix == ".json":  # JSON keeps the seeds that regenerate the traces
        assert [t.trace for t in back] == [t.trace for t in tables]


@pytest.mark.parametrize(
    "content, words",
    [
        ("name,rows,dim\na,10,4\n", "missing column pooling_factor"),
        ("name,rows,dim,pooling_factor\na,ten,4,1\n", "rows 'ten' is not a number"),
        ("name,rows,dim,pooling_factor\na,-5,4,1\n", "rows must be positive"),
        ("name,rows,dim,pooling_factor\na,10,4,0\n", "pooling_factor must be positive"),
        ("name,rows,dim,pooling_factor\na,10,6,1\n", "multiple of 4"),
        ("name,rows,dim,pooling_factor\na,10.5,4,1\n", "whole number"),
        ("name,rows,dim,pooling_factor\na,10,4,1\na,10,4,1\n", "appears twice"),
        ("name,rows,dim,pooling_factor\n", "lists no tables"),
        (f"name,rows,dim,pooling_factor,{BINS}\na,10,4,1,1{',' * 16}\n", "histogram given without"),
    ],
)
def test_bad_csv_names_the_problem(tmp_path, content, words):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(DreamshardError, match=words):
        load_tables(path)


HEADER = "name,rows,dim,pooling_factor"


@pytest.mark.parametrize(
    "name, content, problem",
    [
        ("spec.csv", f"{HEADER}\na,-10,4,1\n", "spec.csv line 2: rows must be positive, got '-10'"),
        ("spec.csv", "name,rows,pooling_factor\na,10,1\n", "spec.csv: missing column dim"),
        ("spec.csv", f"{HEADER}\na,10,,1\n", "spec.csv line 2: dim is missing"),
        ("spec.csv", f"{HEADER}\na,10,4,1\nb,10,4,-1\n", "spec.csv line 3: pooling_factor"),
        ("spec.csv", f"{HEADER},{BINS}\na,10,4,1,-1{',1' * 16}\n", "bin_0 must not be negative"),
        (
            "spec.json",
            '[{"name": "a", "rows": 10, "pooling_factor": 1}]',
            "table 0: dim is missing",
        ),
        ("spec.json", '[{"name": "a", "rows": [], "dim": 4, "pooling_factor": 1}]', "rows [] is"),
        ("spec.json", '{"tables": [{"name": "a", "rows": 10, "dim": 4', "is not valid JSON"),
    ],
)
def test_malformed_table_specs_are_one_line_and_write_nothing(
    cli, tmp_path, name, content, problem
):
    spec = tmp_path / name
    spec.write_text(content)
    plan = tmp_path / "plan.json"
    result = cli(
        "place", "--tables", str(spec), "--devices", "2", "--mem-gb", "1", "--out", str(plan)
    )
    line = error_line(result)
    assert line.startswith(str(spec)) and problem in line
    assert list(tmp_path.iterdir()) == [spec]


def test_missing_and_unknown_files(tmp_path):
    with pytest.raises(DreamshardError, match="does not exist"):
        load_tables(tmp_path / "nope.csv")
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(DreamshardError, match="unknown table file type"):
        load_tables(tmp_path / "x.txt")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(DreamshardError, match="not valid JSON"):
        load_tables(tmp_path / "bad.json")


def write_dataset(path, num_tables=4, batch=64, seed=0):
    """A small file in the public data set's layout: (indices, offsets, lengths)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 5, (num_tables, batch), generator=gen)
    offsets = torch.zeros(num_tables * batch + 1, dtype=torch.int64)
    offsets[1:] = lengths.flatten().cumsum(0)
    indices = torch.randint(0, 300, (int(offsets[-1]),), generator=gen, dtype=torch.int32)
    torch.save((indices, offsets, lengths), path)
    return indices, offsets, lengths


@pytest.mark.parametrize("gz", [False, True])
def test_dataset_file_tables_match_their_slices(tmp_path, gz):
    raw = tmp_path / "fbgemm_t4_bs64.pt"
    indices, offsets, lengths = write_dataset(raw)
    path = raw
    if gz:
        path = tmp_path / "fbgemm_t4_bs64.pt.gz"
        with open(raw, "rb") as src, gzip.open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()
    tables = load_tables(path, table_ids=[1, 3], dim=32)
    assert [t.name for t in tables] == ["d0001", "d0003"]
    for t, table_id in zip(tables, [1, 3]):
        start, end = table_id * 64, (table_id + 1) * 64
        own = indices[offsets[start] : offsets[end]].numpy()
        expected = table_from_trace("e", own, offsets[start : end + 1].numpy(), dim=32)
        assert (t.rows, t.pooling_factor, t.histogram) == (
            expected.rows,
            expected.pooling_factor,
            expected.histogram,
        )
        assert t.pooling_factor == pytest.approx(lengths[table_id].float().mean().item())
        trace_indices, trace_offsets = read_dataset_trace(t.trace)
        assert np.array_equal(trace_indices, own) and trace_offsets[0] == 0


def test_dataset_errors(tmp_path):
    path = tmp_path / "d.pt"
    write_dataset(path)
    with pytest.raises(DreamshardError, match="outside 0..3"):
        load_tables(path, table_ids=[9])
    (tmp_path / "junk.pt.gz").write_bytes(b"not gzip at all")
    with pytest.raises(DreamshardError, match="cannot read"):
        load_tables(tmp_path / "junk.pt.gz")
