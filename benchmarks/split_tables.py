"""Split tables on real kernels: what halving a width buys, and split plans beside table-wise ones.

Run: .venv/bin/python benchmarks/split_tables.py [--suites cpu-50x4,cpu-100x8] [--tasks 4]
         [--rounds 4] [--model PATH|URI] [--planners lookup,size_lookup,...,torchrec]
On the fbgemm backend in process (this host's CPU, fp32 weights, communication modeled by the
cpu-gloo topology), in interleaved rounds in one run (about 20 minutes with the defaults,
longer while other measurements hold the host; `--backend simulated` runs the same at toy
scale in seconds, for the test):

(a) the hottest table of the first suite's held-out tasks (its lookups x width against the
    task's mean device load), timed alone at width d, as its column shards of width d/2 and
    d/4, as both d/2 shards in one kernel, and as its first row half, all on the same trace;
(b) each planner's `--split none` and `--split auto` plans of the held-out tasks, variants of the
    heuristics' balance rule (unchecked, halving row-wise), and every task's tables timed alone (one
    kernel each). TorchRec's planner is a planner here too (when torchrec is installed): `torchrec`
    table-wise and `torchrec +split` with its own column-/row-wise choice, on the same memory cap as
    ours and with no storage reservation (`torchrec_place(reserve=False)`); `dreamshard +split` is
    reported against `torchrec +split` per suite and over all suites, as paired ratios on the tasks
    TorchRec places ([k/n]: a task TorchRec declines is counted, not measured).

The model of `dreamshard` is `--model`, else the registry's champion
(`models:/dreamshard-policy@champion`, where the state folder has a registry), else
`quick_compare`'s fbgemm model in the state folder, else one trained here on the simulated
backend (a minute). Writes benchmarks/results/split_tables.md and .json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path

import numpy as np
import torch

from dreamshard.costs.backends import describe_costs
from dreamshard.costs.comm import get_topology, transfer_ms
from dreamshard.costs.dataset import hardware, versions
from dreamshard.costs.fbgemm import FbgemmBackend
from dreamshard.costs.reference import normalised
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.costs.types import PlacementCost
from dreamshard.errors import DreamshardError
from dreamshard.evaluation.evaluate import mean_breakdown, place_all
from dreamshard.evaluation.results import Evaluation
from dreamshard.evaluation.rounds import geometric_mean, measure_interleaved
from dreamshard.files import write_json_atomic, write_text_atomic
from dreamshard.learn.train import train
from dreamshard.learn.train_config import TrainConfig
from dreamshard.methods import named_planner, resolve_model
from dreamshard.placement import heuristics
from dreamshard.placement.heuristics import HEURISTIC_KEYS
from dreamshard.placement.splitting import balance_splits, memory_splits, split_place
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import Placement, PlacementTask, placement_task
from dreamshard.planners.torchrec_planner import require_torchrec, torchrec_place
from dreamshard.progress import Progress
from dreamshard.report import format_table
from dreamshard.state import state_dir
from dreamshard.tables.shards import Split, split_table
from dreamshard.tables.table import Table

RESULTS = Path(__file__).parent / "results"
PLANNERS = ("dim", "size", "lookup", "size_lookup", "search_analytic", "dreamshard", "torchrec")
SPLIT = " +split"  # the name of a planner's --split auto plan
# Ours against TorchRec's planner on the same memory: (ours, TorchRec's); the first is the
# issue's target (at most TARGET_TORCHREC).
TORCHREC_PAIRS = (
    ("dreamshard" + SPLIT, "torchrec" + SPLIT),
    ("dreamshard", "torchrec"),
    ("dreamshard" + SPLIT, "torchrec"),
)
# The heuristics' balance rule as variants beside their `--split auto` (which keeps the rule's
# column halvings, or its tables cut row-wise over all devices, only where the analytic model
# rates them cheaper): the rule unchecked, and the rule halving row-wise with its own parts.
UNCHECKED = " +rule unchecked"
ROW_SPLIT = " +row rule"
ROW_RULE = ("lookup", "size_lookup")
TARGET_BOUND_TASKS, TARGET_BOUND, TARGET_HEURISTIC, TARGET_TORCHREC = 0.92, 1.03, 0.95, 0.95


class TorchRecDeclined(Exception):
    """TorchRec's planner declined a task (its reason): the task is counted, not measured."""


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(1)  # small networks; the fbgemm CPU backward is serial anyway
    began = time.monotonic()
    planners = args.planners.split(",")
    model, model_note = benchmark_model(args.model) if "dreamshard" in planners else (None, "")
    suites = [make_suite(parse_suite_name(s, 1, args.tasks)) for s in args.suites.split(",")]
    tasks = [t for s in suites for t in s.test_tasks]
    named, variants = named_planners(planners, args.rule_variants, model)
    placements, plan_seconds, declined = place_all(tasks, named, (TorchRecDeclined,))
    print(f"placed in {time.monotonic() - began:.0f} s", flush=True)

    hot = [(*hottest_table(s.test_tasks), s) for s in first_of_each_profile(suites)]
    widths = [width_items(table, task) for task, table, _ in hot]
    items, index = unique_items(tasks, placements)
    alone = [alone_item(task) for task in tasks]
    every = [*items, *alone, *(item for group in widths for _, item in group)]
    backend = FbgemmBackend() if args.backend == "fbgemm" else SimulatedBackend()
    raw, load_avg = measure_rounds(backend, every, args.rounds)
    full = raw if args.labels == "raw" else [[normalised(c) for c in row] for row in raw]
    evaluation = build_evaluation(
        tasks, named, placements, plan_seconds, declined, index, full, backend
    )
    results = {
        "command": "benchmarks/split_tables.py " + " ".join(argv or []),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "host": hardware(),
        "versions": versions(),
        "costs_made": describe_costs(backend.config()),
        "model": model_note,
        "rounds": args.rounds,
        "load_average": {
            "min": min(x[0] for x in load_avg),
            "max": max(x[0] for x in load_avg),
            "samples_1min": [round(x[0], 2) for x in load_avg],
        },
        "labels": args.labels,
        "reference_ms_per_round": reference_per_round(raw),
        "noise_cv": placement_noise(np.array([[c.overall for c in row] for row in full])),
        "noise_cv_raw": placement_noise(np.array([[c.overall for c in row] for row in raw])),
    }
    start = len(items) + len(alone)
    by_profile = []
    for (task, table, _), group in zip(hot, widths):
        by_profile.append(width_results(table, task, group, full_slice(full, start, len(group))))
        start += len(group)
    results["widths"] = by_profile[0]  # the first suite's profile
    results["widths_other_profiles"] = by_profile[1:]
    suite_of = [s.spec.name for s in suites for _ in s.test_tasks]
    alone_costs = full_slice(full, len(items), len(alone))
    noise = results["noise_cv"]
    results.update(
        analyse(evaluation, planners, variants, suite_of, full, index, alone_costs, noise)
    )
    results["minutes"] = (time.monotonic() - began) / 60
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out.with_suffix(".json"), results)
    report = render(results)
    write_text_atomic(out.with_suffix(".md"), report)
    print(report, flush=True)
    return results


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", default="cpu-50x4,cpu-100x8")
    parser.add_argument("--tasks", type=int, default=4, help="held-out tasks per suite")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds")
    parser.add_argument("--planners", default=",".join(PLANNERS))
    parser.add_argument(
        "--unchecked-rule",
        help="heuristics also run with the balance rule unchecked (default: the heuristics "
        "among --planners; '' for none)",
    )
    parser.add_argument(
        "--row-rule",
        help="heuristics also run with the balance rule halving row-wise (default: lookup, "
        "size_lookup among --planners; '' for none)",
    )
    parser.add_argument("--model", help="dreamshard's model (default: see the docstring)")
    parser.add_argument(
        "--backend",
        choices=["fbgemm", "simulated"],
        default="fbgemm",
        help="real kernels, or the analytic model at toy scale (takes --labels raw)",
    )
    parser.add_argument(
        "--labels",
        choices=["normalised", "raw"],
        default="normalised",
        help="costs scaled by the reference group timed inside each measurement, or raw",
    )
    parser.add_argument("--out", default=str(RESULTS / "split_tables"), help="path less suffix")
    args = parser.parse_args(argv)
    if args.backend == "simulated" and args.labels != "raw":
        parser.error("--backend simulated times no reference group: pass --labels raw")
    planners = args.planners.split(",")
    if "torchrec" in planners:
        try:
            require_torchrec()
        except DreamshardError as exc:
            if args.planners != parser.get_default("planners"):
                parser.error(str(exc))
            print(f"without TorchRec's rows: {exc}", flush=True)  # optional by default
            planners.remove("torchrec")
            args.planners = ",".join(planners)
    args.rule_variants = []  # (suffix, heuristic) of the proposals measured beside
    for suffix, option, default in (
        (UNCHECKED, args.unchecked_rule, tuple(HEURISTIC_KEYS)),
        (ROW_SPLIT, args.row_rule, ROW_RULE),
    ):
        chosen = option.split(",") if option is not None else [p for p in default if p in planners]
        for method in filter(None, chosen):
            if method not in planners or method not in HEURISTIC_KEYS:
                parser.error(f"{method}: the rule variants take heuristics of --planners")
            args.rule_variants.append((suffix, method))
    return args


