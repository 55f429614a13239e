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
import csv
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from dreamshard.costs.backends import make_backend
from dreamshard.costs.dataset import CostDataset, hardware, versions
from dreamshard.errors import DreamshardError
from dreamshard.evaluation.evaluate import Evaluation, evaluate
from dreamshard.evaluation.rounds import geometric_mean
from dreamshard.files import write_text_atomic
from dreamshard.learn.model_file import DreamShardModel, load_model
from dreamshard.learn.rnn import RnnPlacer, load_rnn, rnn_place, train_rnn
from dreamshard.learn.rnn_config import RnnTrainConfig
from dreamshard.learn.train import TrainConfig, train
from dreamshard.methods import place
from dreamshard.placement.heuristics import HEURISTIC_KEYS
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.planners.milp import MilpResult, solve_milp
from dreamshard.planners.search import costnet_scorer, local_search
from dreamshard.planners.torchrec_planner import torchrec_place
from dreamshard.progress import Progress
from dreamshard.report import format_table
from dreamshard.state import state_dir
from dreamshard.tables.features import feature_matrix

RESULTS = Path(__file__).parent / "results" / "planners.md"
SUITES = "cpu-50x4,cpu-100x4,cpu-100x8,cpu-200x8"
SEARCH_BATCH = 64  # neighbours ranked by the cost network per batch ...
SEARCH_SHORTLIST = 2  # ... of which this many are measured
BEST_KNOWN = "best_known"
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
    parser.add_argument("--rnn-updates", type=int, default=RnnTrainConfig.updates)
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
    log(
        f"no --rnn: training one on {config.suite} against the model's cost network "
        f"({config.updates} updates)"
    )
    start = time.monotonic()
    placer = train_rnn(model, config, log=log)
    return placer, (
        f"trained by this run on {config.suite} against the model's cost network, "
        f"{config.updates} updates ({time.monotonic() - start:.0f} s)"
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


class BestKnown:
    """The best known placement of a task: screen the others' placements, then measured search.

    `recorded(name, planner)` wraps every other planner so its placements are kept; `evaluate`
    places a task with all planners in order, this one last, so they are all there.
    """

    def __init__(self, backend, model: DreamShardModel, budget: int, seed: int):
        self.backend, self.model, self.budget, self.seed = backend, model, budget, seed
        self.proposals: dict[str, dict[str, Placement]] = {}
        self.log: dict[str, dict] = {}

    def recorded(self, name: str, planner):
        def plan(task: PlacementTask) -> Placement:
            placement = planner(task)
            self.proposals.setdefault(task.name, {})[name] = placement
            return placement

        return plan

    def __call__(self, task: PlacementTask) -> Placement:
        proposals = self.proposals[task.name]
        unique = {p.devices: name for name, p in reversed(proposals.items())}  # first name wins
        progress = Progress(len(unique) + self.budget, f"best known {task.name}")
        known: dict[tuple[int, ...], float] = {}
        rng = np.random.default_rng(self.seed)
        for i in rng.permutation(len(unique)):
            devices = list(unique)[i]
            known[devices] = self.backend.measure(task, Placement(devices)).overall
            progress.step(f"screening {unique[devices]}: {known[devices]:.2f} ms")
        start = min(known, key=known.__getitem__)
        scorer = MeasuredScorer(
            self.backend, task, costnet_scorer(self.model, task), known, self.budget, progress
        )
        found = local_search(task, Placement(start), scorer, seed=self.seed, batch=SEARCH_BATCH)
        progress.close()
        self.log[task.name] = {
            "start": unique[start],
            "start_ms": known[start],
            "steps": found.steps,
            "measured": scorer.used,
            "search_ms": found.cost,
            "screened": len(unique),
        }
        return Placement(found.placement.devices, BEST_KNOWN)


class MeasuredScorer:
    """A `local_search` scorer: real measurements, at most `budget`, on the cost network's picks.

    Of each batch, the `SEARCH_SHORTLIST` placements with the lowest predicted cost are measured
    (once each: `known` remembers); the rest score infinity, so only measured ones are accepted.
    """

    def __init__(self, backend, task, predict, known: dict, budget: int, progress: Progress):
        self.backend, self.task, self.predict, self.known = backend, task, predict, known
        self.budget, self.progress, self.used = budget, progress, 0

    def __call__(self, placements: list[Placement]) -> list[float]:
        costs = [self.known.get(p.devices, float("inf")) for p in placements]
        if self.used >= self.budget:
            return costs
        fresh = [i for i, p in enumerate(placements) if p.devices not in self.known]
        predicted = self.predict([placements[i] for i in fresh]) if fresh else []
        for k in np.argsort(predicted, kind="stable")[:SEARCH_SHORTLIST]:
            if self.used >= self.budget:
                break
            i = fresh[int(k)]
            costs[i] = self.backend.measure(self.task, placements[i]).overall
            self.known[placements[i].devices] = costs[i]
            self.used += 1
            best = min(self.known.values())
            self.progress.step(f"search: {costs[i]:.2f} ms (best so far {best:.2f})")
        return costs


def make_planners(model, placer, best_known: BestKnown, milp_seconds: float, milp_log: dict):
    def rnn(task: PlacementTask) -> Placement:
        if task.num_devices != placer.num_devices:
            raise DreamshardError(f"n/a: trained for {placer.num_devices} devices")
        return rnn_place(task, placer)

    def milp(task: PlacementTask) -> Placement:
        costs = single_table_costs(model, task)
        result: MilpResult = solve_milp(task, costs, milp_seconds, rel_gap=MILP_GAP)
        milp_log[task.name] = result
        if result.placement is None:
            raise DreamshardError(f"no placement: {result.status} after {result.seconds:.1f} s")
        return result.placement

    planners = {
        name: (lambda task, name=name: place(task, name)) for name in ("random", *HEURISTIC_KEYS)
    }
    planners |= {
        "torchrec": lambda task: torchrec_place(task),
        "torchrec (no reserve)": lambda task: torchrec_place(task, reserve=False),
        "rnn": rnn,
        "dreamshard": lambda task: place(task, "dreamshard", model=model),
        "dreamshard_search": lambda task: place(task, "dreamshard_search", model=model),
        "milp": milp,
    }
    planners = {name: best_known.recorded(name, fn) for name, fn in planners.items()}
    planners[BEST_KNOWN] = best_known
    return planners


# ---------------------------------------------------------------------------------- report


def suite_view(evaluation: Evaluation, indices: list[int]) -> Evaluation:
    """The part of the run that holds the given tasks (one suite)."""
    where = {t: k for k, t in enumerate(indices)}
    return Evaluation(
        [evaluation.tasks[t] for t in indices],
        evaluation.planners,
        [evaluation.placements[t] for t in indices],
        evaluation.costs[:, indices],
        [evaluation.breakdowns[t] for t in indices],
        evaluation.plan_seconds[indices],
        evaluation.backend,
        {(where[t], j): why for (t, j), why in evaluation.declined.items() if t in where},
    )


def references(view: Evaluation) -> dict[str, np.ndarray]:
    """Per-round reference costs [round, task]: (a), (b), (c) of the module docstring."""
    strongest = view.costs[:, :, view.planners.index(view.strongest_heuristic())]
    best = np.nanargmin(view.costs.mean(axis=0), axis=1)  # per task, over every placement
    best_known = np.stack([view.costs[:, t, j] for t, j in enumerate(best)], axis=1)
    return {
        "strongest": strongest,
        "per_task_best": view.per_task_best_heuristic(),
        "best_known": best_known,
    }


def summarise(ratios: np.ndarray) -> dict | None:
    """Geometric mean and min-max over the tasks a planner placed (NaN: declined)."""
    ok = ratios[~np.isnan(ratios)]
    if not ok.size:
        return None
    return {
        "mean": float(geometric_mean(ok)),
        "min": float(ok.min()),
        "max": float(ok.max()),
        "tasks": int(ok.size),
    }


def cell(summary: dict | None, total: int) -> str:
    if summary is None:
        return "-"
    text = f"{summary['mean']:.3f} ({summary['min']:.2f}-{summary['max']:.2f})"
    return text if summary["tasks"] == total else f"{text} [{summary['tasks']}/{total}]"


TORCHREC_SAYS = "torchrec's planner rejects this task "


def short_reason(reason: str) -> str:
    kind = re.match(re.escape(TORCHREC_SAYS) + r"\((\w+)\)", reason)
    return f"rejected ({kind.group(1)})" if kind else reason


def suite_section(name: str, view: Evaluation, model_suite: str) -> tuple[str, dict]:
    refs = references(view)
    ratios = {key: view.ratios_to(ref) for key, ref in refs.items()}  # [task, planner] each
    n = len(view.tasks)
    rows, summary = [], {}
    for j, planner in enumerate(view.planners):
        placed = [t for t in range(n) if view.placements[t][j] is not None]
        declined = {short_reason(view.declined[(t, j)]) for t in range(n) if t not in placed}
        status = f"{len(placed)}/{n}" + (f": {'; '.join(sorted(declined))}" if declined else "")
        summary[planner] = {key: summarise(r[:, j]) for key, r in ratios.items()}
        summary[planner]["placed"] = len(placed)
        mean_ms = float(np.mean(view.costs[:, placed, j])) if placed else "-"
        plan_s = float(view.plan_seconds[placed, j].mean()) if placed else "-"
        rows.append(
            [planner, status, mean_ms, *(cell(summary[planner][key], n) for key in ratios), plan_s]
        )
    table = format_table(
        [
            "planner",
            "placed",
            "mean ms",
            "(a) vs strongest",
            "(b) vs per-task best",
            "(c) vs best known",
            "plan s",
        ],
        rows,
    )
    zero_shot = "" if name == model_suite else " (zero-shot)"
    text = (
        f"## {name}{zero_shot}: {n} held-out task{'s' * (n != 1)}, strongest fixed heuristic "
        f"{view.strongest_heuristic()}\n\n```\n{table}\n```"
    )
    return text, summary


def paired(view: Evaluation, planner: str, reference: str) -> np.ndarray:
    """Per task: geometric mean over rounds of planner / reference (NaN where either declined)."""
    ref = view.costs[:, :, view.planners.index(reference)]
    return view.ratios_to(ref)[:, view.planners.index(planner)]


HEADLINE = {  # column: reference, a planner or one of `references`
    "vs torchrec (no reserve)": "torchrec (no reserve)",
    "vs torchrec": "torchrec",
    "vs strongest heuristic": "strongest",
    "vs per-task best heuristic": "per_task_best",
    "vs best known": "best_known",
}


def dreamshard_ratios(view: Evaluation) -> dict[str, np.ndarray]:
    """Per headline column, dreamshard's ratio per task (NaN where the reference declined)."""
    refs = references(view)
    j = view.planners.index("dreamshard")
    return {
        label: (view.ratios_to(refs[ref])[:, j] if ref in refs else paired(view, "dreamshard", ref))
        for label, ref in HEADLINE.items()
    }


def headline(evaluation: Evaluation, views: dict[str, Evaluation]) -> str:
    """Where dreamshard stands, per suite and over every task."""
    per_suite = {name: dreamshard_ratios(view) for name, view in views.items()}
    per_suite["all tasks"] = {
        label: np.concatenate([s[label] for s in per_suite.values()]) for label in HEADLINE
    }
    rows = [
        [name, *(cell(summarise(v), len(v)) for v in values.values())]
        for name, values in per_suite.items()
    ]
    torchrec = evaluation.planners.index("torchrec")
    rejected = sum(p[torchrec] is None for p in evaluation.placements)
    return (
        "## Headline: dreamshard's measured cost relative to ...\n\n```\n"
        + format_table(["suite", *HEADLINE], rows)
        + "\n```\n\n"
        f"TorchRec's planner with its own reservation declined {rejected} of "
        f"{len(evaluation.tasks)} tasks; `-` or [k/n]: compared only where both placed."
    )


def declines_section(evaluation: Evaluation) -> str:
    rows = [
        [
            evaluation.tasks[t].name,
            evaluation.planners[j],
            reason.split("; ")[0].split(", counting")[0].replace(TORCHREC_SAYS, ""),
        ]
        for (t, j), reason in sorted(evaluation.declined.items())
    ]
    if not rows:
        return "## Declined tasks\n\nNone."
    return "## Declined tasks\n\n```\n" + format_table(["task", "planner", "why"], rows) + "\n```"


def milp_section(evaluation: Evaluation, milp_log: dict) -> str:
    j = evaluation.planners.index("milp")
    rows = []
    for t, task in enumerate(evaluation.tasks):
        r = milp_log[task.name]
        measured = float(np.mean(evaluation.costs[:, t, j])) if r.placement else "-"
        rows.append([task.name, r.status, r.gap, r.seconds, r.objective, measured])
    return (
        "## MILP on the cost network's single-table costs\n\nExact for the additive surrogate "
        "only (the max over devices of the sum of each table's predicted cost alone); the real "
        "cost is not additive, so its optimum bounds nothing measured.\n\n```\n"
        + format_table(
            ["task", "status", "gap", "seconds", "additive optimum ms", "measured mean ms"], rows
        )
        + "\n```"
    )


def search_section(evaluation: Evaluation, search_log: dict) -> str:
    j = evaluation.planners.index(BEST_KNOWN)
    rows = []
    for t, task in enumerate(evaluation.tasks):
        s = search_log[task.name]
        means = evaluation.costs[:, t].mean(axis=0)
        reference = "yes" if means[j] <= np.nanmin(means) else "no"  # ties: the same placement
        rows.append(
            [
                task.name,
                s["start"],
                s["start_ms"],
                s["steps"],
                s["measured"],
                s["search_ms"],
                float(means[j]),
                reference,
            ]
        )
    return (
        "## Best known: measured local search\n\nScreening: each distinct placement of the "
        "other planners measured once; the search starts from the cheapest. 'search ms' is the "
        "search's own best measurement, 'rounds ms' the mean of the independent interleaved "
        "rounds (the gap is the winner's curse); 'reference' says whether it was the best "
        "placement of the task in the rounds (else the cheaper planner's placement is the best "
        "known).\n\n```\n"
        + format_table(
            [
                "task",
                "start",
                "start ms",
                "steps",
                "measured",
                "search ms",
                "rounds ms",
                "reference",
            ],
            rows,
        )
        + "\n```"
    )


def write_raw(evaluation: Evaluation, out: Path, extra: dict) -> None:
    data = evaluation.to_dict() | extra
    write_text_atomic(out.with_suffix(".json"), json.dumps(data, indent=1, default=str) + "\n")
    csv_path = out.with_suffix(".csv")
    with open(csv_path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["task", "planner", "round", "overall_ms"])
        for t, task in enumerate(evaluation.tasks):
            for j, planner in enumerate(evaluation.planners):
                if evaluation.placements[t][j] is not None:
                    for r in range(evaluation.costs.shape[0]):
                        writer.writerow([task.name, planner, r, evaluation.costs[r, t, j]])


def torchrec_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torchrec")
    except PackageNotFoundError:
        return "not installed"


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


def render(run: Run, args: argparse.Namespace, command: str) -> tuple[str, dict]:
    """The markdown report, and the per-suite summaries for the JSON."""
    evaluation = run.evaluation
    views, sections, summaries, offset = {}, [], {}, 0
    for name, suite_tasks in run.suites.items():
        views[name] = suite_view(evaluation, list(range(offset, offset + len(suite_tasks))))
        offset += len(suite_tasks)
        text, summaries[name] = suite_section(name, views[name], run.model_suite)
        sections.append(text)
    phases = ", ".join(f"{k} {v / 60:.1f}" for k, v in run.seconds.items())
    counts = ", ".join(f"{k} {v}" for k, v in run.measurements.items())
    report = "\n\n".join(
        [
            f"# Planners compared on measured cost ({time.strftime('%Y-%m-%d')})",
            f"Host: {hardware()}; {versions()}; torchrec {torchrec_version()}. Backend "
            f"{args.backend}: {run.notes['backend']}.",
            f"Model: {run.notes['model']}. RNN: {run.notes['rnn']}. {args.tasks} held-out test "
            f"task(s) per suite, {args.rounds} interleaved rounds over all {len(evaluation.tasks)} "
            f"tasks and {len(evaluation.planners)} planners in one run; best known search budget "
            f"{args.search_budget} measurements per task; MILP time limit {args.milp_seconds:g} s. "
            f"Measurements: {counts}. Minutes: {phases}. Command: `{command}`.",
            (
                "Ratios paired within rounds: per task the geometric mean over rounds of cost /"
                " reference, then the geometric mean over tasks (min-max over tasks; [k/n] "
                "where a planner placed only k of n tasks). (a) the strongest fixed heuristic "
                "of the suite (best mean cost), (b) the per-task best heuristic, (c) the best "
                "known placement of the task (lowest mean cost in these rounds: the measured "
                "search's result, or a planner's placement where that was cheaper). 'plan s': "
                "planning time per task (best_known's includes its screening and search "
                "measurements). Below 1 is better than the reference."
            ),
            headline(evaluation, views),
            *sections,
            declines_section(evaluation),
            milp_section(evaluation, run.milp_log),
            search_section(evaluation, run.search_log),
        ]
    )
    return report, summaries


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
