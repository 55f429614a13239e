"""How every benchmark script runs: `run_script(main, ...)` calls its `main`, and a
`DreamshardError` (a bad option, a missing model or file, an infeasible task) becomes one line
on stderr naming the script, exit code 2, no traceback. Scripts whose report can be rebuilt
from its stored measurements take `report_options` and end in `write_run`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from benchmarks.parts.report_files import write_report
from dreamshard.errors import DreamshardError


def run_script(main: Callable[..., object], *args) -> NoReturn:
    """`main(*args)`, then exit: 0, or the int it returned; 2 with one line on a
    `DreamshardError`."""
    try:
        code = main(*args)
    except DreamshardError as exc:
        print(f"{Path(sys.argv[0]).stem}: error: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) and not isinstance(code, bool) else 0)


def report_options(parser: argparse.ArgumentParser, out: str) -> None:
    """`--out` (the report; its measurements beside it as .json) and `--rerender`."""
    parser.add_argument("--out", default=out, help="report")
    parser.add_argument(
        "--rerender",
        action="store_true",
        help="write the report again from --out's .json (its measurements), measuring nothing",
    )


def command_line(script: str, args: dict) -> str:
    """The run's command with every option spelled out, from its stored args (`--rerender`
    left out): the same run again."""
    options = [f"--{k.replace('_', '-')} {v}" for k, v in args.items() if k != "rerender"]
    return f".venv/bin/python benchmarks/{script} " + " ".join(options)


def run_line(script: str, result: dict) -> str:
    """A report's command (`command_line`), its minutes, its host and versions."""
    return (
        f"Command: `{command_line(script, result['args'])}`; {result['seconds'] / 60:.1f} min "
        f"in all. Host: {result['hardware']} (one host for every figure); {result['versions']}."
    )


def stored_result(out: str) -> dict:
    """The run stored beside report `out` (its .json); DreamshardError when there is none."""
    path = Path(out).with_suffix(".json")
    if not path.exists():
        raise DreamshardError(f"no {path} to re-render: run the benchmark first")
    return json.loads(path.read_text())


def write_run(args: argparse.Namespace, run: Callable, render: Callable[[dict], str]) -> int:
    """`run(args)`'s result, or with `--rerender` the stored one, rendered into `args.out`
    (and its .json) and printed."""
    result = stored_result(args.out) if args.rerender else run(args)
    report = render(result)
    write_report(args.out, report, result)
    print(report)
    return 0
