"""The project-local state folder: datasets, calibrations, reports (`.dreamshard/` by default)."""

from __future__ import annotations

import os
from pathlib import Path

STATE_ENV = "DREAMSHARD_HOME"


def state_dir() -> Path:
    """`$DREAMSHARD_HOME` if set, else `.dreamshard` in the working directory (created)."""
    path = Path(os.environ.get(STATE_ENV, ".dreamshard")).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_dataset_path() -> Path:
    return state_dir() / "costs.sqlite"


def calibration_path() -> Path:
    return state_dir() / "simulated.json"
