"""How well each source of costs predicts a plan's devices on real kernels (issue 28: what
unbalances the planner's plans on this host).

Run: .venv/bin/python benchmarks/device_error.py [--plans benchmarks/results/finetune_study.json]
         [--placements 30] [--rerender]

The judged plans are the four heuristics' whole-table plans of the tasks in `--plans` (a
finetune_study.py run: each device's compute measured in its interleaved rounds). A source's
error on a plan is the spread over its busy devices of log(measured / predicted compute),
medians over rounds: what unbalances a plan the source thought even (one factor off on every
device leaves the balance as predicted). Sources:

- the shipped network;
- the shipped network fitted as `train` fits it on fbgemm (the simulated prior of 2,000
  cpu-50x4 placements, then the measurements; `--finetune all` and `quantities`) on
  `--placements` measured placements of cpu-50x4's training tasks (the main job's suite), and
  on as many of each of the four suites' training tasks (`--placements` x 4, the "split" mix
  for a quarter: the shards `--split auto` weighs);
- the sum of each table's kernel measured alone (every table of a task on a device of its
  own, in one round-robin), its geometric mean with the shipped network's prediction, and the
  network's prediction scaled per device by that sum over the network's own sum of the same
  tables alone (a per-device correction from the tables measured alone: additive, so a
  search could carry it);
- the calibrated analytic model (`costs/simulated.py`, the simulated prior's labels) as
  shipped, and refitted on the judged devices themselves (in-sample, 8 non-negative weights on
  its group features): how close any fit on those features can come.

Also the measurement's own noise: each device's round-to-round spread after its plan's
common factor (what a perfect source would still show in one round).
Measurements are stored in .dreamshard/device_error/costs.sqlite and read back, never
measured twice.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.script_entry import report_options, run_script, write_run
from dreamshard.costs.backends import make_backend
from dreamshard.costs.collect import Job, collect, collection_jobs
from dreamshard.costs.dataset import CostDataset, hardware, versions
from dreamshard.costs.simulated import SimulatedBackend, SimulatedModel, fit_model
from dreamshard.errors import DreamshardError
from dreamshard.learn.costnet_data import load_examples, measured_rows
from dreamshard.learn.costnet_fit import fit_costnet
from dreamshard.learn.model_file import resolve_model
from dreamshard.learn.pretrain import pretrain_costnet
from dreamshard.learn.train import TrainConfig, fresh_state
from dreamshard.placement.heuristics import HEURISTIC_KEYS
from dreamshard.placement.registry import place
from dreamshard.placement.suites import held_out, make_suite, parse_suite_name
from dreamshard.placement.tasks import Placement
from dreamshard.report import markdown_table
from dreamshard.state import state_dir

MAIN_SUITE = "cpu-50x4"  # the main job's
SUITES = ("cpu-50x4", "cpu-100x4", "cpu-100x8", "cpu-200x8")


def fitted_network(backend, examples, prior_rows, part: str):
    """The shipped network fitted as `train` fits it on fbgemm: the simulated prior of the
    main suite scaled by `prior_rows`, then `examples` with `--finetune part`."""
    config = TrainConfig(backend="fbgemm", finetune=part, costnet_steps=900, iterations=1)
    state = fresh_state(config, backend)
    suite = make_suite(parse_suite_name(MAIN_SUITE, num_train_tasks=config.train_tasks))
    pretrain_costnet(state, config, suite, prior_rows, log=lambda *_: None)
    fit_costnet(state, config, examples)
    return state.costnet


def alone_job(task) -> Job:
    """Every table of `task` on a device of its own: one measurement times each table's kernel
    alone, all of them in one round-robin."""
    count = len(task.tables)
    alone = replace(task, num_devices=count, name=f"{task.name}/alone")
    return Job(alone, Placement(tuple(range(count)), "alone"))


def predictions(task, plan, networks: dict, single: np.ndarray, its_own: np.ndarray) -> dict:
    """Each source's compute of `plan`'s devices: each network's, the tables' kernels measured
    alone (`single`) summed per device, the geometric mean of that sum and the shipped
    network's, and the shipped network's scaled per device by that sum over its own view of
    the same tables alone (`its_own`)."""
    found = {}
    for name, network in networks.items():
        costs, _ = network.predict_ms(task, plan)
        found[name] = costs[:, 0] + costs[:, 2]
    devices = np.array(plan.devices)
    summed = np.bincount(devices, weights=single, minlength=task.num_devices)
    network = np.maximum(found["shipped network"], 1e-6)
    own = np.bincount(devices, weights=its_own, minlength=task.num_devices)
    found["tables alone, summed"] = summed
    found["geometric mean of the two"] = np.sqrt(summed * network)
    found["network x measured / its own alone, summed"] = network * summed / np.maximum(own, 1e-6)
    return found


def analytic_spreads(judged: list[tuple[str, np.ndarray, np.ndarray]]) -> dict:
    """The analytic model's spreads on `judged` (suite, measured compute, features) per plan:
    as shipped, and refitted on all the judged busy devices at once (in-sample)."""
    busy = [(m > 0) for _, m, _ in judged]
    features = np.concatenate([f[b] for (_, _, f), b in zip(judged, busy)])
    target = np.concatenate([m[b] for (_, m, _), b in zip(judged, busy)])
    shipped = SimulatedModel.load()
    refitted = fit_model(features, target, target)  # both terms fitted to the compute: one read
    models = {
        "analytic model, as shipped": lambda f: sum(shipped.predict(f)),
        "analytic model, refitted on these devices (in-sample)": lambda f: refitted.predict(f)[0],
    }
    rows: dict[str, dict[str, list[float]]] = {}
    for name, compute in models.items():
        for suite, measured, features in judged:
            rows.setdefault(name, {}).setdefault(suite, []).append(
                spread(measured, compute(features))
            )
    return rows


def spread(measured: np.ndarray, predicted: np.ndarray) -> float:
    busy = measured > 0
    return float(np.std(np.log(measured[busy] / np.maximum(predicted[busy], 1e-6))))


def plan_noise(device_compute: np.ndarray) -> float:
    """[rounds, plans, devices]: each device's round-to-round spread of log compute after its
    plan's common factor that round, mean over plans."""
    logs = np.log(np.where(device_compute > 0, device_compute, 1.0))
    busy = device_compute.min(axis=0) > 0
    spreads = []
    for p in range(device_compute.shape[1]):
        own = logs[:, p, busy[p]] - np.median(logs[:, p, busy[p]], axis=0)
        spreads.append(np.std(own - own.mean(axis=1, keepdims=True)))
    return float(np.mean(spreads))


