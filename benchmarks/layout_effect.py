"""Does a device's measured time depend on where its memory lands? (issue 28: what a per-device
cost model cannot learn on this host.)

Run: .venv/bin/python benchmarks/layout_effect.py [--rounds 5] [--rerender]

Each device group of the heuristics dim and lookup (whole tables) on the first test task of each
cpu suite is timed twice in one measurement: two identical copies, as two devices. Whatever
tells the copies apart is neither the tables (the same) nor the host's drift (one measurement,
round-robin): it is where each copy's memory landed. Under each fbgemm timing layout
(`costs.tbe.TimingConfig.layout`), interleaved in every round, it reports:

- between groups: the spread over groups of the mean over rounds of log(second copy / first):
  a part of a device's time that a layout fixes for good, and no model of its tables can
  predict;
- within a group: the spread over rounds of that log ratio, mean over groups: the part drawn
  afresh each measurement, which medians over rounds average out.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

import numpy as np
from script_entry import report_options, run_script, write_run

from dreamshard.costs.backends import make_backend
from dreamshard.costs.dataset import hardware, versions
from dreamshard.costs.tbe import LAYOUTS
from dreamshard.placement.registry import place
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import Placement
from dreamshard.report import markdown_table

SUITES = ("cpu-50x4", "cpu-100x4", "cpu-100x8", "cpu-200x8")
HEURISTICS = ("dim", "lookup")


def groups_of(suites: list[str]) -> list[tuple[str, object, list]]:
    """(suite, task, tables) of every busy device of the heuristics' plans of the first test
    task of each suite."""
    found = []
    for name in suites:
        task = make_suite(parse_suite_name(name, 1, 1)).test_tasks[0]
        for key in HEURISTICS:
            plan = place(task, key, split="none")
            for members in plan.device_tables(task.num_devices):
                if members:
                    found.append((name, task, [task.tables[i] for i in members]))
    return found


def copies_task(task, tables: list):
    """Two identical copies of `tables` as a two-device task (names made distinct), and the
    placement that puts one copy on each device."""
    copies = tuple(replace(t, name=f"{t.name}#{k}") for k in range(2) for t in tables)
    doubled = replace(task, tables=copies, num_devices=2, name=f"{task.name}/copies")
    return doubled, Placement((0,) * len(tables) + (1,) * len(tables), "copies")


def run(args: argparse.Namespace) -> dict:
    began = time.monotonic()
    backends = {layout: make_backend("fbgemm") for layout in LAYOUTS}
    for layout, backend in backends.items():
        backend.timing = replace(backend.timing, layout=layout)
    groups = groups_of(args.suites.split(","))
    logs = {layout: [[] for _ in groups] for layout in LAYOUTS}
    rng = np.random.default_rng(args.seed)
    total, done = args.rounds * len(groups) * len(LAYOUTS), 0
    for round_ in range(args.rounds):
        for g in rng.permutation(len(groups)):
            _, task, tables = groups[g]
            doubled, placement = copies_task(task, tables)
            for layout in rng.permutation(LAYOUTS):
                cost = backends[layout].measure(doubled, placement)
                first, second = (d.fwd_comp + d.bwd_comp for d in cost.devices)
                logs[layout][g].append(float(np.log(second / first)))
                done += 1
            print(
                f"round {round_ + 1}/{args.rounds}: {done}/{total} measurements, "
                f"{(time.monotonic() - began) / 60:.1f} min",
                end="\r",
                flush=True,
            )
    print()
    return {
        "args": vars(args),
        "date": time.strftime("%Y-%m-%d"),
        "hardware": hardware(),
        "versions": versions(),
        "groups": [{"suite": s, "task": t.name, "tables": len(tables)} for s, t, tables in groups],
        "logs": logs,  # layout -> group -> rounds: log(second copy / first)
        "seconds": time.monotonic() - began,
    }


def figures(logs: list[list[float]]) -> tuple[float, float]:
    """(between groups, within a group): see the module's docstring."""
    values = [np.array(v) for v in logs]
    return float(np.std([v.mean() for v in values])), float(np.mean([v.std() for v in values]))


def render(result: dict) -> str:
    args = result["args"]
    suites = list(dict.fromkeys(g["suite"] for g in result["groups"]))
    header = ["layout", "figure", *suites, "all"]
    table = []
    for layout, logs in result["logs"].items():
        by_suite = {
            s: figures([v for v, g in zip(logs, result["groups"]) if g["suite"] == s])
            for s in suites
        }
        every = figures(logs)
        for k, figure in enumerate(("between groups (fixed)", "within a group (drawn anew)")):
            values = [f"{by_suite[s][k]:.3f}" for s in suites]
            table.append([layout, figure, *values, f"{every[k]:.3f}"])
    command = (
        f".venv/bin/python benchmarks/layout_effect.py --suites {args['suites']} "
        f"--rounds {args['rounds']}"
    )
    lines = [
        f"# Does a device's measured time depend on where its memory lands? ({result['date']})",
        f"Command: `{command}`; {result['seconds'] / 60:.1f} min in all. Host: "
        f"{result['hardware']} (one host for every figure); {result['versions']}. fbgemm "
        "backend, fused kernels timed on cpu, fp32.",
        f"Groups: every busy device of the heuristics {', '.join(HEURISTICS)} (whole tables) on "
        f"the first test task of each suite, {len(result['groups'])} in all, each timed as two "
        f"identical copies in one measurement, under each layout, in {args['rounds']} "
        "interleaved rounds. 'fixed': the groups built in device order (every measurement "
        "before 2026-12-05); 'shuffled': in a fresh random order, each after a spacer of random "
        "size.",
        "Figures: spreads (standard deviations) of log(second copy / first); between groups: of "
        "each group's mean over rounds (what a layout fixes for good); within a group: over its "
        "rounds, mean over groups (what each measurement draws afresh). 0.05 is about 5%.",
        markdown_table(header, table),
    ]
    return "\n\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suites", default=",".join(SUITES), help="cpu suites, comma-separated")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--seed", type=int, default=0, help="the rounds' orders")
    report_options(parser, "benchmarks/results/layout_effect.md")
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("--rounds must be at least 2")
    return args


def main(argv: list[str] | None = None) -> int:
    return write_run(parse_args(sys.argv[1:] if argv is None else argv), run, render)


if __name__ == "__main__":
    run_script(main)
