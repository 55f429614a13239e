"""`python -m benchmarks`: list the studies, run one, render a report again from its rows, or
rebuild the MLflow runs of every rows file in `benchmarks/results/`."""

from __future__ import annotations

import argparse
import sys

from benchmarks import STUDIES
from benchmarks.record import RESULTS, file_hash, imported_hashes, log_run, read_rows, rows_path
from benchmarks.report import render
from benchmarks.runner import run
from benchmarks.study import Study
from dreamshard.errors import DreamshardError
from dreamshard.files import write_text_atomic
from dreamshard.lazy import load_object


def study_named(name: str) -> Study:
    if name not in STUDIES:
        raise DreamshardError(f"no study {name!r}; choose one of {', '.join(STUDIES)}")
    return load_object(STUDIES[name])


def run_command(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        raise DreamshardError(f"run which study? choose one of {', '.join(STUDIES)}")
    study = study_named(argv[0])
    parser = argparse.ArgumentParser(
        prog=f"python -m benchmarks run {study.name}", description=study.title
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="2 tasks, 2 rounds, no results file and no MLflow run: a first look",
    )
    parser.add_argument("--out", help="folder of the rows file and report (default: results/)")
    parser.add_argument("--no-mlflow", action="store_true", help="log no MLflow run")
    study.options(parser)
    args = parser.parse_args(argv[1:])
    return run(study, args, argv[1:])


def report_command(name: str) -> int:
    """The report of `name` written again from its rows file, measuring nothing."""
    study = study_named(name)
    path = rows_path(name)
    meta, rows = read_rows(path)
    report, _ = render(study, meta, rows)
    write_text_atomic(path.with_name(f"{name}.md"), report)
    print(report)
    return 0


def import_command() -> int:
    """An MLflow run for every rows file whose hash no run of its study carries yet."""
    for path in sorted(RESULTS.glob("*.rows.json")):
        meta, rows = read_rows(path)
        study = study_named(meta["study"])
        if file_hash(path) in imported_hashes(study.name):
            print(f"{path.name}: already in MLflow")
            continue
        _, found = render(study, meta, rows)
        run_id = log_run(meta, found, path, path.with_name(f"{study.name}.md"))
        print(f"{path.name}: MLflow run {run_id}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    usage = "usage: python -m benchmarks list | run NAME [--quick] [options] | report NAME | import"
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip() + "\n\n" + usage)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "list":
        for name in STUDIES:
            print(f"{name:16s} {study_named(name).title}")
        return 0
    if command == "run":
        return run_command(rest)
    if command == "report" and len(rest) == 1:
        return report_command(rest[0])
    if command == "import" and not rest:
        return import_command()
    raise DreamshardError(usage.removeprefix("usage: "))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except DreamshardError as exc:
        print(f"benchmarks: error: {exc}", file=sys.stderr)
        sys.exit(2)
