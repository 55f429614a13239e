"""Calibrate the `cpu-gloo` topology: time gloo all_to_all_single between local processes.

Run: .venv/bin/python benchmarks/gloo_alltoall.py [--procs 2 4]
Prints the median time per message size and a latency-per-peer + bandwidth fit, the figures
behind TOPOLOGIES["cpu-gloo"] in dreamshard/costs/comm.py. The timing program is
`gpu_tasks/gloo_alltoall.py`, under torchrun.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.script_entry import run_script
from dreamshard.costs.torchrun import run_job

SIZES = (1_000, 100_000, 1_000_000, 4_000_000)  # fp32 elements sent to each peer
REPEATS = 12  # per size; the first two are a warm-up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, nargs="+", default=[2, 4])
    args = parser.parse_args()
    points = []
    for world in args.procs:
        job = {"sizes": list(SIZES), "repeats": REPEATS}
        ranks = run_job("gpu_tasks.gloo_alltoall", world, job, threads=1)["ranks"]
        for n, ms in zip(SIZES, ranks[0]["ms"]):
            sent = n * 4 * (world - 1)
            points.append((world, sent, ms))
            print(f"{world} processes: {sent / 1e6:8.3f} MB sent per process in {ms:8.3f} ms")
    # ms = latency * (peers) + bytes / bandwidth
    a = np.array([[w - 1, s / 1e9 * 1000] for w, s, _ in points])
    y = np.array([ms for *_, ms in points])
    (latency, inverse_bw), *_ = np.linalg.lstsq(a, y, rcond=None)
    print(f"fit: {latency:.3f} ms per peer, {1 / inverse_bw:.2f} GB/s")


if __name__ == "__main__":
    run_script(main)
