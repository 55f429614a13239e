"""What each part of the default planner buys, on exact costs or on real kernels (issue 28).

Run: .venv/bin/python benchmarks/ablation.py [--suites cpu-50x4,cpu-100x4,dlrm-50x8]
         [--tasks 8] [--ood-seeds 3] [--model RUN/model.pt] [--out FILE]
     .venv/bin/python benchmarks/ablation.py --backend fbgemm [--ood-seeds 3] [--rounds 5]

Tasks, fixed before the run: each suite's first `--tasks` held-out test tasks, and the
out-of-distribution families (`evaluation/ood_families.py`) at seeds 0..N-1. Judge: the
calibrated simulated backend (exact, one round, cpu-gloo exchange modeled). The trained model:
`--model`, else one trained by this run (`dreamshard train --suite cpu-50x4 --backend
simulated --out .dreamshard/ablation/model`, seed 0, from the shipped network as every default
run starts); its cost network is the fixed network of every learned row, and the untrained
policy is a fresh one from the same seed on it. Rows: `benchmarks/parts/ablation.py`. Ratio: a row's
cost over the per-task best heuristic's; geometric mean [bootstrap 95% interval over tasks].
Writes benchmarks/results/ablation.md and its .json.

`--backend fbgemm`: the same rows timed on real kernels on this host, the trained model trained
on this host's kernels (`dreamshard train --suite cpu-50x4 --backend fbgemm --out
.dreamshard/ablation/fbgemm-model`, seed 0, from the shipped network, ~10 min) unless `--model`
is given, on the out-of-distribution
families at the scale a CPU can time (`ood_tasks(scale="cpu")`: seeds 0..N-1 of each family,
default 12 tasks of 50-200 tables on 4-16 devices; no suites), every distinct placement
measured once per round in `--rounds` interleaved rounds (`evaluation.evaluate`); ratios paired
within rounds, intervals over tasks and rounds (`rounds.bootstrap_paired`). About 70 min here
with the defaults (a round measures ~10 placements of each task: ~13 min). Writes
benchmarks/results/ablation_fbgemm.md, its .json (every placement and measurement) and .csv.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np
import torch

from benchmarks.parts.ablation import (
    ablation_rows,
    measured_ratios,
    measured_rows,
    measured_spearman,
    ratios,
    run_ablation,
)
from benchmarks.parts.models import TRAINED_BY_RUN, given_or_trained, training_note
from benchmarks.parts.ood_families import ood_tasks
from benchmarks.parts.ratio_tables import interval_cell
from benchmarks.parts.report_files import (
    fenced_table,
    host_note,
    write_evaluation,
    write_report,
)
from benchmarks.script_entry import run_script
from dreamshard.cli.args import positive
from dreamshard.cli.train import FINE_TUNING, fine_tuning, training_options
from dreamshard.costs.backends import make_backend
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.evaluation.evaluate import evaluate
from dreamshard.evaluation.results import Evaluation
from dreamshard.learn.model_file import resolve_model, shipped_model
from dreamshard.learn.policy import PlacementPolicy
from dreamshard.learn.train_config import TrainConfig
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.planners.dreamshard_planner import one_thread

RESULTS = Path(__file__).parent / "results" / "ablation.md"
RESULTS_FBGEMM = Path(__file__).parent / "results" / "ablation_fbgemm.md"
MODEL_RUN = ".dreamshard/ablation/model"
MODEL_RUN_FBGEMM = ".dreamshard/ablation/fbgemm-model"
TARGET_KERNELS = (0.95, 1.00)  # the default planner's ratio, and its interval's upper end


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--backend",
        default="simulated",
        choices=["simulated", "fbgemm"],
        help="simulated: exact costs (the default); fbgemm: real kernels on this host, on the "
        "out-of-distribution families at cpu scale only",
    )
    parser.add_argument("--suites", default="cpu-50x4,cpu-100x4,dlrm-50x8", help="(simulated only)")
    parser.add_argument(
        "--tasks", type=int, default=8, help="held-out tasks per suite (simulated only)"
    )
    parser.add_argument("--ood-seeds", type=positive(int), default=3, help="seeds per family")
    parser.add_argument(
        "--rounds", type=positive(int), default=5, help="interleaved rounds (fbgemm only)"
    )
    parser.add_argument("--model", help="trained model (default: trained by this run)")
    training_options(parser, FINE_TUNING)  # how the model trained here fits its cost network
    parser.add_argument(
        "--rerender",
        action="store_true",
        help="(fbgemm) write the report again from the run's .json beside --out, measuring "
        "and training nothing (the trained model: --model, else the one the run trained)",
    )
    parser.add_argument("--out", help=f"report (default {RESULTS} or, fbgemm, {RESULTS_FBGEMM})")
    args = parser.parse_args()
    if args.rerender and args.backend != "fbgemm":
        parser.error("--rerender re-renders a --backend fbgemm run only")
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    fitting = fine_tuning(args, args.backend)
    if args.backend == "fbgemm":  # the learned rows on a network fine-tuned on this host
        config = TrainConfig(
            suite="cpu-50x4", backend="fbgemm", out=MODEL_RUN_FBGEMM, seed=0, **fitting
        )
    else:
        config = TrainConfig(
            suite="cpu-50x4", backend="simulated", out=MODEL_RUN, seed=0, **fitting
        )
    if args.rerender:  # no training: the run's own model
        model = resolve_model(args.model or str(Path(config.out) / "model.pt"))
        note = ""
    else:
        model, note = given_or_trained(args.model, config, say)
    torch.manual_seed(config.seed)
    untrained = PlacementPolicy(table_aware=config.table_aware, lookahead=config.lookahead)
    shipped = shipped_model()
    rows = ablation_rows(model, untrained.eval(), shipped)
    if args.backend == "fbgemm":
        kernels(args, rows, {"trained": model, "shipped": shipped}, note)
        return
    groups = {}
    for suite in args.suites.split(","):
        groups[suite] = make_suite(parse_suite_name(suite, 1, args.tasks)).test_tasks
    groups["out of distribution"] = ood_tasks(seeds=range(args.ood_seeds))
    judge = SimulatedBackend()
    results = {}
    with one_thread():
        for name, tasks in groups.items():
            results[name] = run_ablation(tasks, rows, lambda t, p: judge.measure(t, p).overall, say)
    write_report(args.out or RESULTS, report(results, note), {"model": note, "groups": results})


def recorded_note(note: str, model) -> str:
    """The run's sentence on its model, its settings re-told from what the model file records
    (train's settings as fitted: the loss `auto` resolved) where the run trained it."""
    head, _, tail = note.rpartition("; ")
    recorded = model.metadata.get("config")
    if not head.startswith(TRAINED_BY_RUN) or not isinstance(recorded, dict):
        return note
    known = {f.name for f in fields(TrainConfig)}
    values = {k: v for k, v in recorded.items() if k in known}
    values["warm_start_devices"] = tuple(values.get("warm_start_devices", ()))
    return f"{TRAINED_BY_RUN}{training_note(TrainConfig(**values))}; {tail}"


def kernels(args: argparse.Namespace, rows: dict, models: dict, note: str) -> None:
    """The real-kernel half: measure every row's plans in interleaved rounds and report, or
    (`--rerender`) report again from the run's stored evaluation."""
    out = Path(args.out or RESULTS_FBGEMM)
    if args.rerender:
        stored = out.with_suffix(".json")
        if not stored.is_file():
            raise SystemExit(f"ablation: error: no run to re-render: {stored} does not exist")
        data = json.loads(stored.read_text())
        command = data["command"].removeprefix("benchmarks/ablation.py").strip()
        note = recorded_note(data["model"], models["trained"])
        note += "; this report re-rendered from its .json (`--rerender`)"
        write_report(out, measured_report(Evaluation.from_dict(data), note, models, command))
        return
    backend = make_backend("fbgemm")
    tasks = ood_tasks(seeds=range(args.ood_seeds), scale="cpu")
    with one_thread():
        evaluation = evaluate(tasks, measured_rows(rows), backend, rounds=args.rounds)
    command = " ".join(sys.argv[1:])
    write_evaluation(evaluation, out, {"model": note, "command": command})
    write_report(out, measured_report(evaluation, note, models, command))


def measured_report(evaluation: Evaluation, note: str, models: dict, command: str) -> str:
    """The real-kernel half: each row's paired ratio to the per-task best heuristic, and how
    well each model's cost network ranks the placements measured."""
    rounds, tasks = evaluation.costs.shape[:2]
    plan_ms = dict(zip(measured_ratios(evaluation), evaluation.plan_seconds.mean(axis=0) * 1000))
    table = [
        (name, f"{ratio:.3f} [{low:.3f}, {high:.3f}]", f"{np.nanmax(per_task):.3f}", f"{ms:.0f}")
        for (name, (ratio, low, high, _)), per_task, ms in zip(
            measured_ratios(evaluation).items(),
            evaluation.ratios("per_task_best_heuristic").T,
            plan_ms.values(),
        )
    ]
    return "\n".join(
        [
            "# What each part of the default planner buys (real kernels)",
            "",
            f"Command: `.venv/bin/python benchmarks/ablation.py {command}`",
            "",
            f"{host_note()}. Costs: {evaluation.costs_made}. Whole tables.",
            f"Tasks, fixed before the run: {tasks} out-of-distribution tasks at cpu scale "
            '(`evaluation/ood_families.py`, `ood_tasks(scale="cpu")`): '
            + ", ".join(t.name for t in evaluation.tasks)
            + f". {rounds} interleaved rounds; every distinct placement measured once a round. "
            f"Model: {note}.",
            "Ratio: a row's cost over the per-task best heuristic's (the heuristic with the "
            "lowest mean over the rounds), paired within rounds; geometric mean over rounds and "
            "tasks [bootstrap 95% interval, tasks and rounds resampled]; worst task; planning "
            "time per task. Lower is better.",
            "",
            fenced_table("row | vs per-task best heuristic | worst task | plan ms", table),
            "",
            f"Target (issue 28, real kernels): the default planner at most {TARGET_KERNELS[0]} "
            f"with the interval's upper end at most {TARGET_KERNELS[1]}: "
            + "; ".join(
                f"{name} {r:.3f} [{lo:.3f}, {hi:.3f}] "
                + ("met" if r <= TARGET_KERNELS[0] and hi <= TARGET_KERNELS[1] else "not met")
                for name, (r, lo, hi, _) in measured_ratios(evaluation).items()
                if name.startswith("default planner")
            )
            + ".",
            "",
            "The cost networks on these measurements: the Spearman correlation, within a task, "
            "of a network's predicted overall with the measured mean over its distinct "
            "placements, mean over tasks: "
            + "; ".join(
                f"{name} {np.nanmean(measured_spearman(evaluation, m)):.3f}"
                for name, m in models.items()
            )
            + ".",
        ]
    )


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
    run_script(main)
