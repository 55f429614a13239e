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
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.parts.balance import mean_loads, tables_alone
from benchmarks.parts.models import CHAMPION_URI, champion_or_none, train_for_run
from benchmarks.parts.report_files import write_report
from benchmarks.script_entry import run_script
from benchmarks.split_tables_figures import analyse, width_figures
from benchmarks.split_tables_report import SPLIT, render
from dreamshard.costs.backends import describe_costs
from dreamshard.costs.dataset import hardware, versions
from dreamshard.costs.fbgemm import FbgemmBackend
from dreamshard.costs.reference import normalised
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.costs.types import PlacementCost
from dreamshard.errors import DreamshardError
from dreamshard.evaluation.evaluate import distinct_items, evaluation_of, place_all
from dreamshard.evaluation.rounds import measure_costs, median_cv
from dreamshard.integrations.torchrec_planner import require_torchrec
from dreamshard.learn.model_file import resolve_model
from dreamshard.learn.train_config import TrainConfig
from dreamshard.placement.heuristics import HEURISTIC_KEYS
from dreamshard.placement.registry import TORCHREC, named_planner, registration
from dreamshard.placement.splitting import balance_splits, memory_splits, split_place
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.state import state_dir
from dreamshard.tables.shards import Split, split_table
from dreamshard.tables.table import Table

RESULTS = Path(__file__).parent / "results"
PLANNERS = ("dim", "size", "lookup", "size_lookup", "search_analytic", "dreamshard", "torchrec")
# The heuristics' balance rule as variants beside their `--split auto` (which keeps the rule's
# column halvings, or its tables cut row-wise over all devices, only where the analytic model
# rates them cheaper): the rule unchecked, and the rule halving row-wise with its own parts.
UNCHECKED = " +rule unchecked"
ROW_SPLIT = " +row rule"
ROW_RULE = ("lookup", "size_lookup")


class TorchRecDeclined(Exception):
    """TorchRec's planner declined a task (its reason): the task is counted, not measured."""


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(1)  # small networks; the fbgemm CPU backward is serial anyway
    began = time.monotonic()
    planners = args.planners.split(",")
    needs_model = any(registration(p).needs_model for p in planners)
    model, model_note = benchmark_model(args.model) if needs_model else (None, "")
    suites = [make_suite(parse_suite_name(s, 1, args.tasks)) for s in args.suites.split(",")]
    tasks = [t for s in suites for t in s.test_tasks]
    named, variants = named_planners(planners, args.rule_variants, model)
    placed = place_all(tasks, named, (TorchRecDeclined,))
    print(f"placed in {time.monotonic() - began:.0f} s", flush=True)

    # the plans, every task's tables alone and the hot table's kernels, in the same rounds
    hot = [hottest_table(s.test_tasks) for s in first_of_each_profile(suites)]
    widths = [width_items(table, task) for task, table in hot]
    items, index = distinct_items(tasks, placed[0])
    alone = [tables_alone(task) for task in tasks]
    every = [*items, *alone, *(item for group in widths for _, item in group)]
    backend = FbgemmBackend() if args.backend == "fbgemm" else SimulatedBackend()
    load_avg = [os.getloadavg()]  # at the start, after each round and at the end
    raw = measure_costs(
        backend, every, args.rounds, on_round=lambda _: load_avg.append(os.getloadavg())
    )
    load_avg.append(os.getloadavg())
    full = raw if args.labels == "raw" else [[normalised(c) for c in row] for row in raw]
    evaluation = evaluation_of(tasks, list(named), placed, full, index, backend)

    results = run_facts(args, argv, backend, model_note, load_avg, raw, full)
    start = len(items) + len(alone)
    results.update(width_figures(hot, widths, columns(full, start, len(every) - start)))
    loads = mean_loads(full, index, len(tasks), len(named))
    suite_of = [s.spec.name for s in suites for _ in s.test_tasks]
    alone_costs = columns(full, len(items), len(alone))
    noise = results["noise_cv"]
    results.update(analyse(evaluation, planners, variants, suite_of, loads, alone_costs, noise))
    results["minutes"] = (time.monotonic() - began) / 60
    report = render(results)
    write_report(Path(args.out).with_suffix(".md"), report, results)
    print(report, flush=True)
    return results


def run_facts(args, argv, backend, model_note, load_avg, raw, full) -> dict:
    """How the run was made: command, host, costs, model, load, the reference, the noise."""
    return {
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
        "noise_cv": median_cv(np.array([[c.overall for c in row] for row in full])),
        "noise_cv_raw": median_cv(np.array([[c.overall for c in row] for row in raw])),
    }


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
    external = [p for p in planners if TORCHREC in registration(p).needs]
    if external:
        try:
            require_torchrec()
        except DreamshardError as exc:
            if args.planners != parser.get_default("planners"):
                parser.error(str(exc))
            print(f"without TorchRec's rows: {exc}", flush=True)  # optional by default
            planners = [p for p in planners if p not in external]
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
        for suffix, split in (("", "none"), (SPLIT, "auto")):
            named[method + suffix] = benchmark_planner(method, model, split)
        variants[method + SPLIT] = method
    rules = {UNCHECKED: unchecked_rule, ROW_SPLIT: row_rule}
    for suffix, method in rule_variants:
        named[method + suffix] = rule_planner(method, rules[suffix])
        variants[method + suffix] = method
    return named, variants


def benchmark_planner(method: str, model, split: str):
    """`method` under `split`, with no storage reservation (TorchRec's planner gets the memory
    ours get). Another tool's planner (TorchRec's) may refuse a task: a TorchRecDeclined, which
    the benchmark counts; ours never refuse a feasible task."""
    plan = named_planner(method, model, split=split, reserve=False)
    if registration(method).kind != "external":
        return plan

    def declining(task: PlacementTask, seed: int) -> Placement:
        try:
            return plan(task, seed)
        except DreamshardError as exc:
            raise TorchRecDeclined(str(exc)) from None

    return declining


def benchmark_model(given: str | None):
    """The model `dreamshard` plans with, and a note saying which it is."""
    if given:
        return resolve_model(given), given
    champion = champion_or_none()
    if champion is not None:
        return champion, f"{CHAMPION_URI} ({state_dir() / 'mlflow.db'})"
    trained = state_dir() / "quick_compare" / "model-fbgemm"
    if (trained / "model.pt").exists():
        return resolve_model(trained), f"{trained} (quick_compare's, trained on fbgemm cpu-50x4)"
    out = state_dir() / "split_tables" / "model-simulated"
    config = TrainConfig(suite="cpu-50x4", backend="simulated", out=str(out))
    return train_for_run(config, log=lambda line: print(line, flush=True))


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


def columns(full: list[list[PlacementCost]], start: int, count: int) -> np.ndarray:
    """[round, item] costs of the items start .. start + count."""
    return np.array([row[start : start + count] for row in full], dtype=object)


def reference_per_round(full) -> list[float]:
    """The median of the reference group's time (costs/reference.py) over each round; none
    where the backend times no reference (simulated)."""
    timed = [[c.info["reference_ms"] for c in row if "reference_ms" in c.info] for row in full]
    return [float(np.median(row)) for row in timed if row]


def rule_planner(method: str, rule):
    """Heuristic `method` placing the shards of the splits `rule(task, method)` gives."""
    own = named_planner(method)  # whole tables, or the shards it is handed

    def plan(task: PlacementTask, seed: int) -> Placement:
        splits = rule(task, method)
        return split_place(task, splits, lambda shards: own(shards, seed), method)

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


if __name__ == "__main__":
    run_script(main, sys.argv[1:])
