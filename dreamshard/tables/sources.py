"""Reading and writing tables: hand-written specs (CSV/JSON), generated tables, data-set files."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model, model_validator
from pydantic_core import PydanticCustomError

from dreamshard.errors import DreamshardError
from dreamshard.files import validate, write_json_atomic, write_text_atomic
from dreamshard.tables.shards import SPLIT_KINDS
from dreamshard.tables.table import DEFAULT_HISTOGRAM, NUM_BINS, ShardRange, Table, TraceRef

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
    if table.shard is not None:
        data["shard"] = asdict(table.shard)
    return data


def _whole(value: float) -> int:
    if value != int(value):
        raise PydanticCustomError("whole", "must be a whole number, got {value}", {"value": value})
    return int(value)


PositiveWhole = Annotated[float, Field(gt=0), AfterValidator(_whole)]
Fraction = Annotated[float, Field(ge=0)]  # a histogram bin: a fraction or a count


class TraceRecord(BaseModel):
    """Where a table's trace comes from (`TraceRef`)."""

    kind: str
    index: int = Field(ge=0)
    batch_size: int = Field(gt=0)
    profile: str = ""
    seed: int = 0
    path: str = ""


class ShardRecord(BaseModel):
    """What a shard is cut from (`ShardRange`): a shard's record in a cost dataset."""

    of: str = Field(min_length=1)
    kind: Literal[*SPLIT_KINDS]
    start: int = Field(ge=0)
    stop: int = Field(gt=0)
    extent: int = Field(gt=0)


class TableFields(BaseModel):
    """One table of a spec: a CSV row or a JSON object. Numbers may be written as text (CSV);
    empty cells count as absent; other keys are ignored. TableRecord adds bin_0..bin_16."""

    model_config = ConfigDict(
        coerce_numbers_to_str=True, str_strip_whitespace=True, allow_inf_nan=False
    )

    name: str = Field(min_length=1)
    rows: PositiveWhole
    dim: Annotated[PositiveWhole, Field(multiple_of=4)]  # fbgemm needs it
    pooling_factor: float = Field(gt=0)
    histogram: list[Fraction] | None = Field(None, min_length=NUM_BINS, max_length=NUM_BINS)
    trace: TraceRecord | None = None
    shard: ShardRecord | None = None

    @model_validator(mode="before")
    @classmethod
    def _drop_empty(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        cells = {k: v.strip() if isinstance(v, str) else v for k, v in data.items()}
        return {k: v for k, v in cells.items() if isinstance(k, str) and v not in (None, "")}

    @model_validator(mode="after")
    def _complete_histogram(self) -> TableFields:
        absent = [c for c in BIN_COLUMNS if getattr(self, c, None) is None]
        if 0 < len(absent) < NUM_BINS:
            raise PydanticCustomError(
                "bins", "histogram given without {absent}", {"absent": ", ".join(absent)}
            )
        bins = self.bins()
        if bins is not None and sum(bins) <= 0:
            raise PydanticCustomError("bins", "histogram bins are all zero")
        return self

    def bins(self) -> list[float] | None:
        if self.histogram is not None:
            return self.histogram
        given = [getattr(self, c, None) for c in BIN_COLUMNS]
        return None if None in given else given

    def to_table(self) -> Table:
        """The table; histogram counts become fractions (fractions are kept bit for bit)."""
        bins = self.bins()
        if bins is None:
            histogram = DEFAULT_HISTOGRAM
        elif abs(sum(bins) - 1.0) < 1e-9 and max(bins) <= 1.0:
            histogram = tuple(bins)
        else:
            histogram = tuple(n / sum(bins) for n in bins)
        trace = TraceRef(**self.trace.model_dump()) if self.trace else None
        shard = ShardRange(**self.shard.model_dump()) if self.shard else None
        return Table(self.name, self.rows, self.dim, self.pooling_factor, histogram, trace, shard)


TableRecord = create_model(
    "TableRecord", __base__=TableFields, **{c: (Fraction | None, None) for c in BIN_COLUMNS}
)


def table_from_record(record: Any, where: str) -> Table:
    """A table from one spec record (CSV row or JSON object), validated as a TableRecord."""
    return validate(TableRecord, record, where).to_table()


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
        from dreamshard.tables.dlrm_data import load_dataset_tables  # torch: only for .pt files

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
