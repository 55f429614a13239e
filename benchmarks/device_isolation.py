"""Does a device's measured cost depend on the devices timed beside it? (issue 28: what
unbalances the planner's plans on real kernels.)

Run: .venv/bin/python benchmarks/device_isolation.py [--tasks 2] [--heuristics dim,lookup]
         [--rounds 2] [--rerender]

On a real cluster every device is its own GPU: its embedding kernel's cost depends on its own
tables only. The fbgemm backend times a plan's devices round-robin on one accelerator, so a
device's rows can stay in the shared last-level cache between its calls unless something evicts
them: the other devices' lookups, or a flush (`costs.tbe.TimingConfig.evict` says which bytes
count as evicting). This script measures the heuristics' plans of the first `--tasks` test tasks
of each cpu suite two ways, under each evict rule, interleaved in every round:

- in the plan: all of the plan's devices in one measurement (what the judge does);
- alone: each device's tables as a one-device task, measured by itself (always flushed).

Every time is divided by the reference group timed inside the same measurement
(`costs/reference.py`), so the host's drift between measurements cancels. Reported per rule:
the geometric mean of in the plan / alone over devices (1: the neighbours change nothing), the
spread over a plan's devices of log(in the plan / alone) after the plan's common factor (what
a per-device cost model cannot learn), and the shipped network's spread against each.
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
from dreamshard.learn.model_file import resolve_model
from dreamshard.placement.heuristics import HEURISTIC_KEYS
from dreamshard.placement.registry import place
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import Placement
from dreamshard.report import markdown_table

SUITES = ("cpu-50x4", "cpu-100x4", "cpu-100x8", "cpu-200x8")
RULES = ("weights", "touched")  # costs.tbe.EVICT_CHOICES: the old rule, then the fixed one


def relative(cost) -> np.ndarray:
    """Each device's compute over the reference group timed in the same measurement."""
    return np.array([d.fwd_comp + d.bwd_comp for d in cost.devices]) / cost.info["reference_ms"]


def alone_task(task, plan, device: int):
    """The tables `plan` puts on `device`, as a one-device task of their own."""
    members = [i for i, d in enumerate(plan.devices) if d == device]
    tables = tuple(task.tables[i] for i in members)
    return replace(task, tables=tables, num_devices=1, name=f"{task.name}/device{device}")


def within_spread(logs: np.ndarray) -> float:
    """The standard deviation of a plan's per-device logs after their mean."""
    return float(np.std(logs - logs.mean()))


def run(args: argparse.Namespace) -> dict:
    began = time.monotonic()
    backends = {rule: make_backend("fbgemm") for rule in RULES}
    for rule, backend in backends.items():
        backend.timing = replace(backend.timing, evict=rule)
    plans = []
    for name in args.suites.split(","):
        for task in make_suite(parse_suite_name(name, 1, args.tasks)).test_tasks:
            for key in args.heuristics.split(","):
                plan = place(task, key, split="none")
                busy = sorted(set(plan.devices))
                plans.append({"suite": name, "task": task, "key": key, "plan": plan, "busy": busy})
    jobs = []  # (plan index, device or None: the whole plan)
    for p, item in enumerate(plans):
        jobs.append((p, None))
        jobs += [(p, d) for d in item["busy"]]
    measured = {rule: {} for rule in RULES}
    rng = np.random.default_rng(args.seed)
    total, done = args.rounds * len(jobs) * len(RULES), 0
    for round_ in range(args.rounds):
        for j in rng.permutation(len(jobs)):
            p, device = jobs[j]
            item = plans[p]
            for rule in rng.permutation(RULES):
                if device is None:
                    cost = backends[rule].measure(item["task"], item["plan"])
                    value = relative(cost)[item["busy"]]
                else:
                    task = alone_task(item["task"], item["plan"], device)
                    cost = backends[rule].measure(task, Placement((0,) * len(task.tables), "alone"))
                    value = relative(cost)
                measured[rule].setdefault(f"{p}/{device}", []).append(value.tolist())
                done += 1
            print(
                f"round {round_ + 1}/{args.rounds}: {done}/{total} measurements, "
                f"{(time.monotonic() - began) / 60:.1f} min",
                end="\r",
                flush=True,
            )
    print()
    network = resolve_model("shipped").costnet
    records = []
    for p, item in enumerate(plans):
        predicted, _ = network.predict_ms(item["task"], item["plan"])
        compute = predicted[:, 0] + predicted[:, 2]
        record = {
            "suite": item["suite"],
            "task": item["task"].name,
            "heuristic": item["key"],
            "network": compute[item["busy"]].tolist(),
        }
        for rule in RULES:
            record[rule] = {
                "plan": np.array(measured[rule][f"{p}/None"]).tolist(),  # [rounds, busy]
                "alone": [np.ravel(measured[rule][f"{p}/{d}"]).tolist() for d in item["busy"]],
            }
        records.append(record)
    return {
        "args": vars(args),
        "date": time.strftime("%Y-%m-%d"),
        "hardware": hardware(),
        "versions": versions(),
        "config": {rule: backend.config() for rule, backend in backends.items()},
        "plans": records,
        "seconds": time.monotonic() - began,
    }


