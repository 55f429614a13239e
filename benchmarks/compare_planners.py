"""Every planner side by side on measured cost: one command, one interleaved run, one report.

Run (from a clean checkout; `--model` saves the 5-minute training on fbgemm):
    .venv/bin/python benchmarks/compare_planners.py --model RUN/model.pt
        [--suites cpu-50x4,cpu-100x4,cpu-100x8,cpu-200x8] [--tasks 1] [--rounds 5]
        [--search-budget 40] [--rnn RNN.pt] [--backend fbgemm] [--out REPORT.md]
Smoke run: --backend simulated --train-backend simulated --train-iterations 2 --rounds 2

Time on a quiet 2-core CPU host, fbgemm: one measurement takes about 2 s (cpu-50x4), 3 s
(cpu-100x4), 3.5 s (cpu-100x8), 8.5 s (cpu-200x8); a task costs its ~10 distinct placements
measured once to screen, the search budget, and ~10 x --rounds: about 90 measurements with the
defaults, so about 30 min for the four suites at one task each (each further task per suite
adds about 25 min), plus training without --model (5+ min).

Planners: random, the four greedy heuristics, TorchRec's planner (with its own reservation,
and without it on the same caps as ours), the RNN placer (trained for the model's device
count; "n/a" elsewhere), dreamshard, dreamshard_search, the MILP on the cost network's
single-table costs, and the best known placement: every other planner's placement of the task
measured once (a screening pass), then `local_search` from the cheapest, scored by real
measurements within a budget per task. Its neighbours are many, so in each batch of 64 only the
2 the cost network ranks best are measured (the network proposes, the hardware decides).
The search's own measurements are kept out of the ratios (winner's curse): its result is
measured again with everything else.

All placements of all suites are measured in ONE interleaved run (`dreamshard.evaluation.evaluate`),
`--rounds` rounds; identical placements share one measurement per round. Ratios are paired
within rounds (geometric mean over rounds per task, then over tasks; min-max over tasks):
(a) vs the strongest fixed heuristic of the suite, (b) vs the per-task best heuristic, (c) vs
the best known: per task, the placement with the lowest mean cost in these rounds (the
search's result when its re-measurement confirms it, else whichever planner's was cheaper).
Writes the report (`--out`, printed too) with raw results beside it (.json, .csv).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from best_known import BEST_KNOWN, BestKnown
from planners_report import render, torchrec_version, write_raw

from dreamshard.costs.backends import make_backend
from dreamshard.costs.dataset import CostDataset, hardware, versions
from dreamshard.errors import DreamshardError
from dreamshard.evaluation.evaluate import evaluate
from dreamshard.evaluation.results import Evaluation
from dreamshard.files import write_text_atomic
from dreamshard.learn.model_file import DreamShardModel, load_model
from dreamshard.learn.rnn import RnnPlacer, load_rnn, rnn_place, train_rnn
from dreamshard.learn.rnn_config import RnnTrainConfig
from dreamshard.learn.train import TrainConfig, train
from dreamshard.methods import named_planner
from dreamshard.placement.heuristics import PLANNERS
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.planners.milp import MilpResult, solve_milp
from dreamshard.planners.torchrec_planner import torchrec_place
from dreamshard.state import state_dir
from dreamshard.tables.features import feature_matrix

RESULTS = Path(__file__).parent / "results" / "planners.md"
SUITES = "cpu-50x4,cpu-100x4,cpu-100x8,cpu-200x8"
MILP_GAP = 1e-3  # "optimal" within 0.1%: far below the cost network's own error


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a trained DreamShard model (default: train one here)")
    parser.add_argument(
        "--train-backend",
        default="fbgemm",
        choices=["fbgemm", "simulated"],
        help="backend to train on when --model is absent",
    )
    parser.add_argument("--train-iterations", type=int, default=TrainConfig.iterations)
    parser.add_argument("--rnn", help="a trained RNN placer (default: train one here)")
    parser.add_argument(
        "--rnn-updates",
        type=int,
        help="REINFORCE updates of the RNN trained here (default: as many as the model's policy)",
    )
    parser.add_argument("--suites", default=SUITES)
    parser.add_argument(
        "--tasks", type=int, default=1, help="held-out tasks per suite (~25 min each)"
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="interleaved rounds (5+ to resolve 5%% differences)"
    )
    parser.add_argument(
        "--search-budget",
        type=int,
        default=40,
        help="measurements per task for the best known search",
    )
    parser.add_argument("--milp-seconds", type=float, default=10.0)
    parser.add_argument("--backend", default="fbgemm", choices=["fbgemm", "simulated"])
    parser.add_argument("--out", default=str(RESULTS), help="the report (.json, .csv beside)")
    parser.add_argument(
        "--resume", action="store_true", help="reuse the stored measurements (default: fresh)"
    )
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def model_for(args: argparse.Namespace, log) -> tuple[DreamShardModel, str]:
    if args.model:
        model = load_model(args.model)
        return model, f"{args.model} (trained on {model.metadata.get('suite', '?')})"
    out = state_dir() / "compare_planners" / f"model-{args.train_backend}"
    log(f"no --model: training one on cpu-50x4 with the {args.train_backend} backend in {out}")
    start = time.monotonic()
    config = TrainConfig(
        suite="cpu-50x4", backend=args.train_backend, out=str(out), iterations=args.train_iterations
    )
    model = train(config, log=log)
    minutes = (time.monotonic() - start) / 60
    return model, (
        f"trained by this run on cpu-50x4 with the {args.train_backend} backend, "
        f"{config.iterations} iterations ({minutes:.1f} min, {out}/model.pt)"
    )


def rnn_for(args: argparse.Namespace, model: DreamShardModel, log) -> tuple[RnnPlacer, str]:
    if args.rnn:
        placer = load_rnn(args.rnn)
        return placer, f"{args.rnn} ({placer.num_devices} devices)"
    config = RnnTrainConfig(
        suite=model.metadata.get("suite", "cpu-50x4"), updates=args.rnn_updates, seed=args.seed
    )
    log(f"no --rnn: training one on {config.suite} against the model's cost network")
    start = time.monotonic()
    placer = train_rnn(model, config, log=log)
    return placer, (
        f"trained by this run on {placer.metadata['train']['suite']} against the model's cost "
        f"network, {placer.metadata['budget']} ({time.monotonic() - start:.0f} s)"
    )


@torch.no_grad()
def single_table_costs(model: DreamShardModel, task: PlacementTask) -> np.ndarray:
    """The cost network's predicted cost (ms) of each table alone on a device: the MILP's costs.

    The sum of the per-device heads (fwd_comp, bwd_comm, bwd_comp) on the table's encoding, the
    order the policy places tables in; floored at a thousandth of the largest (a head may go
    below zero for a tiny table).
    """
    costnet = model.costnet
    encoded = costnet.encoder(torch.from_numpy(feature_matrix(task.tables)))
    costs = (costnet.device_costs(encoded).sum(-1) * costnet.scale).double().numpy()
    return np.maximum(costs, 1e-3 * costs.max())


def make_planners(model, placer, best_known: BestKnown, milp_seconds: float, milp_log: dict):
    def rnn(task: PlacementTask, seed: int) -> Placement:
        if task.num_devices != placer.num_devices:
            raise DreamshardError(f"n/a: trained for {placer.num_devices} devices")
        return rnn_place(task, placer, seed)

    def milp(task: PlacementTask, seed: int) -> Placement:
        costs = single_table_costs(model, task)
        result: MilpResult = solve_milp(task, costs, milp_seconds, rel_gap=MILP_GAP)
        milp_log[task.name] = result
        if result.placement is None:
            raise DreamshardError(f"no placement: {result.status} after {result.seconds:.1f} s")
        return result.placement

    planners = dict(PLANNERS)  # random and the four heuristics
    planners |= {
        "torchrec": lambda task, seed: torchrec_place(task, seed),
        "torchrec (no reserve)": lambda task, seed: torchrec_place(task, seed, reserve=False),
        "rnn": rnn,
        "dreamshard": named_planner("dreamshard", model),
        "dreamshard_search": named_planner("dreamshard_search", model),
        "milp": milp,
    }
    planners = {name: best_known.recorded(name, fn) for name, fn in planners.items()}
    planners[BEST_KNOWN] = best_known
    return planners


@dataclass
class Run:
    """One benchmark run: the interleaved evaluation and what the report says beside it."""

    evaluation: Evaluation
    suites: dict[str, list[PlacementTask]]
    model_suite: str
    notes: dict[str, str]  # model, rnn, backend settings
    search_log: dict[str, dict]
    milp_log: dict[str, MilpResult]
    seconds: dict[str, float]  # per phase
    measurements: dict[str, int]  # screening and search, interleaved rounds


def run_benchmark(args: argparse.Namespace, log) -> Run:
    began = time.monotonic()
    model, model_note = model_for(args, log)
    trained = time.monotonic()
    placer, rnn_note = rnn_for(args, model, log)
    ready = time.monotonic()
    backend = make_backend(args.backend)
    suites = {
        name: make_suite(parse_suite_name(name, 1, args.tasks)).test_tasks
        for name in args.suites.split(",")
    }
    tasks = [task for suite_tasks in suites.values() for task in suite_tasks]
    best_known = BestKnown(backend, model, args.search_budget, args.seed)
    milp_log: dict[str, MilpResult] = {}
    planners = make_planners(model, placer, best_known, args.milp_seconds, milp_log)
    dataset = fresh_dataset(args)
    evaluation = evaluate(
        tasks,
        planners,
        backend,
        dataset,
        args.rounds,
        "compare_planners",
        seed=args.seed,
        declines=(DreamshardError,),
    )
    measurements = {
        "screening and search": sum(s["screened"] + s["measured"] for s in best_known.log.values()),
        "interleaved rounds": len(dataset),
    }
    dataset.close()
    searching = float(evaluation.plan_seconds[:, -1].sum())
    planning = float(evaluation.plan_seconds.sum()) - searching
    seconds = {
        "model": trained - began,
        "rnn": ready - trained,
        "planning": planning,
        "best known search": searching,
        "interleaved rounds": time.monotonic() - ready - planning - searching,
    }
    notes = {"model": model_note, "rnn": rnn_note, "backend": str(backend.config())}
    return Run(
        evaluation,
        suites,
        model.metadata.get("suite", ""),
        notes,
        best_known.log,
        milp_log,
        seconds,
        measurements,
    )


def fresh_dataset(args: argparse.Namespace) -> CostDataset:
    """This script's own measurement store, emptied unless --resume (drift: one run compares)."""
    path = state_dir() / "compare_planners" / f"costs-{args.backend}.sqlite"
    if not args.resume:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    return CostDataset(path)