def run(args: argparse.Namespace) -> dict:
    began = time.monotonic()
    path = Path(args.plans)
    if not path.exists():
        raise DreamshardError(f"no {path}: run benchmarks/finetune_study.py first")
    study = json.loads(path.read_text())
    backend = make_backend("fbgemm")
    config = backend.config()
    folder = state_dir() / "device_error"
    folder.mkdir(parents=True, exist_ok=True)
    dataset = CostDataset(folder / "costs.sqlite")
    tasks = {
        t.name: t
        for suite in study["suites"]
        for t in make_suite(parse_suite_name(suite, 1, study["args"]["tasks"])).test_tasks
    }
    main_suite = make_suite(parse_suite_name(MAIN_SUITE, num_train_tasks=50))
    main_jobs = list(collection_jobs(main_suite, args.placements))
    every_jobs = []
    for name in SUITES:
        suite = make_suite(parse_suite_name(name, num_train_tasks=50))
        split = args.placements // 4
        every_jobs += collection_jobs(suite, args.placements - split)
        every_jobs += collection_jobs(suite, split, "split")
    alone = {name: alone_job(task) for name, task in tasks.items()}
    collect(main_jobs + every_jobs + list(alone.values()), backend, dataset, "device_error")
    examples = load_examples(dataset, config)
    singles = {e.task: e.device_targets[:, 0] + e.device_targets[:, 2] for e in examples}
    fitting = [e for e in examples if not held_out(e.task)]  # the suites' test tasks left out
    main_examples = [e for e in fitting if e.task.startswith(f"{MAIN_SUITE}/")]
    prior_rows = [
        r
        for r in measured_rows(dataset, config, fitting=True)
        if r["task"].startswith(f"{MAIN_SUITE}/")
    ]
    shipped = resolve_model("shipped").costnet
    networks = {"shipped network": shipped}
    for part in ("all", "quantities"):
        networks[f"fitted {part}, {MAIN_SUITE}"] = fitted_network(
            backend, main_examples, prior_rows, part
        )
        networks[f"fitted {part}, four suites"] = fitted_network(backend, fitting, prior_rows, part)
    rows: dict[str, dict[str, list[float]]] = {}
    noise, judged, analytic = {}, [], SimulatedBackend()
    for suite, records in study["suites"].items():
        noise[suite] = []
        for record in records:
            task = tasks[record["task"]]
            device_compute = np.array(record["device_compute"])
            noise[suite].append(plan_noise(device_compute))
            measured = np.median(device_compute, axis=0)
            single = singles[f"{task.name}/alone"]
            job = alone[task.name]
            its_own, _ = shipped.predict_ms(job.task, job.placement)  # the network's view
            its_own = its_own[:, 0] + its_own[:, 2]
            for key in HEURISTIC_KEYS:
                plan = place(task, key, split="none")
                got = measured[record["names"].index(key)]
                judged.append((suite, got, analytic.device_features(task, plan)))
                for name, predicted in predictions(task, plan, networks, single, its_own).items():
                    rows.setdefault(name, {}).setdefault(suite, []).append(spread(got, predicted))
    rows |= analytic_spreads(judged)
    return {
        "args": vars(args),
        "date": time.strftime("%Y-%m-%d"),
        "hardware": hardware(),
        "versions": versions(),
        "examples": {"main": len(main_examples), "four suites": len(fitting)},
        "spreads": rows,
        "noise": noise,
        "seconds": time.monotonic() - began,
    }