def named_planners(planners: list[str], rule_variants, model) -> tuple[dict, dict]:
    """Every planner under `--split none` and `--split auto`, and the rule variants; and each
    split plan's name -> its `--split none` plan's name."""
    named, variants = {}, {}
    for method in planners:
        make = torchrec_planner if method == "torchrec" else partial(named_planner, method, model)
        named[method] = make(split="none")
        named[method + SPLIT] = make(split="auto")
        variants[method + SPLIT] = method
    rules = {UNCHECKED: unchecked_rule, ROW_SPLIT: row_rule}
    for suffix, method in rule_variants:
        named[method + suffix] = rule_planner(method, rules[suffix])
        variants[method + suffix] = method
    return named, variants


def torchrec_planner(split: str):
    """TorchRec's planner on our memory cap with no storage reservation (the memory our
    planners get): table-wise under `split="none"`, its own column-/row-wise choice under
    `"auto"`. Its refusal of a task is a TorchRecDeclined, which the benchmark counts."""

    def plan(task: PlacementTask, seed: int) -> Placement:
        try:
            return torchrec_place(task, seed, reserve=False, split=split)
        except DreamshardError as exc:
            raise TorchRecDeclined(str(exc)) from None

    return plan


def measure_rounds(backend, every: list, rounds: int) -> tuple[list[list[PlacementCost]], list]:
    """Every item measured once per round, interleaved: the costs [round][item], and the load
    average at the start, after each round and at the end."""
    seen: dict[tuple[int, int], PlacementCost] = {}
    load_avg = [os.getloadavg()]
    progress = Progress(rounds * len(every), f"measuring {len(every)} placements")

    def on_measure(r: int, i: int, cost: PlacementCost) -> None:
        seen[(r, i)] = cost
        progress.step(f"round {r + 1}: {cost.overall:.1f} ms")
        if len(seen) % len(every) == 0:  # a round ends
            load_avg.append(os.getloadavg())

    measure_interleaved(backend, every, rounds, seed=0, on_measure=on_measure)
    progress.close()
    load_avg.append(os.getloadavg())
    return [[seen[(r, i)] for i in range(len(every))] for r in range(rounds)], load_avg


