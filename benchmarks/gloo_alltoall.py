"""Calibrate the `cpu-gloo` topology: time gloo all_to_all_single between local processes.

Run: .venv/bin/python benchmarks/gloo_alltoall.py [--procs 2 4]
Prints the median time per message size and a latency-per-peer + bandwidth fit, the figures
behind TOPOLOGIES["cpu-gloo"] in dreamshard/costs/comm.py.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

import numpy as np

SIZES = (1_000, 100_000, 1_000_000, 4_000_000)  # fp32 elements sent to each peer


def worker() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    for n in SIZES:
        send, recv = torch.randn(n * world), torch.empty(n * world)
        times = []
        for _ in range(12):
            dist.barrier()
            start = time.perf_counter()
            dist.all_to_all_single(recv, send)
            times.append(time.perf_counter() - start)
        if rank == 0:
            sent = n * 4 * (world - 1)
            print(f"{world} {sent} {np.median(times[2:]) * 1000:.4f}", flush=True)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker()
    points = []
    for procs in args.procs:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                f"--nproc_per_node={procs}",
                "--master_addr=127.0.0.1",
                f"--master_port={port}",
                __file__,
                "--worker",
            ],
            capture_output=True,
            text=True,
            check=True,
            env=dict(os.environ, OMP_NUM_THREADS="1"),
        ).stdout
        for line in out.split("\n"):
            if line.strip():
                world, sent, ms = line.split()
                points.append((int(world), int(sent), float(ms)))
                print(
                    f"{world} processes: {int(sent) / 1e6:8.3f} MB sent per process "
                    f"in {float(ms):8.3f} ms"
                )
    # ms = latency * (peers) + bytes / bandwidth
    a = np.array([[w - 1, s / 1e9 * 1000] for w, s, _ in points])
    y = np.array([ms for *_, ms in points])
    (latency, inverse_bw), *_ = np.linalg.lstsq(a, y, rcond=None)
    print(f"fit: {latency:.3f} ms per peer, {1 / inverse_bw:.2f} GB/s")


if __name__ == "__main__":
    main()
