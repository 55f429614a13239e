"""How every benchmark script runs: `run_script(main, ...)` calls its `main`, and a
`DreamshardError` (a bad option, a missing model or file, an infeasible task) becomes one line
on stderr naming the script, exit code 2, no traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

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