def analyse(evaluation, planners, variants, suite_of, full, index, alone, noise) -> dict:
    """Per task, per suite and against the issue's targets."""
    tasks, count = evaluation.tasks, len(evaluation.planners)
    loads = np.array(  # [round, task, planner]: each plan's mean device load (NaN: declined)
        [
            [
                [mean_load(row[index[(t, j)]]) if (t, j) in index else np.nan for j in range(count)]
                for t in range(len(tasks))
            ]
            for row in full
        ]
    )
    found: dict = {
        "tasks": [
            task_results(evaluation, t, planners, variants, loads[:, t], alone[:, t])
            for t in range(len(tasks))
        ],
        "suites": {},
    }
    for name in dict.fromkeys(suite_of):
        where = [t for t, s in enumerate(suite_of) if s == name]
        found["suites"][name] = suite_results(
            evaluation.subset(where), variants, [found["tasks"][t] for t in where], noise
        )
    found["targets"] = targets(found, planners, variants)
    found["targets"]["vs_torchrec"] = torchrec_pairs(evaluation)
    return found


def benchmark_model(given: str | None):
    """The model `dreamshard` plans with, and a note saying which it is."""
    if given:
        return resolve_model(given), given
    registry = state_dir() / "mlflow.db"
    if registry.exists():
        uri = "models:/dreamshard-policy@champion"
        try:
            return resolve_model(uri), f"{uri} ({registry})"
        except DreamshardError:
            pass
    trained = state_dir() / "quick_compare" / "model-fbgemm"
    if (trained / "model.pt").exists():
        return resolve_model(trained), f"{trained} (quick_compare's, trained on fbgemm cpu-50x4)"
    out = state_dir() / "split_tables" / "model-simulated"
    shutil.rmtree(out, ignore_errors=True)  # trained by this run
    config = TrainConfig(suite="cpu-50x4", backend="simulated", out=str(out))
    model = train(config, log=lambda line: print(line, flush=True))
    return model, "trained by this run on the simulated backend (cpu-50x4, paper defaults)"


def first_of_each_profile(suites: list) -> list:
    """The first suite of each table profile (`cpu`, `dlrm`: the profile sets the tables' rows
    and precision; suites of one profile share its tables)."""
    seen: dict[str, object] = {}
    for suite in suites:
        seen.setdefault(suite.spec.profile, suite)
    return list(seen.values())


def hottest_table(tasks: list[PlacementTask]) -> tuple[PlacementTask, Table]:
    """The table whose lookups x width is the largest share of its task's mean device load
    (among tables whose width splits into 4 column shards)."""
    best = None
    for task in tasks:
        mean = sum(t.dim * t.pooling_factor for t in task.tables) / task.num_devices
        for table in task.tables:
            share = table.dim * table.pooling_factor / mean
            if table.dim % 16 == 0 and (best is None or share > best[0]):
                best = (share, task, table)
    if best is None:
        raise DreamshardError("no table of the first suite's tasks splits into 4 column shards")
    return best[1], best[2]


def width_items(table: Table, task: PlacementTask) -> list[tuple[str, tuple]]:
    """The hot table alone at d, its column shards d/2 and d/4 alone, both d/2 shards in one
    kernel, and its first row half alone: one-device tasks, each on the table's own trace."""
    halves = split_table(table, "column", 2)
    quarters = split_table(table, "column", 4)
    rows = split_table(table, "row", 2)
    groups = {
        f"d = {table.dim}": [table],
        f"d/2 = {table.dim // 2}": [halves[0]],
        f"d/4 = {table.dim // 4}": [quarters[0]],
        "both d/2 shards, one kernel": list(halves),
        "first row half (rows/2, width d)": [rows[0]],
    }
    return [
        (
            label,
            (
                PlacementTask(tuple(group), 1, task.memory_cap_bytes, task.precision, label),
                Placement((0,) * len(group), "width"),
            ),
        )
        for label, group in groups.items()
    ]


def alone_item(task: PlacementTask) -> tuple[PlacementTask, Placement]:
    """Every table of `task` alone in its own kernel (one device each): the balanced bound's
    measure of the tables' own costs."""
    n = len(task.tables)
    spread = PlacementTask(task.tables, n, task.memory_cap_bytes, task.precision, task.name)
    return spread, Placement(tuple(range(n)), "alone")


def unique_items(tasks, placements) -> tuple[list, dict]:
    """The distinct (task, placement) pairs, and for each (task, planner) its item's index."""
    items, index, known = [], {}, {}
    for t, row in enumerate(placements):
        for j, placement in enumerate(row):
            if placement is None:  # declined: not measured
                continue
            key = (t, placement.splits, placement.devices)
            if key not in known:
                known[key] = len(items)
                items.append((tasks[t], placement))
            index[(t, j)] = known[key]
    return items, index


