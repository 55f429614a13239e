"""How far a device's fused kernel is from the sum of its tables on real kernels, even with
each table measured and the sum fitted on the same task (issue 28: why no cost model here
predicts a plan's devices within a few %).

Run: .venv/bin/python benchmarks/additivity.py [--suites cpu-50x4,cpu-100x4,cpu-100x8,cpu-200x8]
         [--placements 16] [--rounds 2] [--rerender]

Per suite its first test task (the first that `benchmarks/compare_planners.py` judges), and
per task, in `--rounds` interleaved rounds: every table's kernel alone (all of them in one
round-robin, `device_error.alone_job`) and `--placements` random whole-table placements
(seeds 0, 1, ...), each device's compute (forward and backward kernels) the median over rounds.
Sources of a device's compute, each judged on the placements it was not fitted on (4 folds by
placement):

- its tables alone, summed;
- that sum scaled, plus a cost per table and per kernel (`k x sum + b x tables + c`, fitted
  by least squares on relative error): what an additive model of measured tables can do;
- each table's alone cost with its own correction, plus a cost per kernel (ridge on the
  corrections, `--ridge`): a table's cost in a group learned from the groups it was in.

Figures: the spread over a placement's busy devices of log(measured / predicted), mean over
the held-out placements (`device_error.spread`), beside the measurement's own noise (each
device's round-to-round spread after its placement's common factor, `device_error.plan_noise`).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from benchmarks.device_error import alone_job, plan_noise, spread
from benchmarks.fbgemm_floor import judged_tasks, suite_options
from benchmarks.script_entry import report_options, run_line, run_script, write_run
from dreamshard.costs.backends import describe_costs, make_backend
from dreamshard.costs.dataset import hardware, versions
from dreamshard.placement.registry import place
from dreamshard.report import markdown_table

FOLDS = 4
SOURCES = ("tables alone, summed", "k x sum + b x tables + c", "per-table corrections")


def compute_of(cost) -> list[float]:
    return [d.fwd_comp + d.bwd_comp for d in cost.devices]


def measure_task(task, placements: int, rounds: int, backend) -> dict:
    """Each table alone and each random placement, once a round, in a fresh order a round."""
    alone = alone_job(task)
    plans = [place(task, "random", seed=s, split="none") for s in range(placements)]
    rng = np.random.default_rng(0)
    alone_ms = np.zeros((rounds, len(task.tables)))
    device_ms = np.zeros((rounds, placements, task.num_devices))
    for r in range(rounds):
        for p in rng.permutation(placements + 1):
            if p == placements:
                alone_ms[r] = compute_of(backend.measure(alone.task, alone.placement))
            else:
                device_ms[r, p] = compute_of(backend.measure(task, plans[p]))
    return {
        "task": task.name,
        "alone": alone_ms.tolist(),
        "devices": device_ms.tolist(),
        "placements": [list(p.devices) for p in plans],
    }


def membership(record: dict, tables: int) -> np.ndarray:
    """[placements, devices, tables] 1 where the placement puts the table on the device."""
    placed = np.array(record["placements"])
    devices = np.array(record["devices"]).shape[2]
    out = np.zeros((len(placed), devices, tables))
    for p, row in enumerate(placed):
        out[p, row, np.arange(tables)] = 1.0
    return out


def fit_scaled(sums, counts, measured) -> np.ndarray:
    """(k, b, c) of k x sum + b x tables + c, least squares on relative error."""
    design = np.stack([sums, counts, np.ones_like(sums)], axis=1) / measured[:, None]
    coef, *_ = np.linalg.lstsq(design, np.ones_like(measured), rcond=None)
    return coef


def fit_corrections(members, alone, measured, ridge: float) -> tuple[np.ndarray, float]:
    """Each table's cost alone x (1 + its correction) and a cost per kernel, fitted on relative
    error with the corrections' squares weighed by `ridge`: (per-table costs, per-kernel)."""
    tables = len(alone)
    design = np.concatenate([members * alone, np.ones((len(measured), 1))], axis=1)
    design /= measured[:, None]
    base = (members @ alone) / measured
    penalty = np.diag(np.r_[np.full(tables, ridge), 0.0])
    solution = np.linalg.solve(design.T @ design + penalty, design.T @ (1.0 - base))
    return alone * (1.0 + solution[:tables]), float(solution[tables])


