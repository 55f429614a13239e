"""Reading and writing tables: hand-written specs (CSV/JSON), generated tables, data-set files."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dreamshard.errors import DreamshardError
from dreamshard.files import write_json_atomic, write_text_atomic
from dreamshard.tables.table import DEFAULT_HISTOGRAM, NUM_BINS, Table, TraceRef, validate_table

REQUIRED_COLUMNS = ("name", "rows", "dim", "pooling_factor")
BIN_COLUMNS = tuple(f"bin_{j}" for j in range(NUM_BINS))
TABLES_FORMAT = "dreamshard-tables"


def table_to_dict(table: Table) -> dict[str, Any]:
    data = {
        "name": table.name,
        "rows": table.rows,
        "dim": table.dim,
        "pooling_factor": table.pooling_factor,
        "histogram": list(table.histogram),
    }
    if table.trace is not None:
        data["trace"] = asdict(table.trace)
    return data


def _number(value: Any, column: str, where: str, integer: bool, positive: bool = True) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise DreamshardError(f"{where}: {column} {value!r} is not a number") from None
    if not math.isfinite(number) or (positive and number <= 0):
        raise DreamshardError(f"{where}: {column} must be positive, got {value!r}")
    if integer and number != int(number):
        raise DreamshardError(f"{where}: {column} must be a whole number, got {value!r}")
    return number


def _histogram(values: Sequence[Any], where: str) -> tuple[float, ...]:
    """Bin values as fractions; counts are accepted and normalised."""
    numbers = [_number(v, f"bin_{j}", where, False, positive=False) for j, v in enumerate(values)]
    if any(n < 0 for n in numbers) or sum(numbers) <= 0:
        raise DreamshardError(f"{where}: histogram bins must be non-negative and not all zero")
    total = sum(numbers)
    if abs(total - 1.0) < 1e-9:  # already fractions: keep them bit for bit
        return tuple(numbers)
    return tuple(n / total for n in numbers)


def table_from_record(record: dict[str, Any], where: str) -> Table:
    """A table from one spec record (CSV row or JSON object), validated."""
    missing = [c for c in REQUIRED_COLUMNS if record.get(c) in (None, "")]
    if missing:
        raise DreamshardError(f"{where}: missing {', '.join(missing)}")
    if "histogram" in record:
        if len(record["histogram"]) != NUM_BINS:
            raise DreamshardError(f"{where}: histogram needs {NUM_BINS} values")
        histogram = _histogram(record["histogram"], where)
    elif any(record.get(c) not in (None, "") for c in BIN_COLUMNS):
        absent = [c for c in BIN_COLUMNS if record.get(c) in (None, "")]
        if absent:
            raise DreamshardError(f"{where}: histogram given without {', '.join(absent)}")
        histogram = _histogram([record[c] for c in BIN_COLUMNS], where)
    else:
        histogram = DEFAULT_HISTOGRAM
    trace = TraceRef(**record["trace"]) if isinstance(record.get("trace"), dict) else None
    table = Table(
        name=str(record["name"]).strip(),
        rows=int(_number(record["rows"], "rows", where, integer=True)),
        dim=int(_number(record["dim"], "dim", where, integer=True)),
        pooling_factor=_number(record["pooling_factor"], "pooling_factor", where, integer=False),
        histogram=histogram,
        trace=trace,
    )
    try:
        validate_table(table)
    except DreamshardError as exc:
        raise DreamshardError(f"{where}: {exc}") from None
    return table


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise DreamshardError(f"table file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DreamshardError(f"cannot read table file {path}: {exc}") from None


def read_csv_tables(path: Path) -> list[Table]:
    reader = csv.DictReader(io.StringIO(_read_text(path)))
    columns = [c.strip() for c in reader.fieldnames or []]
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise DreamshardError(f"{path}: missing column {', '.join(missing)}")
    reader.fieldnames = columns
    tables = [table_from_record(row, f"{path} line {n + 2}") for n, row in enumerate(reader)]
    if not tables:
        raise DreamshardError(f"{path} lists no tables")
    return tables


def read_json_tables(path: Path) -> list[Table]:
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise DreamshardError(f"{path} is not valid JSON: {exc}") from None
    records = data.get("tables") if isinstance(data, dict) else data
    if not isinstance(records, list) or not records:
        raise DreamshardError(f"{path}: expected a list of tables or an object with 'tables'")
    if not all(isinstance(r, dict) for r in records):
        raise DreamshardError(f"{path}: every table must be an object")
    return [table_from_record(r, f"{path} table {n}") for n, r in enumerate(records)]


def load_tables(
    path: str | Path, table_ids: Sequence[int] | None = None, dim: int | None = 16
) -> list[Table]:
    """Tables from any supported source, by file name: .csv, .json, .pt or .pt.gz.

    `table_ids` and `dim` apply to data-set files (which give no dims).
    """
    path = Path(path)
    name = path.name.lower()
    if name.endswith((".pt", ".pt.gz")):
        from dreamshard.tables.dlrm_data import load_dataset_tables

        if not path.exists():
            raise DreamshardError(f"data-set file {path} does not exist")
        return load_dataset_tables(path, table_ids, dim)
    if name.endswith(".csv"):
        tables = read_csv_tables(path)
    elif name.endswith(".json"):
        tables = read_json_tables(path)
    else:
        raise DreamshardError(f"{path}: unknown table file type; use .csv, .json, .pt or .pt.gz")
    names = [t.name for t in tables]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise DreamshardError(f"{path}: table name {duplicate!r} appears twice")
    return tables


def save_tables(tables: Sequence[Table], path: str | Path, source: dict | None = None) -> None:
    """Write tables as JSON (with their trace references) or as a CSV spec, atomically."""
    path = Path(path)
    if path.name.lower().endswith(".csv"):
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(REQUIRED_COLUMNS + BIN_COLUMNS)
        for t in tables:
            writer.writerow(
                [t.name, t.rows, t.dim, repr(t.pooling_factor), *map(repr, t.histogram)]
            )
        write_text_atomic(path, out.getvalue())
    else:
        data = {"format": TABLES_FORMAT, "version": 1, "source": source or {}}
        data["tables"] = [table_to_dict(t) for t in tables]
        write_json_atomic(path, data)