def full_slice(full: list[list[PlacementCost]], start: int, count: int | None = None):
    """[round, item] costs of items start .. start + count (to the end without a count)."""
    stop = None if count is None else start + count
    return np.array([row[start:stop] for row in full], dtype=object)


def build_evaluation(
    tasks, named, placements, plan_seconds, declined, index, full, backend
) -> Evaluation:
    """The project's one `Evaluation` of these costs (strongest heuristic, paired ratios); a
    declined plan has NaN costs."""
    rounds, names = len(full), list(named)
    costs = np.full((rounds, len(tasks), len(names)), np.nan)
    breakdowns = []
    for t in range(len(tasks)):
        row = []
        for j in range(len(names)):
            if (t, j) not in index:
                row.append([])
                continue
            measured = [full[r][index[(t, j)]] for r in range(rounds)]
            costs[:, t, j] = [c.overall for c in measured]
            row.append(mean_breakdown(measured))
        breakdowns.append(row)
    return Evaluation(
        tasks,
        names,
        placements,
        costs,
        breakdowns,
        plan_seconds,
        backend.name,
        declined,
        describe_costs(backend.config()),
    )


def reference_per_round(full) -> list[float]:
    """The median of the reference group's time (costs/reference.py) over each round; none
    where the backend times no reference (simulated)."""
    timed = [[c.info["reference_ms"] for c in row if "reference_ms" in c.info] for row in full]
    return [float(np.median(row)) for row in timed if row]


def placement_noise(overall: np.ndarray) -> float:
    """The median over placements of their cost's coefficient of variation over the rounds."""
    if overall.shape[0] < 2:
        return float("nan")
    return float(np.median(overall.std(axis=0) / overall.mean(axis=0)))


def spread(ratios: np.ndarray) -> dict:
    """A paired ratio's geometric mean over rounds and its range."""
    return {
        "ratio": float(geometric_mean(ratios)),
        "min": float(ratios.min()),
        "max": float(ratios.max()),
    }


def compute_ms(cost: PlacementCost) -> float:
    return sum(d.fwd_comp + d.bwd_comp for d in cost.devices)


def width_results(table, task, widths, costs: np.ndarray) -> dict:
    base = np.array([compute_ms(c) for c in costs[:, 0]])
    rows = []
    for k, (label, (group_task, _)) in enumerate(widths):
        measured = costs[:, k]
        kernel = np.array([compute_ms(c) for c in measured])
        rows.append(
            {
                "label": label,
                "shards": [t.name for t in group_task.tables],
                "rows": [t.rows for t in group_task.tables],
                "widths": [t.dim for t in group_task.tables],
                "lookups_per_sample": sum(t.pooling_factor for t in group_task.tables),
                "fwd_ms": float(np.median([c.devices[0].fwd_comp for c in measured])),
                "bwd_ms": float(np.median([c.devices[0].bwd_comp for c in measured])),
                "kernel_ms": float(np.median(kernel)),
                "vs_d": spread(kernel / base),
            }
        )
    mean = sum(t.dim * t.pooling_factor for t in task.tables) / task.num_devices
    return {
        "table": table.name,
        "task": task.name,
        "rows": table.rows,
        "dim": table.dim,
        "pooling_factor": table.pooling_factor,
        "key_over_mean_load": table.dim * table.pooling_factor / mean,
        "items": rows,
    }


def task_results(evaluation: Evaluation, t: int, planners, variants, loads, alone) -> dict:
    """One task's figures. `loads` [round, planner]: each plan's mean device load; `alone`
    [round]: the task's tables timed alone."""
    names, task = evaluation.planners, evaluation.tasks[t]
    costs = evaluation.costs[:, t]  # [round, planner]
    placements = evaluation.placements[t]
    bound = np.nanmin(loads, axis=1)  # [round]: the balanced bound (see DEFINITIONS)
    alone_bound = tables_alone_bound(task, alone)
    means = costs.mean(axis=0)
    placed = [j for j in range(len(names)) if placements[j] is not None]
    whole = [names.index(p) for p in planners if names.index(p) in placed]
    split = [names.index(p + SPLIT) for p in planners if names.index(p + SPLIT) in placed]
    best_whole = min(whole, key=lambda j: means[j])
    best_split = min(split, key=lambda j: means[j])
    result = {
        "task": task.name,
        "tables": len(task.tables),
        "devices": task.num_devices,
        "bound_ms": bound.tolist(),
        "bound_plan": names[int(np.nanargmin(loads.mean(axis=0)))],
        "tables_alone_bound_ms": alone_bound.tolist(),
        "best_tablewise": names[best_whole],
        "best_split": names[best_split],
        "single_table_bound": slowest_holds_one(evaluation, t, best_whole),
        "single_table_bound_plans": [
            names[j] for j in whole if slowest_holds_one(evaluation, t, j)
        ],
        "best_split_vs_best_tablewise": spread(costs[:, best_split] / costs[:, best_whole]),
        "planners": {},
    }
    for j, name in enumerate(names):
        placement = placements[j]
        if placement is None:
            result["planners"][name] = {"declined": evaluation.declined[(t, j)]}
            continue
        result["planners"][name] = {
            "costs_ms": costs[:, j].tolist(),
            "mean_load_ms": loads[:, j].tolist(),
            "vs_bound": spread(costs[:, j] / bound),
            "vs_tables_alone_bound": spread(costs[:, j] / alone_bound),
            "vs_own_mean_load": spread(costs[:, j] / loads[:, j]),
            "vs_best_tablewise": spread(costs[:, j] / costs[:, best_whole]),
            "splits": [asdict(s) for s in placement.splits],
            "shards": len(placement.devices),
            "devices": device_figures(evaluation, t, j),
            "plan_s": float(evaluation.plan_seconds[t, j]),
        }
    for variant, base in variants.items():
        none, auto = names.index(base), names.index(variant)
        if placements[none] is None or placements[auto] is None:
            result["planners"][variant]["vs_none"] = None  # one of the two declined
            continue
        same = placements[none].devices == placements[auto].devices and not placements[auto].splits
        result["planners"][variant]["vs_none"] = {
            **spread(costs[:, auto] / costs[:, none]),
            "same_plan": same,
        }
    return result


