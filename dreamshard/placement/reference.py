"""The reference rule: a planner's plan replaces a reference plan only when the calibrated
predicted gain clears a margin.

A user who swaps TorchRec's planner for ours must never get a slower step. So `DreamShardPlanner`
(and `place --format torchrec`) plans a reference too, TorchRec's own plan of the same model,
topology and constraints (else the best whole-table heuristic), and keeps it unless its own
plan is predicted cheaper by more than the predictions' error on real steps:

    predicted gain  x = log(predicted reference / predicted ours)       (the planner's model)
    calibrated gain y = slope * x + intercept                            (measured steps)
    lower end         = y - z * spread                                   (one-sided, z = 1.645)
    leave the reference only when exp(lower end) - 1 > margin

`slope`, `intercept` and `spread` (the residual standard deviation) come from a least-squares
fit of the measured log gain (the reference's step over the plan's, paired within rounds) on the
predicted one, over DMP-measured plans of tasks that no target run uses; the fit and the margin
are in `reference_calibration.json`, written by `benchmarks/parts/reference_fit.py` from the
`reference_calibration` study's rows, with the command and commit that made them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from dreamshard.errors import DreamshardError
from dreamshard.files import read_json

CALIBRATION_FILE = Path(__file__).with_name("reference_calibration.json")
Z_ONE_SIDED_95 = 1.645


@dataclass(frozen=True)
class Calibration:
    """How far the planner's predicted gains over a reference hold on measured steps."""

    slope: float
    intercept: float
    spread: float  # residual standard deviation of the measured log gain, over the fit
    margin: float  # the gain the lower end must clear (0.01: 1%)
    pairs: int  # plans the fit saw
    source: str  # the command and commit that measured them
    z: float = Z_ONE_SIDED_95

    def lower_gain(self, predicted_gain: float) -> float:
        """The lower end of the calibrated gain (a log ratio) for a predicted log gain."""
        return self.slope * predicted_gain + self.intercept - self.z * self.spread


def fit_calibration(
    predicted: np.ndarray, measured: np.ndarray, margin: float, source: str
) -> Calibration:
    """The least-squares line of measured on predicted log gains, and its residual spread."""
    predicted, measured = np.asarray(predicted, float), np.asarray(measured, float)
    if predicted.size < 3 or predicted.size != measured.size:
        raise DreamshardError(f"a calibration needs 3 pairs or more, got {predicted.size}")
    slope, intercept = np.polyfit(predicted, measured, 1)
    residual = measured - (slope * predicted + intercept)
    spread = float(np.sqrt((residual**2).sum() / (predicted.size - 2)))
    return Calibration(float(slope), float(intercept), spread, margin, int(predicted.size), source)


def load_calibration(path: str | Path = CALIBRATION_FILE) -> Calibration:
    """The shipped calibration (DreamshardError naming the file where it is missing or bad)."""
    data = read_json(path, "reference calibration")
    try:
        return Calibration(**{k: data[k] for k in Calibration.__dataclass_fields__ if k in data})
    except TypeError as exc:
        raise DreamshardError(f"{path}: not a reference calibration ({exc})") from None


@dataclass(frozen=True)
class Verdict:
    """Which plan the rule keeps, and why (the plan file and the planner's log say it)."""

    reference: str  # what the reference was: "torchrec", or "heuristic <key>"
    kept_reference: bool
    predicted_ms: float  # the planner's plan, by its model
    reference_predicted_ms: float
    predicted_gain: float  # reference / ours - 1, by the model
    lower_gain: float  # the calibrated lower end, as a fraction (exp(log) - 1)
    margin: float
    reason: str

    def record(self) -> dict:
        return asdict(self)


def weigh(reference: str, ours_ms: float, reference_ms: float, calibration: Calibration) -> Verdict:
    """The rule of this module's docstring on two predicted costs."""
    if not (ours_ms > 0 and reference_ms > 0 and math.isfinite(ours_ms * reference_ms)):
        raise DreamshardError(f"predicted costs must be positive, got {ours_ms} and {reference_ms}")
    x = math.log(reference_ms / ours_ms)
    lower = math.expm1(calibration.lower_gain(x))
    leave = lower > calibration.margin
    said = (
        f"predicted gain over {reference} {math.expm1(x):+.1%}, calibrated lower end "
        f"{lower:+.1%}, margin {calibration.margin:.1%}"
    )
    reason = f"{said}: left the reference" if leave else f"{said}: kept the reference"
    return Verdict(
        reference,
        not leave,
        ours_ms,
        reference_ms,
        math.expm1(x),
        lower,
        calibration.margin,
        reason,
    )