def rule_figures(records: list[dict], rule: str) -> dict[str, float]:
    """A rule's figures over `records` (plans): see the module's docstring."""
    ratio, spread, noise, net_plan, net_alone = [], [], [], [], []
    for record in records:
        in_plan = np.array(record[rule]["plan"])  # [rounds, busy]
        alone = np.array(record[rule]["alone"]).T  # [rounds, busy]
        plan_median, alone_median = np.median(in_plan, axis=0), np.median(alone, axis=0)
        logs = np.log(plan_median / alone_median)
        ratio += logs.tolist()
        spread.append(within_spread(logs))
        per_round = np.log(in_plan) - np.log(plan_median)
        noise.append(float(np.mean([within_spread(r) for r in per_round])))
        network = np.array(record["network"])
        net_plan.append(within_spread(np.log(plan_median / network)))
        net_alone.append(within_spread(np.log(alone_median / network)))
    return {
        "in the plan / alone": float(np.exp(np.mean(ratio))),
        "spread of in the plan / alone": float(np.mean(spread)),
        "network's spread, in the plan": float(np.mean(net_plan)),
        "network's spread, alone": float(np.mean(net_alone)),
        "noise, in the plan, one round": float(np.mean(noise)),
    }


def render(result: dict) -> str:
    args = result["args"]
    suites = list(dict.fromkeys(r["suite"] for r in result["plans"]))
    header = ["evict rule", "figure", *suites, "all"]
    table = []
    for rule in RULES:
        by_suite = {
            s: rule_figures([r for r in result["plans"] if r["suite"] == s], rule) for s in suites
        }
        every = rule_figures(result["plans"], rule)
        for figure, value in every.items():
            values = [f"{by_suite[s][figure]:.3f}" for s in suites]
            table.append([rule, figure, *values, f"{value:.3f}"])
    command = (
        f".venv/bin/python benchmarks/device_isolation.py --suites {args['suites']} --tasks "
        f"{args['tasks']} --heuristics {args['heuristics']} --rounds {args['rounds']}"
    )
    lines = [
        "# Does a device's measured cost depend on the devices timed beside it? "
        f"({result['date']})",
        f"Command: `{command}`; {result['seconds'] / 60:.1f} min in all. Host: "
        f"{result['hardware']} (one host for every figure); {result['versions']}. fbgemm "
        "backend, fused kernels timed on cpu, fp32; every time over the reference group timed "
        "in the same measurement.",
        f"Plans: the heuristics {args['heuristics']} (whole tables) of the first {args['tasks']}"
        f" test task(s) of each suite, {len(result['plans'])} in all; every plan measured whole "
        f"and each of its busy devices alone, under both evict rules, in {args['rounds']} "
        "interleaved rounds (medians over rounds). 'weights': a group is left unflushed when "
        "the other groups' whole weights exceed the flush size (every measurement before "
        "2026-12-05); 'touched': when the rows they look up do (the default since).",
        "Figures: in the plan / alone, the geometric mean over devices; the spreads, standard "
        "deviations over a plan's devices of the log ratio after the plan's common factor, "
        "mean over plans (0.05 is about 5% per device); the network is the shipped one.",
        markdown_table(header, table),
    ]
    return "\n\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suites", default=",".join(SUITES), help="cpu suites, comma-separated")
    parser.add_argument("--tasks", type=int, default=2, help="test tasks per suite")
    parser.add_argument(
        "--heuristics", default="dim,lookup", help=f"whose plans, of {', '.join(HEURISTIC_KEYS)}"
    )
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
    parser.add_argument("--seed", type=int, default=0, help="the rounds' orders")
    report_options(parser, "benchmarks/results/device_isolation.md")
    args = parser.parse_args(argv)
    unknown = set(args.heuristics.split(",")) - set(HEURISTIC_KEYS)
    if unknown:
        parser.error(f"unknown heuristics {sorted(unknown)}; choose of {', '.join(HEURISTIC_KEYS)}")
    if args.tasks < 1 or args.rounds < 2:
        parser.error("--tasks must be at least 1 and --rounds at least 2")
    return args


def main(argv: list[str] | None = None) -> int:
    return write_run(parse_args(sys.argv[1:] if argv is None else argv), run, render)


if __name__ == "__main__":
    run_script(main)
