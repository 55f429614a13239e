"""The paper's scale on exact costs: all 428 test-pool `dlrm` tables on 32, 64 and 128 devices.

Run: .venv/bin/python benchmarks/paper_scale.py [--model RUN/model.pt] [--pool-seeds 0,1,2]
         [--devices 16,32,64,128] [--train-suite dlrm-50x8] [--no-torchrec]

Costs: the simulated backend with the `nvlink` topology (exact, so one round). Tasks: for each
pool seed, the test half of the `dlrm` profile's 856-table pool (`suites.split_pool`; seed 0 is
the split every named suite uses, other seeds draw fresh pools of the same profile), all 428
tables on each device count, fp16, each device capped by planning_speed's rule (the larger of
1.3x the even share and 1.02x the largest table, which sets it in most tasks).
16 devices is a control below the paper's counts, where no single table sets the step time.

Without --model a model is trained first on the training half of pool seed 0 (`--train-suite`,
simulated, nvlink, `--warm-start` placements and `--costnet-steps` per iteration; 1.5 min),
so every task is zero-shot: tables, device counts and task sizes it never saw.

Planners per task: random, the four heuristics, the pure greedy policy (`dreamshard`, samples
0), the default `dreamshard` planner, `search_analytic` (searching the nvlink analytic model,
the backend's own costs) and TorchRec's planner on the same caps (no reservation; skipped if
not installed). Ratios: geometric mean over a device count's tasks [bootstrap 95% interval
over tasks]. Also each task's costliest table alone on a device (a floor no table-wise
placement beats here), plan times, the default planner's winning candidates, and speed on
all 856 tables on 128 devices (planning_speed's task). Progress on stderr; writes
benchmarks/results/paper_scale.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.parts.balance import costliest_table_ms
from benchmarks.parts.models import given_or_trained
from benchmarks.parts.ratio_tables import interval_cell
from benchmarks.parts.report_files import fenced_table, host_note, write_report
from benchmarks.planning_speed import timed
from benchmarks.script_entry import run_script
from dreamshard.cli.train import config_from, training_options
from dreamshard.costs.backends import describe_costs
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.errors import DreamshardError
from dreamshard.evaluation.evaluate import evaluate, evaluation_note, summary_table
from dreamshard.evaluation.results import Evaluation
from dreamshard.learn.coverage import outside_training
from dreamshard.learn.model_file import DreamShardModel
from dreamshard.learn.train_config import TrainConfig
from dreamshard.placement.registry import baseline_planners, named_planner
from dreamshard.placement.suites import SCALE_SLACK, capped_task, pool_tasks
from dreamshard.placement.tasks import check_legal
from dreamshard.planners.search import search_analytic_place
from dreamshard.report import format_table
from dreamshard.state import state_dir
from dreamshard.tables.synthetic import generate_tables

RESULTS = Path(__file__).parent / "results" / "paper_scale.md"
TOPOLOGY = "nvlink"
COLUMNS = ("policy greedy", "dreamshard", "search_analytic", "torchrec")


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def model_for(args: argparse.Namespace) -> tuple[DreamShardModel, str]:
    out = str(state_dir() / "paper_scale" / "model")
    config = config_from(
        args, suite=args.train_suite, backend="simulated", topology=TOPOLOGY, out=out
    )
    model, note = given_or_trained(args.model, config, say)
    return model, note if args.model else f"{note} (training half of pool seed 0)"


def planners_for(model: DreamShardModel, backend: SimulatedBackend, torchrec: bool) -> dict:
    planners = baseline_planners()
    planners["policy greedy"] = named_planner("dreamshard", model, samples=0)
    planners["dreamshard"] = named_planner("dreamshard", model)
    # the stock planner searches the cpu-gloo model; here it gets the topology being measured
    planners["search_analytic"] = lambda task, seed: search_analytic_place(
        task, seed, backend=backend
    )
    if torchrec:
        from dreamshard.integrations.torchrec_planner import torchrec_place

        planners["torchrec"] = lambda task, seed: torchrec_place(task, seed, reserve=False)
    return planners


def device_sections(
    evaluation: Evaluation, backend: SimulatedBackend, model: DreamShardModel
) -> tuple[list[list], list[list], list[str]]:
    """Per device count: a headline row, a plan-time row and a section with every planner."""
    columns = [c for c in COLUMNS if c in evaluation.planners]
    headline, times, sections = [], [], []
    parts = evaluation.groups([task.num_devices for task in evaluation.tasks])
    for d, part in sorted(parts.items()):
        vs_best = part.ratios("per_task_best_heuristic")
        vs_strongest = part.ratios("strongest_heuristic")
        best_heuristic = part.reference_costs("per_task_best_heuristic").mean(axis=0)
        floors = np.array([costliest_table_ms(task, backend) for task in part.tasks])
        j = part.planners.index("dreamshard")
        label = f"{d}" + (" (control)" if d < 32 else "")
        headline.append(
            [
                label,
                len(part.tasks),
                interval_cell(best_heuristic / floors),
                *(interval_cell(vs_best[:, part.planners.index(c)]) for c in columns),
                f"{interval_cell(vs_strongest[:, j])} ({part.strongest_heuristic()})",
            ]
        )
        seconds = part.plan_seconds.mean(axis=0)
        times.append([label, *(f"{seconds[part.planners.index(c)]:.2f}" for c in columns)])
        header, rows = summary_table(part)
        coverage = outside_training(part.tasks[0], model.metadata.get("ranges"))
        sections.append(
            f"## {d} devices: {len(part.tasks)} task(s) of {len(part.tasks[0].tables)} tables\n\n"
            "```\n"
            + format_table(header, rows)
            + "\n```\n\n"
            + evaluation_note(part)
            + f" The default planner picked: {part.picked(j) or '-'} ("
            + "; ".join(f"{row[j].candidate}" for row in part.placements if row[j] is not None)
            + "). Per task, the per-task "
            "best heuristic's cost over the costliest table alone: "
            + ", ".join(f"{c / f:.3f}" for c, f in zip(best_heuristic, floors))
            + f". The default planner's placement costs more than the per-task best heuristic's, "
            f"one of its own candidates, on {int((vs_best[:, j] > 1 + 1e-9).sum())} of "
            f"{len(part.tasks)} tasks. Model coverage (first task): "
            + (coverage or "inside what the model was trained on")
            + "."
            + "".join(
                f"\n\n{part.planners[k]} declined {part.tasks[t].name}: {why}"
                for (t, k), why in part.declined.items()
            )
        )
    return headline, times, sections


def speed_section(model: DreamShardModel, backend: SimulatedBackend, repeats: int) -> str:
    """Wall time per planner on all 856 tables on 128 devices (planning_speed's task)."""
    task = capped_task(generate_tables("dlrm", 856, 0), 128, "dlrm-856x128")
    planners = {
        "dreamshard greedy (samples=0)": named_planner("dreamshard", model, samples=0),
        "dreamshard (default)": named_planner("dreamshard", model),
        "search_analytic (nvlink)": lambda t, s: search_analytic_place(t, s, backend=backend),
    }
    rows = []
    for label, planner in planners.items():
        say(f"speed at 856x128: {label}")
        seconds, why = timed(lambda p=planner: check_legal(task, p(task, 0)), repeats)
        rows.append([label, f"{seconds:.3f}" if seconds is not None else f"failed: {why}"])
    return (
        f"## Speed: all {len(task.tables)} tables on {task.num_devices} devices\n\n"
        f"planning_speed's task (pool seed 0, cap {task.memory_cap_bytes / 2**30:.2f} GiB: "
        f"the larger of {SCALE_SLACK}x the even share and 1.02x the largest table), this run's "
        f"model; median wall time of {repeats} runs after one untimed run, one torch thread. "
        "TorchRec's planner on the same task: `benchmarks/planning_speed.py` "
        "(`benchmarks/results/planning_speed.md`).\n\n```\n"
        + format_table(["planner", "seconds"], rows)
        + "\n```"
    )


def numbers(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Writes benchmarks/results/paper_scale.md (or --out); progress on stderr.",
    )
    parser.add_argument("--model", help="a trained model (default: train one, see --train-suite)")
    parser.add_argument(
        "--pool-seeds",
        type=numbers,
        default=list(range(8)),
        help="pools whose test half is placed (default 0-7: 8 tasks per device count)",
    )
    parser.add_argument(
        "--devices",
        type=numbers,
        default=[16, 32, 64, 128],
        help="device counts (default 16,32,64,128; 16 is a control)",
    )
    parser.add_argument("--train-suite", default="dlrm-50x8", help="default dlrm-50x8")
    defaults = TrainConfig(warm_start=1000, costnet_steps=1000)  # the model trained here
    training_options(parser, ("warm_start", "costnet_steps", "seed"), defaults)
    parser.add_argument("--no-torchrec", action="store_true", help="leave TorchRec's planner out")
    parser.add_argument("--speed-repeats", type=int, default=3, help="0: no speed section")
    parser.add_argument("--out", default=str(RESULTS))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> str:
    args = parse_args(argv)
    torch.set_num_threads(1)  # small networks: faster on one thread here
    began = time.monotonic()
    # NumPy's BLAS threads are not torch's: on a busy host they decide the planners' times
    blas = os.environ.get("OPENBLAS_NUM_THREADS", "unset")
    threads = f"OPENBLAS_NUM_THREADS {blas}, load average {os.getloadavg()[0]:.1f} at the start"
    backend = SimulatedBackend(topology=TOPOLOGY)
    model, model_note = model_for(args)
    torchrec = not args.no_torchrec
    if torchrec:
        try:
            from dreamshard.integrations.torchrec_planner import require_torchrec

            require_torchrec()
        except DreamshardError as exc:
            say(f"TorchRec's planner left out: {exc}")
            torchrec = False
    tasks = pool_tasks(args.pool_seeds, args.devices)
    say(f"placing {len(tasks)} tasks")
    evaluation = evaluate(
        tasks,
        planners_for(model, backend, torchrec),
        backend,
        rounds=1,
        seed=args.seed,
        declines=(DreamshardError,),
    )
    headline, times, sections = device_sections(evaluation, backend, model)
    ranges = model.metadata.get("ranges")
    outside = sum(outside_training(task, ranges) is not None for task in tasks)
    largest_sets = sum(
        task.memory_cap_bytes == int(1.02 * task.table_bytes().max()) for task in tasks
    )
    speed = [speed_section(model, backend, args.speed_repeats)] if args.speed_repeats else []
    columns = [c for c in COLUMNS if c in evaluation.planners]
    report = "\n\n".join(
        [
            f"# The paper's scale on exact costs ({time.strftime('%Y-%m-%d')})",
            f"{host_note()}. Costs: {describe_costs(backend.config())}; "
            "exact, one round. Tasks: the test half (428 tables) of the `dlrm` pool for pool "
            f"seeds {','.join(map(str, args.pool_seeds))} on "
            f"{', '.join(map(str, args.devices))} devices, fp16, caps by planning_speed's rule "
            f"(the larger of {SCALE_SLACK}x the even share and 1.02x the largest table; the "
            "largest "
            f"table sets it in {largest_sets} of {len(tasks)} tasks, where memory binds little "
            "and another slack gives the same task). "
            f"Model: {model_note}. **Zero-shot**: {outside} of {len(tasks)} "
            "tasks lie outside the model's training ranges (`learn/coverage.py`; see each "
            "section). "
            f"search_analytic searches the {TOPOLOGY} analytic model (the backend's own costs); "
            + (
                "TorchRec plans on the same caps (no reservation). "
                if torchrec
                else "TorchRec's planner left out. "
            )
            + "Ratios: geometric mean over "
            "tasks [bootstrap 95% interval over tasks]; below 1 is better. "
            f"Plan times in process, one torch thread, {threads} on {os.cpu_count()} cores. "
            f"Wall time {(time.monotonic() - began) / 60:.1f} min. Command: "
            f"`{' '.join(['.venv/bin/python benchmarks/paper_scale.py', *(argv or [])])}`.",
            "## Headline: vs the per-task best heuristic\n\n"
            "'best heuristic / floor': the per-task best heuristic's cost over the costliest "
            "table alone on a device. Near 1, one table sets the step time and no table-wise "
            "placement can do better.\n\n"
            + fenced_table(
                " | ".join(["devices | tasks | best heuristic / floor", *columns])
                + " | dreamshard vs strongest heuristic",
                headline,
            ),
            "## Plan time, mean seconds per task\n\n"
            + fenced_table(" | ".join(["devices", *columns]), times),
            *sections,
            *speed,
        ]
    )
    print(report)
    write_report(args.out, report)
    return report


if __name__ == "__main__":
    run_script(main, sys.argv[1:])
