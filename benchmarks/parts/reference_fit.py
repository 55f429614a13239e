"""Write the reference rule's shipped calibration from the `reference_calibration` study's rows:

    .venv/bin/python -m benchmarks.parts.reference_fit [ROWS]

The least-squares line of the measured on the predicted log gains over TorchRec's plan (the
`dmp` wall-clock judge, each task's distinct plans), its residual spread and the study's
margin go into `dreamshard/placement/reference_calibration.json` with the study's command and
commit, so a plan's verdict names the run it was calibrated on.
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

from benchmarks.record import read_rows, rows_path
from benchmarks.study import costs
from dreamshard.files import write_json_atomic
from dreamshard.placement.reference import CALIBRATION_FILE, fit_calibration

DMP, PREDICTED, TORCHREC = "dmp", "predicted", "torchrec"  # the study's judges and reference
MARGIN = 0.01  # the gain the rule's lower end must clear, fixed before any target run


def distinct_arms(row: dict) -> list[str]:
    """The task's arms whose plan is the first of its kind and not TorchRec's plan."""
    same = row.get("same", {})
    return [
        a
        for a in row["plans"]
        if a != TORCHREC and same.get(a, a) == a and "declined" not in row["plans"][a]
    ]


def gain_pairs(rows: list[dict], judge: str) -> tuple[np.ndarray, np.ndarray]:
    """(predicted, measured) log gains over TorchRec's plan of every distinct plan."""
    xs, ys = [], []
    for row in rows:
        if "declined" in row["plans"].get(TORCHREC, {"declined": 1}):
            continue
        base = costs([row], TORCHREC, judge)[:, 0]
        predicted_base = costs([row], TORCHREC, PREDICTED)[0, 0]
        for arm in distinct_arms(row):
            measured = np.log(base / costs([row], arm, judge)[:, 0])
            xs.append(np.log(predicted_base / costs([row], arm, PREDICTED)[0, 0]))
            ys.append(float(np.nanmean(measured)))
    return np.asarray(xs), np.asarray(ys)


def pair_arms(rows: list[dict]) -> list[str]:
    return [
        f"{row['task']} / {arm}"
        for row in rows
        if "declined" not in row["plans"].get(TORCHREC, {"declined": 1})
        for arm in distinct_arms(row)
    ]


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else rows_path("reference_calibration")
    meta, rows = read_rows(path)
    x, y = gain_pairs(rows, DMP)
    source = f"`{meta['command']}` at commit {meta['commit']} ({meta['date']}), judge {DMP}"
    fit = fit_calibration(x, y, MARGIN, source)
    write_json_atomic(CALIBRATION_FILE, asdict(fit))
    print(f"wrote {CALIBRATION_FILE}: {asdict(fit)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