def mean_load(cost: PlacementCost) -> float:
    """A plan's mean device load: per device its kernels and its exchange, without the wait
    for the slowest forward (fwd_comm - bwd_comm under the modeled exchange), over devices."""
    return float(np.mean([d.total - (d.fwd_comm - d.bwd_comm) for d in cost.devices]))


def tables_alone_bound(task: PlacementTask, alone: np.ndarray) -> np.ndarray:
    """Per round: the tables' kernels timed alone, summed, over the devices, plus the exchange
    of a perfectly balanced plan (every device the mean width; forward and backward)."""
    batch = alone[0].info["batch"]
    width = sum(t.dim for t in task.tables) / task.num_devices
    even = transfer_ms(np.full(task.num_devices, width), batch, get_topology("cpu-gloo"))[0]
    return np.array([compute_ms(c) / task.num_devices + 2 * even for c in alone])


def slowest_holds_one(evaluation: Evaluation, t: int, j: int) -> bool:
    """Whether the slowest device (by mean total over rounds) of a placement holds one shard."""
    return device_figures(evaluation, t, j)["slowest_shards"] == 1


def device_figures(evaluation: Evaluation, t: int, j: int) -> dict:
    """A placement's mean total per device over the rounds, its shards per device, and which
    shards its slowest device holds."""
    totals = [sum(d.values()) for d in evaluation.breakdowns[t][j]]
    placement = evaluation.placements[t][j]
    tables = placement_task(evaluation.tasks[t], placement).tables
    slowest = int(np.argmax(totals))
    held = [tables[i].name for i, d in enumerate(placement.devices) if d == slowest]
    return {
        "total_ms": totals,
        "shards": np.bincount(placement.devices, minlength=len(totals)).tolist(),
        "slowest": slowest,
        "slowest_shards": len(held),
        "slowest_holds": held if len(held) <= 4 else held[:4] + [f"... {len(held) - 4} more"],
    }


def rule_planner(method: str, rule):
    """Heuristic `method` placing the shards of the splits `rule(task, method)` gives."""

    def plan(task: PlacementTask, seed: int) -> Placement:
        return place_splits(task, method, seed, rule(task, method))

    return plan


def unchecked_rule(task: PlacementTask, method: str) -> tuple[Split, ...]:
    """The memory splits and the balance rule's column halvings under `method`'s key
    (`placement.splitting.balance_splits`), not checked by any model: what the heuristics
    applied under `--split auto` before the check."""
    return balance_splits(task, HEURISTIC_KEYS[method], memory_splits(task))


def row_rule(task: PlacementTask, method: str) -> tuple[Split, ...]:
    """The balance rule's tables and parts, cut into row ranges instead of column ranges. A
    row shard has the lookups of its rows, so halving it halves its lookup key as the rule
    assumes; a column shard keeps all its table's lookups."""
    memory = memory_splits(task)
    return tuple(
        s if s in memory else Split(s.table, "row", s.parts) for s in unchecked_rule(task, method)
    )


def place_splits(task: PlacementTask, method: str, seed: int, splits) -> Placement:
    """Heuristic `method`'s placement of the shards of `task` under `splits`."""
    own = heuristics.PLANNERS[method]
    if not splits:
        return own(task, seed)
    return split_place(task, splits, lambda shards: own(shards, seed), method)


def suite_results(evaluation: Evaluation, variants, tasks: list[dict], noise: float) -> dict:
    strongest = evaluation.strongest_heuristic()
    vs_strongest = evaluation.ratios("strongest_heuristic")  # [task, planner]
    names = evaluation.planners
    rows = {}
    for variant, base in variants.items():
        # the tasks where the auto plan, the none plan and both were placed (TorchRec declines)
        auto = [task for task in tasks if "declined" not in task["planners"][variant]]
        none = [task for task in tasks if "declined" not in task["planners"][base]]
        pairs = [task["planners"][variant]["vs_none"] for task in auto if task in none]
        rows[variant] = {
            "tasks_placed": len(auto),
            "tasks_placed_none": len(none),
            "tasks": len(tasks),
            "auto_vs_none": placed_mean([x["ratio"] for x in pairs]),
            "auto_vs_none_tasks": [x["ratio"] for x in pairs],
            "worse_beyond_noise": sum(x["min"] > 1 and x["ratio"] > 1 + noise for x in pairs),
            "better_beyond_noise": sum(x["max"] < 1 and x["ratio"] < 1 - noise for x in pairs),
            "tasks_split": sum(bool(task["planners"][variant]["splits"]) for task in auto),
            "tables_split_per_task": float(
                np.mean([len(task["planners"][variant]["splits"]) for task in auto])
            )
            if auto
            else None,
            "vs_strongest_none": placed_mean(vs_strongest[:, names.index(base)]),
            "vs_strongest_auto": placed_mean(vs_strongest[:, names.index(variant)]),
            "vs_bound_none": placed_mean(
                [task["planners"][base]["vs_bound"]["ratio"] for task in none]
            ),
            "vs_bound_auto": placed_mean(
                [task["planners"][variant]["vs_bound"]["ratio"] for task in auto]
            ),
        }
    best_split = np.array(
        [vs_strongest[t, names.index(task["best_split"])] for t, task in enumerate(tasks)]
    )
    return {
        "strongest_heuristic": strongest,
        "planners": rows,
        "best_split_vs_strongest": float(geometric_mean(best_split)),
        "best_split_vs_strongest_tasks": best_split.tolist(),
        "vs_strongest_per_task": {
            name: vs_strongest[:, j].tolist() for j, name in enumerate(names)
        },
        "vs_torchrec": torchrec_pairs(evaluation),
    }


