"""A run's report files: the markdown and the JSON beside it, written atomically; an
evaluation's raw results (JSON and one CSV row per measurement); the line saying where it ran;
a table in a code fence.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from dreamshard.costs.dataset import hardware, versions
from dreamshard.evaluation.results import Evaluation
from dreamshard.files import write_text_atomic
from dreamshard.report import format_table


def host_note() -> str:
    """Where and with what a report's figures were made: "Host: <hardware>; <versions>"."""
    return f"Host: {hardware()}; {versions()}"


def torchrec_version() -> str:
    """TorchRec's version, or "not installed" (it is an optional extra)."""
    try:
        return version("torchrec")
    except PackageNotFoundError:
        return "not installed"


def write_report(out: str | Path, markdown: str, data: dict | None = None) -> Path:
    """The markdown at `out` (one trailing newline) and, when given, `data` as JSON beside it
    (same name, .json); folders made as needed. Returns the markdown's path."""
    out = Path(out)
    write_text_atomic(out, markdown.rstrip("\n") + "\n")
    if data is not None:
        write_text_atomic(out.with_suffix(".json"), json.dumps(data, indent=1, default=str) + "\n")
    print(f"wrote {out}" + (" (+ .json)" if data is not None else ""), flush=True)
    return out


def write_evaluation(evaluation: Evaluation, out: str | Path, extra: dict) -> None:
    """The evaluation's raw results beside the report at `out`: `to_dict()` with `extra` as
    .json, and one row per measurement as .csv (task, planner, round, overall_ms)."""
    out = Path(out)
    data = evaluation.to_dict() | extra
    write_text_atomic(out.with_suffix(".json"), json.dumps(data, indent=1, default=str) + "\n")
    rows = io.StringIO(newline="")
    writer = csv.writer(rows)
    writer.writerow(["task", "planner", "round", "overall_ms"])
    writer.writerows(evaluation.csv_rows())
    write_text_atomic(out.with_suffix(".csv"), rows.getvalue())


def fenced_table(columns: str, rows: Sequence[Sequence[object]]) -> str:
    """A terminal table (`report.format_table`) in a markdown code fence, its columns named as
    one string, "planner | mean ms | vs lookup"."""
    return "```\n" + format_table(columns.split(" | "), rows) + "\n```"