def main(argv: list[str] | None = None) -> str:
    """Run the benchmark, write the report and its raw results, print it; returns the report."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small networks: 2-3x faster on a busy 2-core host (fbgemm: 1 too)
    try:
        run = run_benchmark(args, log=lambda line: print(line, flush=True))
    finally:
        torch.set_num_threads(threads)
    command = " ".join(["benchmarks/compare_planners.py", *argv])
    report, summaries = render(run, args, command)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, report + "\n")
    write_raw(
        run.evaluation,
        out,
        {
            "suites": {name: [t.name for t in tasks] for name, tasks in run.suites.items()},
            "summary_by_suite": summaries,
            "best_known_search": run.search_log,
            "milp": {
                name: {k: v for k, v in vars(r).items() if k != "placement"}
                for name, r in run.milp_log.items()
            },
            "settings": vars(args),
            "command": command,
            "notes": run.notes,
            "hardware": hardware(),
            "versions": versions() | {"torchrec": torchrec_version()},
            "measurements": run.measurements,
            "seconds": run.seconds,
        },
    )
    print(report, flush=True)
    print(f"wrote {out} (+ .json, .csv)", flush=True)
    return report


if __name__ == "__main__":
    try:
        main()
    except DreamshardError as exc:
        raise SystemExit(f"compare_planners: error: {exc}") from None