def task_figures(record: dict, ridge: float) -> dict:
    """Per source the mean held-out spread over placements; and the noise."""
    alone = np.median(np.array(record["alone"]), axis=0)
    rounds = np.array(record["devices"])
    measured = np.median(rounds, axis=0)  # [placements, devices]
    members = membership(record, len(alone))
    fold = np.arange(len(measured)) % FOLDS
    spreads = {name: [] for name in SOURCES}
    for f in range(FOLDS):
        fit = fold != f
        train_members = members[fit].reshape(-1, len(alone))
        train_ms = measured[fit].reshape(-1)
        busy = train_ms > 0
        train_members, train_ms = train_members[busy], train_ms[busy]
        k, b, c = fit_scaled(train_members @ alone, train_members.sum(axis=1), train_ms)
        costs, per_kernel = fit_corrections(train_members, alone, train_ms, ridge)
        for p in np.flatnonzero(fold == f):
            sums, counts = members[p] @ alone, members[p].sum(axis=1)
            spreads[SOURCES[0]].append(spread(measured[p], sums))
            spreads[SOURCES[1]].append(spread(measured[p], k * sums + b * counts + c))
            spreads[SOURCES[2]].append(spread(measured[p], members[p] @ costs + per_kernel))
    figures = {name: float(np.mean(values)) for name, values in spreads.items()}
    figures["noise"] = plan_noise(rounds)
    return figures


def run(args: argparse.Namespace) -> dict:
    began = time.monotonic()
    backend = make_backend("fbgemm")
    records = {}
    for suite, tasks in judged_tasks(args.suites, 1):
        started = time.monotonic()
        records[suite] = measure_task(tasks[0], args.placements, args.rounds, backend)
        print(f"{tasks[0].name}: {time.monotonic() - started:.0f} s", flush=True)
    return {
        "args": vars(args),
        "hardware": hardware(),
        "versions": versions(),
        "costs": describe_costs(backend.config()),
        "suites": records,
        "seconds": time.monotonic() - began,
    }


def render(result: dict) -> str:
    args = result["args"]
    figures = {s: task_figures(r, args["ridge"]) for s, r in result["suites"].items()}
    header = ["source", *figures, "mean"]
    rows = []
    for name in (*SOURCES, "noise"):
        values = [figures[s][name] for s in figures]
        label = "(measurement noise, one round)" if name == "noise" else name
        rows.append([label, *(f"{v:.3f}" for v in values), f"{np.mean(values):.3f}"])
    lines = [
        f"# How far a fused kernel is from the sum of its tables ({time.strftime('%Y-%m-%d')})",
        run_line("additivity.py", result),
        f"Costs: {result['costs']}; compute only (each device's forward and backward kernels). "
        f"{args['rounds']} interleaved rounds, each in a fresh order; medians over rounds.",
        f"Tasks: the first test task of each suite. Per task every table's kernel alone and "
        f"{args['placements']} random whole-table placements; each source fitted on three "
        f"quarters of the placements and judged on the other quarter ({FOLDS} folds). "
        f"Per-table corrections: ridge {args['ridge']} on the corrections' squares.",
        "Figures: the spread (standard deviation) over a placement's busy devices of "
        "log(measured / predicted compute), mean over the held-out placements; 0.05 is about "
        "5% per device.",
        markdown_table(header, rows),
    ]
    return "\n\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    suite_options(parser, tasks=False)
    parser.add_argument("--placements", type=int, default=16, help="random placements a task")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
    parser.add_argument(
        "--ridge", type=float, default=0.3, help="weight of the per-table corrections' squares"
    )
    report_options(parser, "benchmarks/results/additivity.md")
    args = parser.parse_args(argv)
    if args.placements < 2 * FOLDS:
        parser.error(f"--placements must be at least {2 * FOLDS}")
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (the noise needs two)")
    return args


def main(argv: list[str] | None = None) -> int:
    return write_run(parse_args(sys.argv[1:] if argv is None else argv), run, render)


if __name__ == "__main__":
    run_script(main)
