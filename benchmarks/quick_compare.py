"""A quick reading of the learned planner against the heuristics on one suite, real kernels.

Run: .venv/bin/python benchmarks/quick_compare.py [--model RUN/model.pt] [--suite cpu-50x4]
         [--tasks 4] [--rounds 5] [--backend fbgemm] [--encoders exp,quantities]
Without --model it trains one on the suite's training tasks with the paper's defaults on the
same backend (about 2 minutes on fbgemm here), one per cost-network design with `--encoders`
(each planner of the model then named with its design, all measured in the same rounds).
Then random, the four heuristics, the pure
greedy policy, the default `dreamshard` planner and `search_analytic` place the suite's
held-out tasks, measured in interleaved rounds in one run (about 2 minutes for 4 tasks and
5 rounds). The full comparison, with TorchRec, the RNN, the MILP, a measured best-known search
and zero-shot suites, is `compare_planners.py` (about 40 minutes). Writes
benchmarks/results/quick_compare.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from benchmarks.parts.models import train_for_run
from benchmarks.parts.report_files import host_note, write_report
from benchmarks.script_entry import run_script
from dreamshard.costs.backends import make_backend
from dreamshard.evaluation.evaluate import evaluate, evaluation_note, summary_table
from dreamshard.learn.model_file import load_model
from dreamshard.learn.train_config import COSTNET_ENCODERS, TrainConfig
from dreamshard.placement.registry import baseline_planners, named_planner
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.report import format_table
from dreamshard.state import state_dir

RESULTS = Path(__file__).parent / "results" / "quick_compare.md"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a trained model (default: train one here)")
    parser.add_argument("--suite", default="cpu-50x4")
    parser.add_argument("--tasks", type=int, default=4, help="held-out tasks")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--backend", default="fbgemm", choices=["fbgemm", "simulated"])
    parser.add_argument(
        "--encoders",
        default=TrainConfig.costnet_encoder,
        help="cost-network designs to train when no --model, comma-separated (default "
        f"{TrainConfig.costnet_encoder})",
    )
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    encoders = args.encoders.split(",")
    if unknown := set(encoders) - set(COSTNET_ENCODERS):
        parser.error(f"unknown design {sorted(unknown)}; choose from {', '.join(COSTNET_ENCODERS)}")
    torch.set_num_threads(1)  # small networks; the fbgemm CPU backward is serial anyway
    began = time.monotonic()
    if args.model:
        models, note = {"": load_model(args.model)}, args.model
    else:
        models, notes = {}, []
        for encoder in encoders:
            out = state_dir() / "quick_compare" / f"model-{args.backend}-{encoder}"
            config = TrainConfig(
                suite=args.suite, backend=args.backend, out=str(out), costnet_encoder=encoder
            )
            name = f" ({encoder})" if len(encoders) > 1 else ""
            models[name], trained = train_for_run(config, lambda line: print(line, flush=True))
            notes.append(trained)
        note = "; ".join(notes)
    planners = baseline_planners()
    for name, model in models.items():
        planners["policy greedy" + name] = named_planner("dreamshard", model, samples=0)
        planners["dreamshard" + name] = named_planner("dreamshard", model)
    planners["search_analytic"] = named_planner("search_analytic")
    tasks = make_suite(parse_suite_name(args.suite, 1, args.tasks)).test_tasks
    evaluation = evaluate(tasks, planners, make_backend(args.backend), rounds=args.rounds)
    header, rows = summary_table(evaluation)
    report = "\n\n".join(
        [
            f"# Quick comparison on {args.suite} ({time.strftime('%Y-%m-%d')})",
            f"{host_note()}. Model: {note}. Held-out tasks of the suite the "
            f"model was trained on; {(time.monotonic() - began) / 60:.1f} min in all. "
            f"Command: `benchmarks/quick_compare.py {' '.join(argv or [])}`.",
            "```\n" + format_table(header, rows) + "\n```",
            evaluation_note(evaluation),
        ]
    )
    print(report, flush=True)
    write_report(args.out, report)
    return report


if __name__ == "__main__":
    run_script(main, sys.argv[1:])