def placed_mean(values) -> float | None:
    """The geometric mean of the ratios that are there (NaN: a declined plan); None if none."""
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    return float(geometric_mean(values)) if values.size else None


def torchrec_pairs(evaluation: Evaluation) -> dict:
    """Ours against TorchRec's planner (TORCHREC_PAIRS): the paired ratio (geometric mean over
    rounds per task, then over the tasks TorchRec placed), its per-task values and range, and
    how many of the tasks TorchRec placed."""
    found = {}
    for ours, theirs in TORCHREC_PAIRS:
        if ours not in evaluation.planners or theirs not in evaluation.planners:
            continue
        column = evaluation.ratios(theirs)[:, evaluation.planners.index(ours)]  # [task]
        placed = ~np.isnan(column)
        found[f"{ours} / {theirs}"] = {
            "ratio": placed_mean(column),
            "min": float(column[placed].min()) if placed.any() else None,
            "max": float(column[placed].max()) if placed.any() else None,
            "per_task": [None if np.isnan(x) else float(x) for x in column],
            "tasks_placed": int(placed.sum()),
            "tasks": len(column),
        }
    return found


def targets(results: dict, planners, variants) -> dict:
    """The issue's targets, with the figures measured here (met or not)."""
    found: dict = {"bound_sets": {}}
    sets = {
        "the best table-wise plan": [t for t in results["tasks"] if t["single_table_bound"]],
        "some table-wise plan": [t for t in results["tasks"] if t["single_table_bound_plans"]],
    }
    judged = (["dreamshard"] if "dreamshard" in planners else []) + ["best split plan"]
    for which, bound_tasks in sets.items():
        entry = found["bound_sets"][which] = {"tasks": [t["task"] for t in bound_tasks]}
        for name in judged:
            rows = []
            for task in bound_tasks:
                planner = task["best_split"] if name == "best split plan" else name + SPLIT
                item = task["planners"][planner]
                rows.append(
                    {
                        "task": task["task"],
                        "planner": planner,
                        "bound_plans": task["single_table_bound_plans"],
                        "vs_best_tablewise": item["vs_best_tablewise"]["ratio"],
                        "vs_bound": item["vs_bound"]["ratio"],
                    }
                )
            entry[name] = {
                "rows": rows,
                "met_0.92": bool(rows)
                and all(r["vs_best_tablewise"] <= TARGET_BOUND_TASKS for r in rows),
                "met_bound_3pct": bool(rows) and all(r["vs_bound"] <= TARGET_BOUND for r in rows),
            }
    every = {}
    for variant in variants:
        values = np.concatenate(
            [results["suites"][s]["vs_strongest_per_task"][variant] for s in results["suites"]]
        )
        every[variant] = placed_mean(values)
    values = np.concatenate(
        [results["suites"][s]["best_split_vs_strongest_tasks"] for s in results["suites"]]
    )
    every["best split plan"] = placed_mean(values)
    found["vs_strongest_tablewise_heuristic"] = every
    found["met_0.95"] = {k: v is not None and v <= TARGET_HEURISTIC for k, v in every.items()}
    found["worse_than_none_beyond_noise"] = {
        v: sum(results["suites"][s]["planners"][v]["worse_beyond_noise"] for s in results["suites"])
        for v in variants
    }
    return found


def render(results: dict) -> str:
    load = results["load_average"]
    parts = [
        f"# Split tables on real kernels ({results['date']})",
        f"Host: {results['host']}; {results['versions']}. Costs: {results['costs_made']}; "
        f"row-wise partial sums modeled as a reduce-scatter (the all-to-all volume of a table of "
        f"that width). {results['rounds']} interleaved rounds in one run, "
        f"{results['minutes']:.1f} min in all. Load average (1 min) over the run: "
        f"{load['min']:.1f}-{load['max']:.1f} on 2 cores shared with other engineers; the "
        f"reference group (costs/reference.py) took "
        f"{', '.join(f'{x:.1f}' for x in results['reference_ms_per_round']) or 'no'} ms in the "
        f"rounds (nominal 12.0). Labels: {results['labels']}"
        + (
            " (compute scaled by nominal / the reference's time in the same measurement)"
            if results["labels"] == "normalised"
            else ""
        )
        + f". Noise: a placement's cost varies over the rounds by a median CV of "
        f"{results['noise_cv']:.1%} ({results['noise_cv_raw']:.1%} raw). "
        f"Model of dreamshard: {results['model']}. "
        f"Command: `{results['command'].strip()}`.",
        "\n\n".join(
            render_widths(w, first=k == 0)
            for k, w in enumerate([results["widths"], *results.get("widths_other_profiles", [])])
        ),
        render_suites(results),
        render_tasks(results),
        render_targets(results["targets"]),
        DEFINITIONS,
    ]
    return "\n\n".join(parts) + "\n"


