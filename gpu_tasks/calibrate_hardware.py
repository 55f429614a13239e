"""Measure the constants a hardware file needs on this host's device, and write the file.

    python -m gpu_tasks.calibrate_hardware --base h100-sxm --out h100-measured.json

On a CUDA host (fp16 weights in HBM, CUDA events) it times FBGEMM's fused TBE
(`costs.tbe.time_groups`, forward, then backward with the fused SGD update) at:
- the floor: one tiny table (1,000 rows, dim 4, one lookup a bag);
- a sweep of dims {32, 128, 256} x pooling {1, 10, 55} over 10M rows, each row read once
  (a uniform histogram: no reuse), batch 13,107;
- FBGEMM's CI microbenchmark point (B 13,107, D 256, L 55, E 10M).
From each point it reads the bytes the roofline says it moves (`costs.roofline.byte_terms`) and
its time less the floor: the efficiency of the spec HBM bandwidth it reached and its backward
over forward. The points whose forward is at least 5x the floor (bandwidth-bound) give the
central value (median) and the range (min, max); the floor's samples give its own. The file
written is the `--base` file with those three constants (and the memory torch reports)
replaced, each source naming this script, the device and the date; the rest keep their
published sources. On a CPU the same code runs (`--small`: a sweep small enough for seconds),
fp32 in host memory: its test, not a CPU hardware file (`cpu` is the calibrated model).
It stops adding points after `--max-seconds` (default 480) and says so.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from dreamshard.costs.hardware import FOLDER, load_hardware, read_hardware
from dreamshard.costs.roofline import RooflineModel
from dreamshard.costs.tbe import GroupInput, TimingConfig, resolve_device, time_groups
from dreamshard.errors import DreamshardError
from dreamshard.files import write_json_atomic
from dreamshard.tables.table import NUM_BINS, Table

COLD = tuple([1.0] + [0.0] * (NUM_BINS - 1))  # every row touched once: no reuse
CI_POINT = (13_107, 256, 55.0, 10_000_000)  # FBGEMM's CI microbenchmark: B, D, L, E
BOUND = 5.0  # a point is bandwidth-bound when its forward is this many floors


@dataclass(frozen=True)
class Point:
    name: str
    batch: int
    dim: int
    pooling: float
    rows: int


@dataclass
class Timed:
    point: Point
    fwd_ms: float
    bwd_ms: float
    fwd_samples: list[float]
    bytes_moved: float


def points(small: bool) -> list[Point]:
    """The floor first, then the sweep, then FBGEMM's CI point (not with `small`)."""
    if small:
        # its largest point (d128-l200) took 12x the floor (0.25 ms) on this 2-core host; the
        # sweep's d128-l50 took 4x, which left the sweep nothing bandwidth-bound to fit
        batch, rows, dims, poolings = 1024, 100_000, (32, 128), (10.0, 50.0, 200.0)
    else:
        batch, rows, dims, poolings = CI_POINT[0], CI_POINT[3], (32, 128, 256), (1.0, 10.0, 55.0)
    found = [Point("floor", 512, 4, 1.0, 1000)]
    found += [Point(f"d{d}-l{p:g}", batch, d, p, rows) for d in dims for p in poolings]
    if not small:
        found.append(Point("fbgemm-ci", *CI_POINT[:3], CI_POINT[3]))
    return found


def time_point(point: Point, config: TimingConfig, model: RooflineModel, precision: str) -> Timed:
    table = Table(point.name, point.rows, point.dim, point.pooling, histogram=COLD)
    group = GroupInput.of([table], point.batch)
    timing = time_groups([group], config)[0]
    sums = model.quantities([table], point.batch, precision)
    moved = model.byte_terms(sums, precision)
    return Timed(
        point,
        timing.fwd_ms,
        timing.bwd_ms,
        list(timing.fwd_samples),
        float(moved["hbm"][0] + moved["l2"][0]),
    )


