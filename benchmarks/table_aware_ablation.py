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

from benchmarks.script_entry import run_script
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.evaluation.evaluate import evaluate
from dreamshard.evaluation.rounds import geometric_mean
from dreamshard.files import write_text_atomic
from dreamshard.learn.train import train
from dreamshard.learn.train_config import TrainConfig
from dreamshard.placement.registry import baseline_planners, named_planner
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
    variants = (
        ("paper (no table features)", {}),
        ("table-aware", {"table_aware": True}),
        ("paper, 100 policy updates per iteration", {"policy_updates": 100}),
    )
    models = {}
    for label, changes in variants:
        for seed in args.seeds:
            with tempfile.TemporaryDirectory() as out:
                config = TrainConfig(backend="simulated", out=out, seed=seed, **changes)
                models[(label, seed)] = train(config, log=lambda *_: None)
    ratios = {label: {} for label, _ in variants}  # label: suite: ratios over tasks and seeds
    for s, suite_tasks in tasks.items():
        baselines = baseline_planners()
        planners = baselines | {
            f"{label} #{seed}": named_planner("dreamshard", model, samples=0)
            for (label, seed), model in models.items()
        }
        evaluation = evaluate(suite_tasks, planners, backend, rounds=1)  # exact: one round
        per_task = evaluation.ratios("per_task_best_heuristic")
        for (label, _seed), j in zip(models, range(len(baselines), len(planners))):
            ratios[label].setdefault(s, []).extend(per_task[:, j])
    rows = [
        [label, *(f"{geometric_mean(np.array(ratios[label][s])):.3f}" for s in SUITES)]
        for label, _ in variants
    ]
    table = format_table(["policy", *(f"{s} vs per-task best heuristic" for s in SUITES)], rows)
    text = (
        f"# Table-aware policy ablation ({time.strftime('%Y-%m-%d')})\n\n"
        f"Simulated backend (calibrated on this host); trained on cpu-50x4 with the default "
        f"settings, seeds {args.seeds}; greedy placements (no best-of-k) on {args.tasks} "
        f"held-out tasks per suite; geometric mean over tasks and seeds of the ratio to the "
        f"per-task best heuristic (lower is better).\n\n```\n{table}\n```\n"
    )
    write_text_atomic(RESULTS, text)
    print(text)


if __name__ == "__main__":
    run_script(main)