def render_widths(widths: dict, first: bool = True) -> str:
    header = [
        "kernel",
        "rows",
        "widths",
        "lookups/sample",
        "fwd ms",
        "bwd ms",
        "fwd+bwd ms",
        "vs d (min-max over rounds)",
    ]
    rows = [
        [
            item["label"],
            "+".join(map(str, item["rows"])),
            "+".join(map(str, item["widths"])),
            f"{item['lookups_per_sample']:.1f}",
            item["fwd_ms"],
            item["bwd_ms"],
            item["kernel_ms"],
            f"{item['vs_d']['ratio']:.3f} ({item['vs_d']['min']:.3f}-{item['vs_d']['max']:.3f})",
        ]
        for item in widths["items"]
    ]
    heading = "## (a) One hot table at width d, d/2, d/4 (same trace)\n\n" if first else ""
    return "\n".join(
        [
            f"{heading}{widths['table']} of "
            f"{widths['task']}: {widths['rows']} rows x {widths['dim']}, "
            f"{widths['pooling_factor']:.1f} lookups per sample, lookups x width "
            f"{widths['key_over_mean_load']:.2f}x the task's mean device load. Each kernel "
            "alone on one device (medians over the rounds):",
            "```",
            format_table(header, rows),
            "```",
        ]
    )


def render_suites(results: dict) -> str:
    out = ["## (b) `--split auto` beside `--split none`, per suite"]
    header = [
        "planner",
        "auto/none (per task)",
        "worse|better beyond noise",
        "tasks split",
        "tables split/task",
        "none vs strongest",
        "auto vs strongest",
        "none vs bound",
        "auto vs bound",
    ]
    for name, suite in results["suites"].items():
        rows = [
            [
                p + placed_note(r),
                f"{ratio(r['auto_vs_none'])} ("
                + " ".join(f"{x:.2f}" for x in r["auto_vs_none_tasks"])
                + ")",
                f"{r['worse_beyond_noise']}|{r['better_beyond_noise']}",
                r["tasks_split"],
                ratio(r["tables_split_per_task"], 2),
                ratio(r["vs_strongest_none"]) + placed_note(r, "tasks_placed_none"),
                ratio(r["vs_strongest_auto"]),
                ratio(r["vs_bound_none"]) + placed_note(r, "tasks_placed_none"),
                ratio(r["vs_bound_auto"]),
            ]
            for p, r in suite["planners"].items()
        ]
        out += [
            f"**{name}** (strongest table-wise heuristic: {suite['strongest_heuristic']}; the "
            f"best split plan of each task vs it: {suite['best_split_vs_strongest']:.3f})",
            "```",
            format_table(header, rows),
            "```",
        ]
        if suite["vs_torchrec"]:
            out.append(render_torchrec(suite["vs_torchrec"]))
    return "\n".join(out)


