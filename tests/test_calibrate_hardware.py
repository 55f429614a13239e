"""`gpu_tasks/calibrate_hardware.py` on this host's CPU: the code path a GPU host runs, fbgemm's
kernels timed for real, and a hardware file written that the loader and the judges take."""

from __future__ import annotations

import json

from dreamshard.costs.hardware import load_hardware
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.placement.tasks import GIB, Placement, PlacementTask
from dreamshard.tables.table import Table
from gpu_tasks.calibrate_hardware import main

MEASURED = ("call_floor_ms", "hbm_efficiency", "bwd_fwd_ratio")


def test_calibration_times_the_points_and_writes_a_hardware_file(tmp_path, capsys):
    out = tmp_path / "measured.json"
    words = ["--small", "--device", "cpu", "--iterations", "3", "--base", "h100-sxm"]
    assert main([*words, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "fbgemm-ci" not in printed and f"wrote {out}" in printed
    measured, base = load_hardware(str(out)), load_hardware("h100-sxm")
    assert measured.name == "h100-sxm-measured"
    for key in MEASURED:
        assert "calibrate_hardware.py on cpu" in measured.constants[key].source
        assert measured.constants[key] != base.constants[key]
    for key in set(base.constants) - set(MEASURED):  # the rest keep the published figures
        assert measured.constants[key] == base.constants[key]
    points = json.loads(out.read_text())["points"]
    floor, biggest = points[0], max(points, key=lambda p: p["bytes"])
    assert floor["point"] == "floor" and biggest["fwd_ms"] > 5 * floor["fwd_ms"]
    assert measured.value("call_floor_ms") == floor["fwd_ms"]
    # the measured file prices a plan as any hardware file does
    task = PlacementTask((Table("a", 100_000, 64, 20.0), Table("b", 5000, 16, 4.0)), 2, GIB)
    cost = SimulatedBackend(hardware=measured).measure(task, Placement((0, 1)))
    assert cost.info["hardware"] == "h100-sxm-measured" and cost.overall > 0


def test_a_sweep_with_nothing_bandwidth_bound_is_refused_in_one_line(tmp_path, capsys):
    out = tmp_path / "measured.json"
    words = ["--small", "--device", "cpu", "--iterations", "2", "--max-seconds", "0"]
    assert main([*words, "--out", str(out)]) == 2  # only the floor was timed
    assert "nothing bandwidth-bound" in capsys.readouterr().err and not out.exists()
