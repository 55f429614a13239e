"""Shared helpers: run the real `dreamshard` console script, and small hand-made tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dreamshard.tables import Table

SCRIPT = Path(sys.executable).parent / "dreamshard"


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the installed console script, as a user would."""
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


@pytest.fixture
def cli():
    assert SCRIPT.exists(), f"the dreamshard console script is not installed at {SCRIPT}"
    return run_cli


def table(name: str, rows: int = 1000, dim: int = 16, pooling: float = 2.0) -> Table:
    return Table(name=name, rows=rows, dim=dim, pooling_factor=pooling)
