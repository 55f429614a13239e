"""What fitting the shipped network to this host's measurements does to the planner on real
kernels, on the suites it was fitted on and the others (issue 28: the main job's model, the
default planner with `--split auto`, against the strongest whole-table heuristic).

Run: .venv/bin/python benchmarks/finetune_study.py [--suites cpu-50x4,cpu-100x4,cpu-100x8,cpu-200x8]
         [--tasks 3] [--rounds 4] [--iterations 3] [--rerender]

Trains two models by the main job's recipe as compare_planners.py trains it (cpu-50x4 on the
fbgemm backend, 20 warm-start placements, `--iterations` of 10 placements, from the shipped
network with the simulated prior, seed 0), one with `train --finetune all` (the measurements
fit every weight) and one with `--finetune quantities` (they fit only the quantity weights),
in .dreamshard/finetune_study/PART. Per task (the first `--tasks` test tasks of each suite,
those compare_planners.py judges) the four heuristics whole and dreamshard `--split auto` with
the shipped network and with each trained model are measured on fbgemm (fused kernels on this
host, the exchange modeled) in `--rounds` interleaved rounds, each round in a fresh order.

Reports each model's plans over the suite's strongest heuristic (the whole-table heuristic of
least mean cost over the suite's tasks, as compare_planners takes it), the paired ratio of the
two fitted models' plans, and each network's error per device on every plan measured: the
spread (standard deviation over a plan's devices) of log(measured / predicted compute), which
is what unbalances a plan the network thought even.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from benchmarks.dmp_headroom import geomean_interval
from benchmarks.fbgemm_floor import (
    judged_tasks,
    measure_task,
    strongest_heuristic,
    suite_options,
    tasks_line,
)
from benchmarks.parts.models import train_for_run, trained_on
from benchmarks.script_entry import report_options, run_line, run_script, write_run
from benchmarks.torchrec_e2e_figures import distinct
from dreamshard.costs.backends import describe_costs, make_backend
from dreamshard.costs.dataset import hardware, versions
from dreamshard.learn.model_file import resolve_model
from dreamshard.learn.train_config import TrainConfig
from dreamshard.placement.heuristics import HEURISTIC_KEYS
from dreamshard.placement.registry import named_planner, place
from dreamshard.report import markdown_table
from dreamshard.state import state_dir

PARTS = ("all", "quantities")  # `train --finetune`, the two fitted models
MODELS = ("shipped", *PARTS)


def plan_name(model: str) -> str:
    return f"dreamshard auto ({model})"


def device_spread(network, task, plan, measured: np.ndarray) -> float:
    """The spread over `plan`'s busy devices of log(measured / `network`'s predicted
    compute): 0 when the network is off by the same factor on every device."""
    predicted, _ = network.predict_ms(task, plan)
    predicted = predicted[:, 0] + predicted[:, 2]
    busy = measured > 0
    return float(np.std(np.log(measured[busy] / np.maximum(predicted[busy], 1e-6))))


def task_record(task, models: dict, backend, rounds: int, seed: int) -> dict:
    plans = {key: place(task, key, split="none") for key in HEURISTIC_KEYS}
    for name, model in models.items():
        plans[plan_name(name)] = named_planner("dreamshard", model, split="auto")(task, 0)
    record = measure_task(task, plans, backend, rounds, seed)
    unique, index = distinct(plans)
    per_device = np.median(np.array(record["device_compute"]), axis=0)  # [plans, devices]
    column = {i: record["names"].index(name) for name, i in index.items()}  # any of its names
    record["device_spread"] = {
        name: [
            device_spread(model.costnet, task, plan, per_device[column[i]])
            for i, plan in enumerate(unique)
        ]
        for name, model in models.items()
    }
    return record


def suite_figures(records: list[dict]) -> dict:
    """Over a suite's tasks: its strongest fixed heuristic and, per task, each model's plan
    over it (log of the mean over rounds of the paired ratio), the quantities model's plan over
    the all model's (paired), and each network's mean device spread."""
    names = records[0]["names"]
    strongest = strongest_heuristic(records)
    out = {"strongest": strongest, **{m: [] for m in MODELS}, "paired": [], "spread": {}}
    for r in records:
        logs = np.log(np.array(r["overall"]))
        column = {n: logs[:, names.index(n)] for n in names}
        for m in MODELS:
            out[m].append(float(np.mean(column[plan_name(m)] - column[strongest])))
        out["paired"].append(
            float(np.mean(column[plan_name("quantities")] - column[plan_name("all")]))
        )
    for m in MODELS:
        out["spread"][m] = float(np.mean([np.mean(r["device_spread"][m]) for r in records]))
    return out


def interval(logs: list[float]) -> str:
    ratio, low, high = geomean_interval(logs)
    return f"{ratio:.3f} [{low:.3f}, {high:.3f}]"


def render(result: dict) -> str:
    args = result["args"]
    rows, pooled = [], {m: [] for m in (*MODELS, "paired")}
    for suite, f in result["figures"].items():
        for key in pooled:
            pooled[key] += f[key]
        spreads = [f"{f['spread'][m]:.3f}" for m in MODELS]
        rows.append(
            [
                suite,
                len(f["paired"]),
                f["strongest"],
                *(interval(f[m]) for m in MODELS),
                interval(f["paired"]),
                *spreads,
            ]
        )
    every = [r for records in result["suites"].values() for r in records]
    spreads = [f"{np.mean([np.mean(r['device_spread'][m]) for r in every]):.3f}" for m in MODELS]
    rows.append(
        [
            "all",
            len(pooled["paired"]),
            "(each suite's)",
            *(interval(pooled[m]) for m in MODELS),
            interval(pooled["paired"]),
            *spreads,
        ]
    )
    header = [
        "suite",
        "tasks",
        "strongest heuristic",
        *(f"--split auto, {m} / it" for m in ("shipped", "fitted all", "fitted quantities")),
        "quantities / all (paired)",
        *(f"device spread, {m}" for m in ("shipped", "all", "quantities")),
    ]
    lines = [
        f"# Fitting the shipped network to this host: the planner on real kernels "
        f"({result['date']})",
        run_line("finetune_study.py", result),
        f"Costs: {result['costs']}. {args['rounds']} interleaved rounds, each in a fresh "
        "order; every distinct plan of a task measured once a round.",
        tasks_line(args),
        "Models: shipped: the package's network, not fitted here; "
        + "; ".join(f"{part}: {result['models'][part]}" for part in PARTS)
        + ".",
        "Ratios: per task the mean over rounds of the log of the plan's cost over the "
        "strongest heuristic's in the same round, then the geometric mean over tasks "
        "[bootstrap 95% over tasks]; below 1 is better. Device spread: per plan measured (every "
        "distinct plan of the task, the heuristics' included), the standard deviation over its "
        "busy devices of log(measured / predicted compute), medians over rounds; mean over "
        "plans and tasks (0: off by one factor on every device, which leaves the balance as "
        "predicted).",
        markdown_table(header, rows),
    ]
    return "\n\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    suite_options(parser)
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds")
    parser.add_argument("--iterations", type=int, default=3, help="training iterations")
    report_options(parser, "benchmarks/results/finetune_study.md")
    args = parser.parse_args(argv)
    if min(args.tasks, args.rounds, args.iterations) < 1:
        parser.error("--tasks, --rounds and --iterations must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    return write_run(parse_args(sys.argv[1:] if argv is None else argv), run, render)


def run(args: argparse.Namespace) -> dict:
    began = time.monotonic()
    models, sentences = {"shipped": resolve_model("shipped")}, {}
    for part in PARTS:
        config = TrainConfig(
            suite="cpu-50x4",
            backend="fbgemm",
            out=str(state_dir() / "finetune_study" / part),
            iterations=args.iterations,
            finetune=part,
        )
        models[part], sentences[part] = train_for_run(config, lambda line: print(line, flush=True))
        print(f"trained {part}: {trained_on(models[part])}", flush=True)
    backend = make_backend("fbgemm")
    suites, figures = {}, {}
    for suite, tasks in judged_tasks(args.suites, args.tasks):
        records = []
        for t, task in enumerate(tasks):
            started = time.monotonic()
            record = task_record(task, models, backend, args.rounds, seed=t)
            record["task"] = task.name
            records.append(record)
            print(
                f"{task.name}: {record['distinct']} distinct plans, "
                f"{time.monotonic() - started:.0f} s",
                flush=True,
            )
        suites[suite] = records
        figures[suite] = suite_figures(records)
    return {
        "args": vars(args),
        "date": time.strftime("%Y-%m-%d"),
        "hardware": hardware(),
        "versions": versions(),
        "costs": describe_costs(backend.config()),
        "models": sentences,
        "suites": suites,
        "figures": figures,
        "seconds": time.monotonic() - began,
    }


if __name__ == "__main__":
    run_script(main)
