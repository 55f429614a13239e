"""Every planner side by side on measured cost: one command, one interleaved run, one report.

Run (from a clean checkout; `--model` saves the 5-minute training on fbgemm):
    .venv/bin/python benchmarks/compare_planners.py --model RUN/model.pt
        [--suites cpu-50x4,cpu-100x4,cpu-100x8,cpu-200x8] [--tasks 1] [--rounds 5]
        [--search-budget 40] [--refine-seconds 30] [--rnn RNN.pt] [--backend fbgemm]
        [--out REPORT.md] [--resume]
Smoke run: --backend simulated --train-backend simulated --train-iterations 2 --rounds 2
Issue 28's target run (`--split auto` against the strongest heuristic, 12 tasks), its rows only:
    --tasks 3 --planners search_analytic,"dreamshard (split auto)"
Issue 12's target run (8 tasks, about 80 min with --model): --tasks 2 --rounds 5

Time on a quiet 2-core CPU host, fbgemm: one measurement takes about 2 s (cpu-50x4), 3 s
(cpu-100x4), 3.5 s (cpu-100x8), 8.5 s (cpu-200x8); a task costs its ~10 distinct placements
measured once to screen, the search budget, the refinement's ~7 candidates x 3 rounds (its
minimum, which 30 s does not exceed on fbgemm) and ~10 x --rounds: about 120 measurements with
the defaults, so about 35 min for the four suites at one task each (each further task per suite
adds about 35 min), plus planning (~4 min per 8 tasks: the MILP's 10 s, the searches' 5 s) and
training without --model (5+ min).

Planners: random, the four greedy heuristics, TorchRec's planner (with its own reservation,
and without it on the same caps as ours), the RNN placer (trained for the model's device
count; "n/a" elsewhere), search_analytic (local search on the calibrated analytic model: the
strong non-learned baseline), dreamshard, dreamshard_search, dreamshard_refined (dreamshard's
top candidates and the heuristics measured on the same backend for --refine-seconds per task,
`dreamshard place --refine`; the pick stays unless another is cheaper beyond the noise), the
MILP on the cost network's single-table costs, and the best known placement
(`dreamshard/benchmarks/parts/best_known.py`: every other planner's placement screened, then local
search scored by real measurements on the cost network's picks), and "dreamshard (split auto)":
the default planner as users run it (`--split auto`: tables split where the model predicts a
gain; issue 28's target row). The search's and the
refinement's own measurements are kept out of the ratios (winner's curse): their results are
measured again with everything else. All others compare whole tables (`--split none`).

All placements of all suites are measured in ONE interleaved run
(`dreamshard.evaluation.evaluate`), `--rounds` rounds; identical placements share one
measurement per round. Ratios are paired within rounds (geometric mean over rounds per task,
then over tasks; min-max over tasks):
(a) vs the strongest fixed heuristic of the suite, (b) vs the per-task best heuristic, (c) vs
the best known: per task, the placement with the lowest mean cost in these rounds (the
search's result when its re-measurement confirms it, else whichever planner's was cheaper).
The issue's targets are printed first, each with a bootstrap interval over tasks and rounds.
Writes the report (`--out`, printed too) with raw results beside it (.json, .csv).

`--resume` goes on from where a killed run stopped, in a later session too: every placement is
stored as it is made and every measurement under its round (`evaluation.stored`), so a
resumed run measures nothing twice (same options needed; without --resume the stores are emptied).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from benchmarks.parts.best_known import BEST_KNOWN, BestKnown
from benchmarks.parts.milp import MilpResult, solve_milp
from benchmarks.parts.models import rnn_for_run, train_for_run, trained_on
from benchmarks.parts.report_files import torchrec_version, write_evaluation, write_report
from benchmarks.parts.stored import REFINE_ROUND, SEARCH_ROUND, Measurements, PlanStore
from benchmarks.planners_report import REFINED, SPLIT_AUTO, render
from benchmarks.script_entry import run_script
from dreamshard.cli.train import FINE_TUNING, fine_tuning, training_options
from dreamshard.costs.backends import make_backend
from dreamshard.costs.dataset import CostDataset, hardware, versions
from dreamshard.errors import DreamshardError
from dreamshard.evaluation.evaluate import evaluate
from dreamshard.evaluation.refine import refine
from dreamshard.evaluation.results import Evaluation
from dreamshard.learn.model_file import DreamShardModel, load_model
from dreamshard.learn.policy import single_table_costs as alone_costs
from dreamshard.learn.rnn import RnnPlacer, load_rnn, rnn_place
from dreamshard.learn.rnn_config import RnnTrainConfig
from dreamshard.learn.train import TrainConfig
from dreamshard.placement.registry import baseline_planners, method_names, named_planner
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.state import state_dir

RESULTS = Path(__file__).parent / "results" / "planners.md"
SUITES = "cpu-50x4,cpu-100x4,cpu-100x8,cpu-200x8"
SUITE_NAME = "compare_planners"  # the dataset records' suite
MILP_GAP = 1e-3  # "optimal" within 0.1%: far below the cost network's own error
RNN = "rnn"  # the row of the RNN placer, trained by the run unless --rnn names one
OPTIONAL = (  # the other rows, in report order (`--planners`)
    "torchrec",
    "torchrec (no reserve)",
    RNN,
    "search_analytic",
    SPLIT_AUTO,
    "dreamshard_search",
    REFINED,
    "milp",
    BEST_KNOWN,
)


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
    training_options(parser, FINE_TUNING)  # how the model trained here fits its cost network
    parser.add_argument("--rnn", help="a trained RNN placer (default: train one here)")
    parser.add_argument(
        "--rnn-updates",
        type=int,
        help="REINFORCE updates of the RNN trained here (default: as many as the model's policy)",
    )
    parser.add_argument("--suites", default=SUITES)
    parser.add_argument(
        "--tasks", type=int, default=1, help="held-out tasks per suite (~35 min each)"
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
    parser.add_argument(
        "--refine-seconds",
        type=float,
        default=30.0,
        help="measured refinement per task for dreamshard_refined (at least 3 rounds)",
    )
    parser.add_argument("--milp-seconds", type=float, default=10.0)
    parser.add_argument(
        "--planners",
        default="all",
        help="the planners compared, comma-separated (default all: "
        + ", ".join(OPTIONAL)
        + "); random, the four heuristics and dreamshard are always compared. Leaving out "
        "best_known, dreamshard_refined and rnn saves their measurements and training",
    )
    parser.add_argument("--backend", default="fbgemm", choices=["fbgemm", "simulated"])
    parser.add_argument("--out", default=str(RESULTS), help="the report (.json, .csv beside)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="go on from the stored placements and measurements of a killed run (default: fresh)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.planners = chosen_planners(args.planners)
    return args


def chosen_planners(names: str) -> list[str]:
    """The optional planners named (all of `OPTIONAL` for "all"), in report order."""
    if names == "all":
        return list(OPTIONAL)
    wanted = {name.strip() for name in names.split(",") if name.strip()}
    always = {*method_names("baseline", "heuristic"), "dreamshard"}  # every run compares them
    unknown = sorted(wanted - set(OPTIONAL) - always)
    if unknown:
        raise DreamshardError(
            f"--planners: unknown {', '.join(unknown)}; choose among {', '.join(OPTIONAL)}"
        )
    return [name for name in OPTIONAL if name in wanted]


def model_for(args: argparse.Namespace, log) -> tuple[DreamShardModel, str]:
    if args.model:
        model = load_model(args.model)
        return model, f"{args.model} ({trained_on(model)})"
    out = state_dir() / "compare_planners" / f"model-{args.train_backend}"
    if args.resume and (out / "model.pt").is_file():
        log(f"--resume: the model an earlier session trained, {out}/model.pt")
        return load_model(out / "model.pt"), (
            f"trained by an earlier session of this run on cpu-50x4 with the "
            f"{args.train_backend} backend, {args.train_iterations} iterations ({out}/model.pt)"
        )
    log(f"no --model: training one on cpu-50x4 with the {args.train_backend} backend in {out}")
    config = TrainConfig(
        suite="cpu-50x4",
        backend=args.train_backend,
        out=str(out),
        iterations=args.train_iterations,
        **fine_tuning(args, args.train_backend),
    )
    return train_for_run(config, log, fresh=not args.resume)


def rnn_for(args: argparse.Namespace, model: DreamShardModel, log) -> tuple[RnnPlacer | None, str]:
    if RNN not in args.planners:
        return None, "not compared (--planners)"
    if args.rnn:
        placer = load_rnn(args.rnn)
        return placer, f"{args.rnn} ({placer.num_devices} devices)"
    suite = model.metadata.get("suite", "cpu-50x4")
    config = RnnTrainConfig(suite=suite, updates=args.rnn_updates, seed=args.seed)
    path = state_dir() / "compare_planners" / "rnn.pt"
    return rnn_for_run(model, config, path, args.resume, log)


@torch.no_grad()
def single_table_costs(model: DreamShardModel, task: PlacementTask) -> np.ndarray:
    """The cost network's predicted cost (ms) of each table alone on a device: the MILP's costs.

    The sum of the per-device heads (fwd_comp, bwd_comm, bwd_comp) on the table's encoding, the
    order the policy places tables in; floored at a thousandth of the largest (a head may go
    below zero for a tiny table).
    """
    costs = alone_costs(model.costnet, task.tables)[1].astype(np.float64) * float(
        model.costnet.scale
    )
    return np.maximum(costs, 1e-3 * costs.max())


def make_planners(args, model, placer, best_known: BestKnown, refine_backend, store: PlanStore):
    """Every planner compared, in report order, each kept in `store` (best_known last)."""
    milp_log, refine_log = store.log("milp"), store.log("refine")

    def rnn(task: PlacementTask, seed: int) -> Placement:
        if task.num_devices != placer.num_devices:
            raise DreamshardError(f"n/a: trained for {placer.num_devices} devices")
        return rnn_place(task, placer, seed)

    def milp(task: PlacementTask, seed: int) -> Placement:
        costs = single_table_costs(model, task)
        result: MilpResult = solve_milp(task, costs, args.milp_seconds, rel_gap=MILP_GAP)
        milp_log[task.name] = {
            "status": result.status,
            "placed": result.placement is not None,
            **{k: float(getattr(result, k)) for k in ("objective", "bound", "gap", "seconds")},
        }
        if result.placement is None:
            raise DreamshardError(f"no placement: {result.status} after {result.seconds:.1f} s")
        return result.placement

    def dreamshard_refined(task: PlacementTask, seed: int) -> Placement:
        found = refine(
            task, "dreamshard", refine_backend, args.refine_seconds, model, seed=seed, split="none"
        )
        pick, won = found.candidates[0], found.candidates[found.winner]
        refine_log[task.name] = {
            "candidates": [c.name for c in found.candidates],
            "rounds": found.rounds,
            "measured": found.rounds * len(found.candidates),
            "seconds": found.seconds,
            "winner": won.name,
            "pick_median_ms": pick.median_ms,
            "winner_median_ms": won.median_ms,
            "winner_vs_pick": won.ratio,
            "reason": found.reason,
        }
        return found.placement

    planners = baseline_planners()  # random and the four heuristics
    planners |= {
        "torchrec": named_planner("torchrec"),
        "torchrec (no reserve)": named_planner("torchrec", reserve=False),
        "rnn": rnn,
        "search_analytic": named_planner("search_analytic", split="none"),
        "dreamshard": named_planner("dreamshard", model, split="none"),
        SPLIT_AUTO: named_planner("dreamshard", model, split="auto"),
        "dreamshard_search": named_planner("dreamshard_search", model, split="none"),
        REFINED: dreamshard_refined,
        "milp": milp,
    }
    planners = {
        name: best_known.recorded(name, store.planner(name, fn))
        for name, fn in planners.items()
        if name not in OPTIONAL or name in args.planners
    }
    if BEST_KNOWN in args.planners:
        planners[BEST_KNOWN] = store.planner(BEST_KNOWN, best_known)
    return planners


@dataclass
class Run:
    """One benchmark run: the interleaved evaluation and what the report says beside it."""

    evaluation: Evaluation
    suites: dict[str, list[PlacementTask]]
    model_suite: str
    notes: dict[str, str]  # model, rnn, backend settings
    logs: dict[str, dict[str, dict]]  # best_known, milp, refine: per task
    seconds: dict[str, float]  # per phase
    measurements: dict[str, int]  # per purpose, measured by this session or read back


def planning_settings(args: argparse.Namespace) -> dict:
    """What the stored placements depend on: a resumed run must use the same."""
    model = args.model or f"trained here on {args.train_backend}, {args.train_iterations} iter"
    return {
        "model": model,
        "rnn": args.rnn or f"trained here, {args.rnn_updates or 'default'} updates",
        "search_budget": args.search_budget,
        "refine_seconds": args.refine_seconds,
        "milp_seconds": args.milp_seconds,
        "seed": args.seed,
        "planners": args.planners,
    }


def run_benchmark(args: argparse.Namespace, log) -> Run:
    began = time.monotonic()
    store, dataset = run_stores(args)
    try:
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
        measurements = Measurements(backend, dataset, SUITE_NAME)
        searching = measurements.backend_for("screening and search", SEARCH_ROUND)
        best_known = BestKnown(
            searching, model, args.search_budget, args.seed, store.log(BEST_KNOWN)
        )
        refining = measurements.backend_for("refinement", REFINE_ROUND)
        planners = make_planners(args, model, placer, best_known, refining, store)
        evaluation = evaluate(
            tasks,
            planners,
            backend,
            rounds=args.rounds,
            seed=args.seed,
            measure=lambda job: measurements.measure(job, "interleaved rounds"),
            declines=(DreamshardError,),
        )
    finally:
        dataset.close()
    evaluated = time.monotonic()
    planned_now = float(evaluation.plan_seconds.sum())  # this session's part of the evaluation
    store.restore_seconds(evaluation)
    by_planner = evaluation.plan_seconds.sum(axis=0)
    seconds_of = dict(zip(evaluation.planners, by_planner.tolist()))
    searching_s, refining_s = seconds_of.get(BEST_KNOWN, 0.0), seconds_of.get(REFINED, 0.0)
    seconds = {
        "model": trained - began,
        "rnn": ready - trained,
        "planning": float(by_planner.sum()) - searching_s - refining_s,
        "best known search": searching_s,
        "refinement": refining_s,
        "interleaved rounds": evaluated - ready - planned_now,
    }
    counts = dict(measurements.measured)
    if measurements.read_back:
        counts["read back (--resume)"] = sum(measurements.read_back.values())
    notes = {"model": model_note, "rnn": rnn_note, "backend": str(backend.config())}
    logs = {kind: store.log(kind) for kind in (BEST_KNOWN, "milp", "refine")}
    return Run(evaluation, suites, model.metadata.get("suite", ""), notes, logs, seconds, counts)


def run_stores(args: argparse.Namespace) -> tuple[PlanStore, CostDataset]:
    """This script's own placements and measurements, emptied unless --resume (drift: one run
    compares; `evaluation.stored` says what is kept)."""
    folder = state_dir() / "compare_planners"
    folder.mkdir(parents=True, exist_ok=True)
    costs = folder / f"costs-{args.backend}.sqlite"
    plans = folder / f"plans-{args.backend}.json"
    if not args.resume:
        for path in (costs, Path(f"{costs}-wal"), Path(f"{costs}-shm"), plans):
            path.unlink(missing_ok=True)
    store = PlanStore(plans, planning_settings(args), args.resume)
    return store, CostDataset(costs)


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
    write_report(args.out, report)
    write_evaluation(
        run.evaluation,
        args.out,
        {
            "suites": {name: [t.name for t in tasks] for name, tasks in run.suites.items()},
            "summary_by_suite": summaries,
            "best_known_search": run.logs[BEST_KNOWN],
            "refinement": run.logs["refine"],
            "milp": run.logs["milp"],
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
    return report


if __name__ == "__main__":
    run_script(main)
