"""Does giving the policy the features of the table being placed help? (the paper's policy
does not see them). And does more policy training on the estimated MDP? Trains each variant
with the same seeds on the simulated backend and compares them on every suite's held-out
tasks, zero-shot suites included.

Run: .venv/bin/python benchmarks/table_aware_ablation.py [--seeds 0 1] [--tasks 10]
Writes benchmarks/results/table_aware_ablation.md. Simulated costs: a study, not a measurement.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.files import write_text_atomic
from dreamshard.learn.train import train
from dreamshard.learn.train_config import TrainConfig
from dreamshard.methods import place
from dreamshard.placement.heuristics import HEURISTIC_KEYS
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.report import format_table

RESULTS = Path(__file__).parent / "results" / "table_aware_ablation.md"
SUITES = ("cpu-50x4", "cpu-100x4", "cpu-100x8", "cpu-200x8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--tasks", type=int, default=10)
    args = parser.parse_args()
    backend = SimulatedBackend()
    tasks = {s: make_suite(parse_suite_name(s, 1, args.tasks)).test_tasks for s in SUITES}
    best = {
        s: [min(backend.measure(t, place(t, k)).overall for k in HEURISTIC_KEYS) for t in ts]
        for s, ts in tasks.items()
    }
    rows = []
    variants = (
        ("paper (no table features)", {}),
        ("table-aware", {"table_aware": True}),
        ("paper, 100 policy updates per iteration", {"policy_updates": 100}),
    )
    for label, changes in variants:
        ratios = {s: [] for s in SUITES}
        for seed in args.seeds:
            with tempfile.TemporaryDirectory() as out:
                config = TrainConfig(backend="simulated", out=out, seed=seed, **changes)
                model = train(config, log=lambda *_: None)
            for s, ts in tasks.items():
                for t, b in zip(ts, best[s]):
                    placement = place(t, "dreamshard", model=model, samples=0)
                    ratios[s].append(backend.measure(t, placement).overall / b)
        rows.append([label, *(f"{np.mean(ratios[s]):.3f}" for s in SUITES)])
        print(rows[-1], flush=True)
    table = format_table(["policy", *(f"{s} vs per-task best heuristic" for s in SUITES)], rows)
    text = (
        f"# Table-aware policy ablation ({time.strftime('%Y-%m-%d')})\n\n"
        f"Simulated backend (calibrated on this host); trained on cpu-50x4 with the default "
        f"settings, seeds {args.seeds}; greedy placements (no best-of-k) on {args.tasks} "
        f"held-out tasks per suite; mean ratio to the per-task best heuristic (lower is "
        f"better).\n\n```\n{table}\n```\n"
    )
    write_text_atomic(RESULTS, text)
    print(text)


if __name__ == "__main__":
    main()
