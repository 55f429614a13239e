"""How good are the measurements? Overhead, repeatability, the fusion effect, and the
simulated backend's error against fresh real measurements, all in one run on this host.

Run: .venv/bin/python benchmarks/measurement.py [--rounds 5] [--placements 8]
Writes benchmarks/results/measurement.md and prints the same tables.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from dreamshard.costs.backends import describe_costs
from dreamshard.costs.dataset import hardware, versions
from dreamshard.costs.fbgemm import FbgemmBackend
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.evaluation.rounds import cv, measure_interleaved, paired_ratios
from dreamshard.files import write_text_atomic
from dreamshard.methods import place
from dreamshard.placement.heuristics import PLANNERS
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.report import format_table
from dreamshard.tables.synthetic import generate_tables
from dreamshard.tables.traces import concat_traces
from gpu_tasks.tbe import GroupInput, time_groups

RESULTS = Path(__file__).parent / "results" / "measurement.md"


def overhead(backend, items) -> tuple[str, float]:
    rows, walls, kernels = [], [], []
    for task, placement in items:
        start = time.perf_counter()
        cost = backend.measure(task, placement)
        wall = (time.perf_counter() - start) * 1000
        walls.append(wall)
        kernels.append(cost.info["kernel_ms"])
        rows.append(
            [
                task.name,
                placement.method,
                wall,
                cost.info["kernel_ms"],
                f"{1 - cost.info['kernel_ms'] / wall:.0%}",
            ]
        )
    share = 1 - sum(kernels) / sum(walls)
    table = format_table(["task", "planner", "wall ms", "in timed kernels ms", "overhead"], rows)
    return table + f"\n\noverall overhead: {share:.1%} of wall time (target < 30%)", share


def repeatability(backend, items, rounds: int) -> tuple[str, float]:
    costs = measure_interleaved(backend, items, rounds, seed=1)
    reference = costs.mean(axis=1)  # each round's mean over placements
    ratios = paired_ratios(costs, reference)
    rows = [
        [
            task.name,
            p.method,
            float(costs[:, i].mean()),
            f"{cv(costs[:, i]):.1%}",
            f"{cv(ratios[:, i]):.1%}",
        ]
        for i, (task, p) in enumerate(items)
    ]
    median_cv = float(np.median(cv(costs)))
    table = format_table(["task", "planner", "mean ms", "cv of cost", "cv of paired ratio"], rows)
    return (
        table + f"\n\n{rounds} interleaved rounds; median cv of the overall cost {median_cv:.1%} "
        f"(target < 5%); median cv of the ratio to the round's mean "
        f"{float(np.median(cv(ratios))):.1%}"
    ), median_cv


def fusion(timing) -> str:
    rows = []
    pool = generate_tables("cpu", 400, seed=7)
    for label, pick in (
        ("small (< 5k rows)", lambda t: t.rows < 5000),
        ("large (> 50k rows)", lambda t: t.rows > 50_000),
    ):
        chosen = [t for t in pool if pick(t) and t.pooling_factor > 2][:24]
        ratios = []
        for g in range(3):
            group = chosen[g * 8 : (g + 1) * 8]
            inputs = [_group_input(group)] + [_group_input([t]) for t in group]
            timings = time_groups(inputs, timing)
            fused = timings[0].fwd_ms + timings[0].bwd_ms
            single = sum(t.fwd_ms + t.bwd_ms for t in timings[1:])
            ratios.append(fused / single)
            rows.append([label, g, fused, single, fused / single])
    return format_table(["tables", "group", "fused ms", "sum of singles ms", "ratio"], rows)


def _group_input(tables) -> GroupInput:
    indices, offsets = concat_traces(tables, 2048)
    return GroupInput([t.rows for t in tables], [t.dim for t in tables], indices, offsets)


def simulated_error(backend, items) -> tuple[str, float]:
    simulated = SimulatedBackend()
    errors, rows = [], []
    for task, placement in items:
        real = backend.measure(task, placement)
        sim = simulated.measure(task, placement)
        for r, s in zip(real.devices, sim.devices):
            measured, predicted = r.fwd_comp + r.bwd_comp, s.fwd_comp + s.bwd_comp
            if measured > 0:
                errors.append(abs(predicted / measured - 1))
        rows.append(
            [
                task.name,
                placement.method,
                real.overall,
                sim.overall,
                f"{sim.overall / real.overall - 1:+.1%}",
            ]
        )
    median = float(np.median(errors))
    table = format_table(["task", "planner", "measured ms", "simulated ms", "error"], rows)
    return table + (
        f"\n\nper-device fused-kernel cost (fwd+bwd), {len(errors)} groups on test tasks the "
        f"calibration never saw: median error {median:.1%} (target < 10%)"
    ), median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="cpu-50x4")
    parser.add_argument("--placements", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    suite = make_suite(parse_suite_name(args.suite, 1, args.placements))
    methods = list(PLANNERS)
    items = [
        (t, place(t, methods[i % len(methods)], seed=i)) for i, t in enumerate(suite.test_tasks)
    ]
    backend = FbgemmBackend()
    backend.measure(*items[0])  # load fbgemm and fill the trace cache outside every figure
    sections = [
        f"# Measurement quality ({time.strftime('%Y-%m-%d')})",
        f"Host: {hardware()}; versions: {versions()}; suite {args.suite} "
        f"({args.placements} test tasks, {args.rounds} interleaved rounds). Costs: "
        f"{describe_costs(backend.config())}; {backend.timing.iterations} timed iterations "
        f"after {backend.timing.warmup} warm-up.",
    ]
    for title, run in (
        (
            "Overhead: wall time per placement vs time inside timed kernels",
            lambda: overhead(backend, items)[0],
        ),
        (
            "Repeatability: each placement measured in interleaved rounds",
            lambda: repeatability(backend, items[:4], args.rounds)[0],
        ),
        (
            "Fusion on this CPU: one fused kernel vs its tables' kernels, timed interleaved",
            lambda: fusion(backend.timing),
        ),
        (
            "Simulated backend vs fresh real measurements",
            lambda: simulated_error(backend, items)[0],
        ),
    ):
        print(f"\n## {title}", flush=True)
        text = run()
        print(text, flush=True)
        sections.append(f"## {title}\n\n```\n{text}\n```")
    write_text_atomic(RESULTS, "\n\n".join(sections) + "\n")
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
