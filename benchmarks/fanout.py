"""The Dask fan-out's overhead and scaling (issue 31): fixed-time jobs on 1, 2 and 4 workers.

Run: .venv/bin/python benchmarks/fanout.py [--jobs 24] [--seconds 0.5] [--rounds 3]

Jobs: `--jobs` placements of cpu-10x2's training tasks (`costs.collect.collection_jobs`), each
measured on the simulated backend after waiting `--seconds` (`BackendSpec.delay_s`: a stand-in
for a measurement of known length that holds no host lock, so workers can overlap). Each round
times, side by side, the jobs in this process one after another and on an embedded
LocalCluster of 1, 2 and 4 workers (one thread each; the cluster's start is timed apart).
Reports the median wall time over rounds with its range, the ideal (jobs x seconds / workers),
the overhead per job ((wall - ideal) / jobs) and the speed-up over this process.

Real kernels allow one measurement at a time per host (the host lock: two would time kernels
against each other), so on this 2-core CPU host fbgemm gains nothing from more workers here;
the fan-out pays off with one worker per GPU host, or per GPU under torchrun jobs.
Writes benchmarks/results/fanout.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from benchmarks.parts.report_files import fenced_table, host_note, write_report
from benchmarks.script_entry import run_script
from dreamshard.costs.backends import make_backend
from dreamshard.costs.collect import collection_jobs
from dreamshard.costs.dataset import hardware, measurement_key
from dreamshard.costs.fanout import BackendSpec, dask_client, measure_many
from dreamshard.placement.suites import make_suite, parse_suite_name

RESULTS = Path(__file__).parent / "results" / "fanout.md"
WORKERS = (1, 2, 4)


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def keyed_jobs(count: int) -> list:
    spec = parse_suite_name("cpu-10x2", num_train_tasks=count, num_test_tasks=1)
    config = make_backend("simulated").config()
    jobs = list(collection_jobs(make_suite(spec), count))
    return [(measurement_key(j.task, j.placement, config, j.round, hardware()), j) for j in jobs]


def timed(jobs: list, spec: BackendSpec, workers: int | None) -> tuple[float, float]:
    """(cluster start seconds, seconds to measure every job); workers None: this process."""
    if workers is None:
        began = time.perf_counter()
        done = list(measure_many(jobs, spec))
        assert len(done) == len(jobs)
        return 0.0, time.perf_counter() - began
    began = time.perf_counter()
    with dask_client(f"local:{workers}") as client:
        client.wait_for_workers(workers)
        started = time.perf_counter()
        done = list(measure_many(jobs, spec, client))
        took = time.perf_counter() - started
    assert len(done) == len(jobs) and all(m.cost is not None for m in done)
    return started - began, took


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=24)
    parser.add_argument("--seconds", type=float, default=0.5, help="each job's fixed time")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    jobs = keyed_jobs(args.jobs)
    spec = BackendSpec("simulated", delay_s=args.seconds)
    arms = [None, *WORKERS]
    walls: dict = {arm: [] for arm in arms}
    starts: dict = {arm: [] for arm in arms}
    for r in range(args.rounds):
        for arm in arms:  # interleaved: each round runs every arm once
            start, wall = timed(jobs, spec, arm)
            walls[arm].append(wall)
            starts[arm].append(start)
            say(f"round {r + 1}/{args.rounds}, {arm or 'this process'}: {wall:.2f} s")
    base = statistics.median(walls[None])
    rows = []
    for arm in arms:
        wall = statistics.median(walls[arm])
        ideal = len(jobs) * args.seconds / (arm or 1)
        spread = f"{min(walls[arm]):.2f}-{max(walls[arm]):.2f}"
        rows.append(
            [
                "this process" if arm is None else f"{arm} workers",
                f"{wall:.2f} ({spread})",
                f"{ideal:.2f}",
                f"{(wall - ideal) / len(jobs) * 1000:.0f}",
                f"{base / wall:.2f}",
                f"{statistics.median(starts[arm]):.1f}" if arm else "-",
            ]
        )
    command = "benchmarks/fanout.py " + " ".join(argv if argv is not None else sys.argv[1:])
    report = "\n\n".join(
        [
            "# Measuring on a Dask cluster: overhead and scaling",
            f"Made by `{command.strip()}`. {host_note()}. {len(jobs)} jobs of "
            f"{args.seconds:g} s each (simulated backend behind a fixed wait: no kernels, no "
            f"host lock), {args.rounds} interleaved rounds; medians with their range. Workers: "
            "an embedded LocalCluster, one thread each, started apart from the timing.",
            fenced_table(
                "where | seconds (range) | ideal | overhead ms/job | speed-up | cluster start s",
                rows,
            ),
            "Real kernels (fbgemm) allow one measurement at a time per host: the host lock "
            "keeps workers on one host in turn, so on this 2-core CPU host they gain nothing "
            "from more than one worker. The fan-out pays off across hosts (a worker per GPU "
            "host).",
        ]
    )
    write_report(args.out, report)


if __name__ == "__main__":
    run_script(main)