def render(result: dict) -> str:
    args = result["args"]
    suites = list(next(iter(result["spreads"].values())))
    header = ["source", *suites, "all"]
    table = []
    for name, by_suite in result["spreads"].items():
        every = [v for values in by_suite.values() for v in values]
        table.append(
            [name, *(f"{np.mean(by_suite[s]):.3f}" for s in suites), f"{np.mean(every):.3f}"]
        )
    every_noise = [v for values in result["noise"].values() for v in values]
    table.append(
        [
            "(measurement noise, one round)",
            *(f"{np.mean(result['noise'][s]):.3f}" for s in suites),
            f"{np.mean(every_noise):.3f}",
        ]
    )
    command = (
        f".venv/bin/python benchmarks/device_error.py --plans {args['plans']} "
        f"--placements {args['placements']}"
    )
    lines = [
        f"# How well each source predicts a plan's devices on real kernels ({result['date']})",
        f"Command: `{command}`; {result['seconds'] / 60:.1f} min in all. Host: "
        f"{result['hardware']} (one host for every figure); {result['versions']}. fbgemm "
        "backend, fused kernels timed on cpu, fp32.",
        f"Plans judged: the four heuristics' whole-table plans of the tasks in `{args['plans']}`"
        ", each device's compute the median over that run's interleaved rounds. Fitted: "
        f"{result['examples']['main']} placements of {MAIN_SUITE}'s training tasks, or "
        f"{result['examples']['four suites']} of the four suites' (a quarter of each suite's "
        "of split tables, these included in the first), after the simulated prior; 900 steps, "
        "mse, seed 0.",
        "Figures: the spread (standard deviation) over a plan's busy devices of log(measured / "
        "predicted compute), mean over plans; 0.05 is about 5% per device. Noise: each "
        "device's round-to-round spread after its plan's common factor.",
        markdown_table(header, table),
    ]
    return "\n\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--plans",
        default="benchmarks/results/finetune_study.json",
        help="a finetune_study.py run's results (the plans measured)",
    )
    parser.add_argument(
        "--placements", type=int, default=30, help="placements measured per suite to fit on"
    )
    report_options(parser, "benchmarks/results/device_error.md")
    args = parser.parse_args(argv)
    if args.placements < 4:
        parser.error("--placements must be at least 4")
    return args


def main(argv: list[str] | None = None) -> int:
    return write_run(parse_args(sys.argv[1:] if argv is None else argv), run, render)


if __name__ == "__main__":
    run_script(main)