def measured_constants(timed: list[Timed], spec_gbps: float) -> dict[str, tuple]:
    """(low, central, high, how many points) of the floor, the HBM efficiency and the
    backward/forward ratio, from the timed points (the floor first)."""
    floor = timed[0]
    base = floor.fwd_ms
    bound = [t for t in timed[1:] if t.fwd_ms >= BOUND * base]
    if not bound:
        raise DreamshardError(
            f"no point took {BOUND:g}x the floor ({base:.4f} ms): nothing bandwidth-bound to "
            "fit; run without --small"
        )
    efficiency = [t.bytes_moved / ((t.fwd_ms - base) * 1e6) / spec_gbps for t in bound]
    ratio = [(t.bwd_ms - base) / (t.fwd_ms - base) for t in bound]
    samples = floor.fwd_samples or [base]

    def spread(values):
        return (float(min(values)), float(np.median(values)), float(max(values)), len(values))

    return {
        "call_floor_ms": spread(samples),
        "hbm_efficiency": spread(efficiency),
        "bwd_fwd_ratio": spread(ratio),
    }


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def calibrated_file(base_path: Path, timed: list[Timed], device: torch.device, name: str) -> dict:
    """The base file's content with the measured constants in place, each naming its source."""
    data = json.loads(base_path.read_text())
    base = read_hardware(base_path)
    where = device_name(device)
    day = time.strftime("%Y-%m-%d")
    stamp = f"measured by gpu_tasks/calibrate_hardware.py on {where}, {day}"
    for key, (low, central, high, count) in measured_constants(
        timed, base.value("hbm_spec_gbps")
    ).items():
        data["constants"][key] = {
            "low": low,
            "central": central,
            "high": high,
            "source": f"{stamp}: median (range) of {count} "
            + (
                "timed calls of the floor point"
                if key == "call_floor_ms"
                else "bandwidth-bound points"
            ),
        }
    if device.type == "cuda":
        memory = float(torch.cuda.get_device_properties(device).total_memory)
        data["constants"]["memory_bytes"] = {
            "low": memory * 0.85,
            "central": memory,
            "high": memory,
            "source": f"{stamp}: torch.cuda.get_device_properties().total_memory; low: less "
            "TorchRec's 15% reservation",
        }
        data["matches"] = [where]
    data["name"] = name
    data["description"] = f"{base.description}; floor, HBM efficiency and backward ratio {stamp}"
    data["points"] = [
        {
            "point": t.point.name,
            "batch": t.point.batch,
            "dim": t.point.dim,
            "pooling": t.point.pooling,
            "rows": t.point.rows,
            "fwd_ms": t.fwd_ms,
            "bwd_ms": t.bwd_ms,
            "bytes": t.bytes_moved,
        }
        for t in timed
    ]
    return data


def calibrate(args: argparse.Namespace) -> Path:
    base = load_hardware(args.base)
    base_path = FOLDER / f"{args.base}.json" if not Path(args.base).exists() else Path(args.base)
    config = TimingConfig(iterations=args.iterations, device=args.device)
    device = resolve_device(config.device)
    precision = "fp16" if device.type == "cuda" else "fp32"  # as costs.tbe builds the weights
    model = RooflineModel(base)
    started, timed = time.monotonic(), []
    chosen = points(args.small)
    for i, point in enumerate(chosen):
        if i > 0 and time.monotonic() - started > args.max_seconds:  # the floor always
            print(f"stopped after {i} of {len(chosen)} points: --max-seconds {args.max_seconds:g}")
            break
        timed.append(time_point(point, config, model, precision))
        t = timed[-1]
        mb = t.bytes_moved / 1e6
        print(f"{point.name}: fwd {t.fwd_ms:.4f} ms, bwd {t.bwd_ms:.4f} ms, {mb:.1f} MB")
    data = calibrated_file(base_path, timed, device, args.name or f"{base.name}-measured")
    out = Path(args.out)
    write_json_atomic(out, data)
    measured = read_hardware(out)  # refuses a file the loader would
    for key in ("call_floor_ms", "hbm_efficiency", "bwd_fwd_ratio"):
        c = measured.constants[key]
        print(
            f"{key}: {c.central:.4g} ({c.low:.4g} .. {c.high:.4g}); {base.name}'s: "
            f"{base.constants[key].central:.4g} ({base.constants[key].low:.4g} .. "
            f"{base.constants[key].high:.4g})"
        )
    print(f"wrote {out} in {time.monotonic() - started:.0f} s")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="generic-gpu", help="hardware file to start from")
    parser.add_argument("--out", required=True, help="the hardware file to write (.json)")
    parser.add_argument("--name", help="its name (default BASE-measured)")
    parser.add_argument("--iterations", type=int, default=20, help="timed calls a point")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cuda, cpu")
    parser.add_argument("--small", action="store_true", help="a sweep small enough for a CPU")
    parser.add_argument("--max-seconds", type=float, default=480.0)
    args = parser.parse_args(argv)
    try:
        calibrate(args)
    except DreamshardError as exc:
        print(f"calibrate_hardware: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
