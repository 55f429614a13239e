"""What each part of the default planner buys, on exact costs (issue 28).

Run: .venv/bin/python benchmarks/ablation.py [--suites cpu-50x4,cpu-100x4,dlrm-50x8]
         [--tasks 8] [--ood-seeds 3] [--model RUN/model.pt] [--out FILE]

Tasks, fixed before the run: each suite's first `--tasks` held-out test tasks, and the
out-of-distribution families (`evaluation/ood_families.py`) at seeds 0..N-1. Judge: the
calibrated simulated backend (exact, one round, cpu-gloo exchange modeled). The trained model:
`--model`, else one trained by this run (`dreamshard train --suite cpu-50x4 --backend
simulated --out .dreamshard/ablation/model`, seed 0, from the shipped network as every default
run starts); its cost network is the fixed network of every learned row, and the untrained
policy is a fresh one from the same seed on it. Rows: `evaluation/ablation.py`. Ratio: a row's
cost over the per-task best heuristic's; geometric mean [bootstrap 95% interval over tasks].
Writes benchmarks/results/ablation.md and its .json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.evaluation.ablation import ablation_rows, ratios, run_ablation
from dreamshard.evaluation.models import given_or_trained
from dreamshard.evaluation.ood_families import ood_tasks
from dreamshard.evaluation.ratio_tables import interval_cell
from dreamshard.evaluation.report_files import fenced_table, host_note, write_report
from dreamshard.learn.model_file import shipped_model
from dreamshard.learn.policy import PlacementPolicy
from dreamshard.learn.train_config import TrainConfig
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.planners.dreamshard_planner import one_thread

RESULTS = Path(__file__).parent / "results" / "ablation.md"
MODEL_RUN = ".dreamshard/ablation/model"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suites", default="cpu-50x4,cpu-100x4,dlrm-50x8")
    parser.add_argument("--tasks", type=int, default=8, help="held-out tasks per suite")
    parser.add_argument("--ood-seeds", type=int, default=3, help="seeds per family")
    parser.add_argument("--model", help="trained model (default: trained by this run)")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    config = TrainConfig(suite="cpu-50x4", backend="simulated", out=MODEL_RUN, seed=0)
    model, note = given_or_trained(args.model, config, say)
    torch.manual_seed(config.seed)
    untrained = PlacementPolicy(table_aware=config.table_aware, lookahead=config.lookahead)
    rows = ablation_rows(model, untrained.eval(), shipped_model())
    groups = {}
    for suite in args.suites.split(","):
        groups[suite] = make_suite(parse_suite_name(suite, 1, args.tasks)).test_tasks
    groups["out of distribution"] = ood_tasks(seeds=range(args.ood_seeds))
    judge = SimulatedBackend()
    results = {}
    with one_thread():
        for name, tasks in groups.items():
            results[name] = run_ablation(tasks, rows, lambda t, p: judge.measure(t, p).overall, say)
    write_report(args.out, report(results, note), {"model": note, "groups": results})


def report(results: dict, note: str) -> str:
    names = list(next(iter(results.values()))["costs"][0])
    table = []
    for name in names:
        cells = [interval_cell(ratios(r["costs"])[name]) for r in results.values()]
        every = [x for r in results.values() for x in ratios(r["costs"])[name]]
        table.append((name, *cells, interval_cell(every)))
    columns = " | ".join(["row", *results, "all"])
    return "\n".join(
        [
            "# What each part of the default planner buys (exact costs)",
            "",
            f"Command: `.venv/bin/python benchmarks/ablation.py {' '.join(sys.argv[1:])}`",
            "",
            f"{host_note()}. Judge: the calibrated simulated backend (exact, one round; exchange "
            "modeled, cpu-gloo), fp16, whole tables. Tasks per column: "
            + ", ".join(f"{k} {len(r['tasks'])}" for k, r in results.items())
            + f". Model: {note}.",
            "Cells: cost / the per-task best heuristic's, geometric mean [bootstrap 95% interval "
            "over tasks]; lower is better.",
            "",
            fenced_table(columns, table),
        ]
    )


if __name__ == "__main__":
    main()