def ratio(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def placed_note(row: dict, placed: str = "tasks_placed") -> str:
    """` [k/n]` after a figure over the k of n tasks a planner placed (its `auto` plans, or
    with `placed="tasks_placed_none"` its `none` plans); nothing when it placed them all."""
    k, n = row.get(placed, row.get("tasks")), row.get("tasks")
    return "" if k == n else f" [{k}/{n}]"


def render_torchrec(pairs: dict) -> str:
    """Ours against TorchRec's planner, one line per pair."""
    return "\n".join(f"- {torchrec_line(name, r)}" for name, r in pairs.items())


def torchrec_line(name: str, r: dict) -> str:
    """`ours` vs `theirs`: the paired ratio, its range over tasks, [k/n] tasks TorchRec placed."""
    ours, theirs = name.split(" / ")
    per_task = " ".join("declined" if x is None else f"{x:.2f}" for x in r["per_task"])
    figure = (
        f"{r['ratio']:.3f} ({r['min']:.3f}-{r['max']:.3f} over tasks)"
        if r["ratio"] is not None
        else "no task placed"
    )
    return (
        f"`{ours}` vs `{theirs}`: {figure} [{r['tasks_placed']}/{r['tasks']} tasks TorchRec "
        f"placed; per task: {per_task}]"
    )


def render_tasks(results: dict) -> str:
    header = [
        "task",
        "best table-wise bound by one table",
        "table-wise plans bound by one table",
        "best table-wise",
        "best split (splits)",
        "split/table-wise (rounds)",
        "bound ms",
        "tables alone ms",
        "best split vs bound",
        "dreamshard +split vs best table-wise",
        "vs bound",
    ]
    rows = []
    for task in results["tasks"]:
        best_w, best_s = (
            task["planners"][task["best_tablewise"]],
            task["planners"][task["best_split"]],
        )
        ratio = task["best_split_vs_best_tablewise"]
        ds = task["planners"].get("dreamshard" + SPLIT)
        rows.append(
            [
                task["task"],
                ("yes" if task["single_table_bound"] else "no")
                + f" ({best_w['devices']['slowest_shards']} on slowest)",
                ", ".join(task["single_table_bound_plans"]) or "-",
                f"{task['best_tablewise']} {np.mean(best_w['costs_ms']):.1f}",
                f"{task['best_split']} {np.mean(best_s['costs_ms']):.1f} ({len(best_s['splits'])})",
                f"{ratio['ratio']:.3f} ({ratio['min']:.3f}-{ratio['max']:.3f})",
                f"{np.mean(task['bound_ms']):.1f}",
                f"{np.mean(task['tables_alone_bound_ms']):.1f}",
                f"{best_s['vs_bound']['ratio']:.3f}",
                f"{ds['vs_best_tablewise']['ratio']:.3f}" if ds else "-",
                f"{ds['vs_bound']['ratio']:.3f}" if ds else "-",
            ]
        )
    return "\n".join(["## Per task", "```", format_table(header, rows), "```"])


def render_targets(found: dict) -> str:
    lines = ["## The issue's targets (measured figures; met or not)"]
    for which, entry in found["bound_sets"].items():
        lines.append(
            f"- Tasks where {which} is bound by a single table (its slowest device holds one "
            f"table): {', '.join(entry['tasks']) or 'none'}."
        )
        for name in ("dreamshard", "best split plan"):
            if name not in entry or not entry["tasks"]:
                continue
            item = entry[name]
            figures = "; ".join(
                f"{r['task']} ({', '.join(r['bound_plans'])} bound): {r['planner']} "
                f"{r['vs_best_tablewise']:.3f}x the best table-wise plan, "
                f"{r['vs_bound']:.3f}x the bound"
                for r in item["rows"]
            )
            lines.append(
                f"  - {name} with splitting there (target <= 0.92x the best table-wise plan, "
                f"within 3% of the balanced bound): {figures}; 0.92x "
                f"{'met' if item['met_0.92'] else 'not met'}, bound "
                f"{'met' if item['met_bound_3pct'] else 'not met'}."
            )
    every = ", ".join(
        f"{k} {ratio(v)}" + (" (met)" if found["met_0.95"][k] else "")
        for k, v in found["vs_strongest_tablewise_heuristic"].items()
    )
    lines.append(
        f"- Over all suites vs the strongest table-wise heuristic of each suite "
        f"(target <= 0.95): {every}."
    )
    name = " / ".join(TORCHREC_PAIRS[0])
    target = found.get("vs_torchrec", {}).get(name)
    if target is not None:
        met = target["ratio"] is not None and target["ratio"] <= TARGET_TORCHREC
        lines.append(
            f"- Over all suites vs TorchRec's planner with column-/row-wise sharding allowed, on "
            f"the same memory (target <= {TARGET_TORCHREC}): {torchrec_line(name, target)}; "
            f"{'met' if met else 'not met'}."
        )
    worse = ", ".join(f"{k} {v}" for k, v in found["worse_than_none_beyond_noise"].items())
    lines.append(
        f"- Tasks where `--split auto` is worse than `--split none` beyond the noise "
        f"(target: none): {worse}."
    )
    return "\n".join(lines)


DEFINITIONS = """## How the figures are made
- Every placement (deduplicated: a planner whose `auto` plan equals its `none` plan is measured
  once), every task's tables alone, and the hot table's kernels are measured once per round, in
  a fresh random order each round (`evaluation.rounds.measure_interleaved`). Ratios are paired
  within a round, then a geometric mean over the rounds (range over the rounds in brackets) and
  over the tasks. Best table-wise / best split: the planner with the lowest mean cost among the
  `none` / the `auto` plans of the task (a choice on the same rounds: slightly optimistic).
- Strongest table-wise heuristic: `Evaluation.strongest_heuristic` over the suite's `none` plans.
- Balanced bound of a task: per round, the least mean device load among all the task's plans
  measured (a plan's mean device load: per device its kernels' time and its modeled exchange,
  without the wait for the slowest forward, averaged over the devices: what the plan would
  take were its work spread evenly). A plan's ratio to it says how far it is from the best
  balance of the least work measured; a column split adds work (each shard repeats its
  table's lookups), so a split plan's own mean load is higher than a whole-table plan's.
- Tables alone ms: the task's tables each timed alone in its own kernel in the same rounds,
  summed, over the devices, plus the exchange of a perfectly balanced plan. Shown, not used
  as the bound: a small table timed alone keeps its rows in this CPU's cache between calls
  and under-states its cost inside a fused group (by up to 2x, seen on this host).
- Worse (better) beyond noise: the auto/none ratio is above (below) 1 in every round and its
  mean beyond the run's median CV of a placement's cost over the rounds.
- `tables split/task`: how many tables the `auto` plan splits, mean over the suite's tasks.
- A heuristic's `+split` plan is the library's `--split auto`: its balance rule's column
  halvings, or the same tables cut row-wise over all devices (TorchRec's layout), kept only
  where the calibrated analytic model (the `simulated` backend) rates the heuristic's
  placement of the shards cheaper (`split_choice.checked_balance_splits`).
  Variants beside it, placed by the same heuristic (not planners of the library, and not
  counted in "best split plan", the best `--split auto` plan): `+rule unchecked`, the rule's
  column halvings as they come (`placement.splitting.balance_splits`, the heuristics'
  `--split auto` before the check); `+row rule`, the same tables and parts cut into row ranges
  (not pinned).
- `torchrec` / `torchrec +split`: TorchRec's planner (`planners.torchrec_planner`) on the task's
  memory cap with no storage reservation, table-wise / allowed column- and row-wise as it
  chooses; both are planners here (they count in the best table-wise and best split plans). A
  task it declines is not measured: its figures are over the tasks it placed, `[k/n]`. Ours
  vs TorchRec's: cost / TorchRec's cost paired within each round, geometric mean over the
  rounds per task, then over the tasks TorchRec placed."""


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
