"""Plans judged by real TorchRec training steps (the `dmp` backend), and the proxy's validity.

Run: .venv/bin/python benchmarks/torchrec_e2e.py [--suite cpu-24x2] [--tasks 4] [--rounds 10]
         [--steps 30] [--warmup 5] [--proxy-rounds 3] [--model MODEL] [--out REPORT.md]
Smoke run: --tasks 1 --rounds 2 --steps 5 --proxy-rounds 1
DMP labels: .venv/bin/python benchmarks/torchrec_e2e.py --dmp-model DMP_MODEL --model KERNEL_MODEL
         [--suites cpu-24x2,cpu-48x2,cpu-80x2] [--tasks 8] [--rounds 10] [--steps 30]
    compares instead dreamshard with a cost network fitted on DMP steps against dreamshard with
    kernel labels, TorchRec's planner and lookup (`torchrec_e2e_labels.py`, issue 29).

On the suite's held-out tasks (2 devices: one process per device on this host's cores), every
plan below is built into TorchRec's DistributedModelParallel and trained for real
(`dreamshard/integrations/dmp_backend.py`, `gpu_tasks/dmp_step.py`): an EmbeddingBagCollection
of the task's tables, a dense tower and a loss, gloo on the CPU (NCCL on GPUs), batches from
the tables' traces. One torchrun launch per task trains all of its distinct plans in
`--rounds` interleaved rounds (a fresh order each round, `--warmup` steps then `--steps` timed
steps per turn); a plan's cost in a round is the slowest rank's median step. Ratios are paired
within rounds.

Plans: `dreamshard`, whole tables as in the paper (`--model`, else the registered champion when
the state folder has one, else a model trained here on the suite's training tasks with
`--train-backend`; the report says which) and `dreamshard_split` (the same model with
`--split auto`: it may cut tables column-wise); TorchRec's planner on our memory cap without
its reservation, restricted to table-wise (`torchrec_tw`), allowed column-wise too
(`torchrec_cw`, the sharding types `dreamshard_split` uses) and allowed row-wise as well
(`torchrec_split`, what `--method torchrec --split auto` gives); TorchRec's planner with its
defaults (`torchrec_default`: its own topology for this host's device kind, no memory cap of
ours, any sharding type; it may choose data-parallel, so it runs as TorchRec's own
ShardingPlan); and the heuristics `dim`,
`size`, `lookup`, `size_lookup`, `random` (whole tables). The same placements (all but
`torchrec_default`) are also measured by the in-process `fbgemm` proxy in `--proxy-rounds`
interleaved rounds, and the Spearman rank correlation of the proxy's costs with DMP's says how
well the proxy, on which every other figure rests, ranks plans as real training does.

Every figure is given twice: by the step's wall clock (the spec: the slowest rank's median
step) and by the slowest rank's CPU time in the step, which leaves out the time a rank was
preempted by other work on a shared host (`dreamshard/integrations/dmp_backend.py`).

Time with the defaults on the shared 2-core host: training the model about 2 min (simulated;
15+ min on fbgemm under load), the proxy about 3 min, DMP about 2.5 min per task. Writes the
report and its JSON beside it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torchrec_e2e_labels as labels

from benchmarks.parts.dmp_calibration import calibrate, measure_kernels
from benchmarks.parts.dmp_proxy import step_terms
from benchmarks.parts.models import (
    CHAMPION_URI,
    champion_or_none,
    train_command,
    train_for_run,
    trained_on,
)
from benchmarks.parts.report_files import write_report
from benchmarks.script_entry import run_script
from benchmarks.torchrec_e2e_figures import (
    CLOCKS,
    HEURISTICS,
    MODULE_PATH,
    balanced_bounds,
    distinct,
    run_head,
    summarize,
    task_record,
)
from benchmarks.torchrec_e2e_report import render
from dreamshard.costs.backends import describe_costs, make_backend
from dreamshard.costs.comm import get_topology
from dreamshard.evaluation.evaluate import distinct_items
from dreamshard.integrations.dmp_backend import DmpBackend, StepConfig
from dreamshard.integrations.torchrec_export import torchrec_default_plan
from dreamshard.integrations.torchrec_planner import torchrec_column_place, torchrec_place
from dreamshard.learn.model_file import resolve_model
from dreamshard.learn.train_config import TrainConfig
from dreamshard.placement.registry import named_planner, place
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.state import state_dir
from dreamshard.tables.traces import table_batch_size

RESULTS = Path(__file__).parent / "results" / "torchrec_e2e.md"
LABELS_RESULTS = Path(__file__).parent / "results" / "torchrec_e2e_labels.md"
PROFILE_PROGRAM = "gpu_tasks.dmp_step_profile"  # the torchrun program that profiles steps
PROFILED = (
    "lookup",
    "dreamshard",
    "torchrec_tw",
    "random",
    "dreamshard_split",
    "torchrec_cw",
    "torchrec_split",
)


def dreamshard_model(args: argparse.Namespace):
    """(model, a sentence saying which it is)."""
    if args.model:
        model = resolve_model(args.model)
        return model, f"`{args.model}`, {trained_on(model)} at {model.metadata.get('trained', '?')}"
    champion = champion_or_none()
    if champion is not None:
        return champion, f"the registered champion `{CHAMPION_URI}` of the state folder"
    out = state_dir() / "torchrec_e2e" / f"model-{args.train_backend}"
    config = TrainConfig(suite=args.suite, backend=args.train_backend, out=str(out))
    model, note = train_for_run(config, log=lambda line: print(line, flush=True), fresh=False)
    return model, f"no champion registered in the state folder, so a model {note}"


def place_task(task: PlacementTask, model, device: str) -> dict[str, Placement | dict]:
    plans: dict[str, Placement | dict] = {
        "dreamshard": named_planner("dreamshard", model)(task, 0),
        "dreamshard_split": named_planner("dreamshard", model, split="auto")(task, 0),
        "torchrec_tw": torchrec_place(task, reserve=False),
        "torchrec_cw": torchrec_column_place(task),
        "torchrec_split": torchrec_place(task, reserve=False, split="auto"),
        "torchrec_default": torchrec_default_plan(task, device, MODULE_PATH),
    }
    for name in HEURISTICS:
        plans[name] = place(task, name, split="none")
    return plans


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="cpu-24x2", help="held-out tasks of this suite")
    parser.add_argument("--tasks", type=int, default=4, help="held-out tasks")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved DMP rounds")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per plan and round")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up steps per turn")
    parser.add_argument("--proxy-rounds", type=int, default=4, help="fbgemm proxy rounds")
    parser.add_argument(
        "--calibration-tasks",
        type=int,
        default=2,
        help="training tasks whose designed plans fit the modeled DMP terms' constants",
    )
    parser.add_argument(
        "--calibration-rounds", type=int, default=5, help="DMP rounds of the calibration"
    )
    parser.add_argument("--model", help="model file or models:/ URI (default: see above)")
    parser.add_argument(
        "--train-backend",
        default="simulated",
        choices=["fbgemm", "simulated"],
        help="where a model trained here learns (default simulated: about 2 min; fbgemm took "
        "15+ min on the busy shared host)",
    )
    parser.add_argument(
        "--no-profile",
        dest="profile",
        action="store_false",
        help="skip profiling where the first task's steps spend their time",
    )
    parser.add_argument(
        "--dmp-model",
        help="compare instead dreamshard with this model (fitted on DMP step labels: dreamshard "
        "train --backend dmp) against dreamshard with --model (kernel labels), TorchRec's "
        "planner given the step's batch and lookup, on the held-out tasks of --suites "
        "(torchrec_e2e_labels.py); no calibration, proxy or profile",
    )
    parser.add_argument(
        "--suites",
        default="cpu-24x2,cpu-48x2,cpu-80x2",
        help="with --dmp-model: the suites whose first --tasks test tasks are compared",
    )
    parser.add_argument("--out", help=f"report (default {RESULTS}, or {LABELS_RESULTS})")
    return parser.parse_args(argv)


def compare_labels(args: argparse.Namespace, argv: list[str]) -> str:
    """The `--dmp-model` run (`torchrec_e2e_labels.py`)."""
    began = time.monotonic()
    dmp_model = resolve_model(args.dmp_model)
    kernel_model, kernel_note = dreamshard_model(args)
    backend = DmpBackend(StepConfig(warmup=args.warmup, steps=args.steps))
    log = lambda line: print(line, flush=True)  # noqa: E731
    suites = labels.measure_suites(args, backend, dmp_model, kernel_model, log)
    result = {
        **run_head(args, backend),
        "models": {
            "dreamshard_dmp": f"`{args.dmp_model}`, {trained_on(dmp_model)}, made by "
            f"`{train_command(dmp_model)}`",
            "dreamshard": f"{kernel_note}, made by `{train_command(kernel_model)}`",
        },
        "suites": suites,
        "figures": labels.figures(suites),
        "seconds": time.monotonic() - began,
    }
    report = labels.render(result, argv)
    write_report(args.out or LABELS_RESULTS, report, result)
    print(report)
    return report


def main(argv: list[str] | None = None) -> str:
    argv = sys.argv[1:] if argv is None else argv  # the report records the command as run
    args = parse_args(argv)
    if args.dmp_model:
        return compare_labels(args, argv)
    args.out = args.out or str(RESULTS)
    began = time.monotonic()
    loads, seconds = [os.getloadavg()[0]], {}

    def phase(name: str, since: float) -> float:
        seconds[name] = time.monotonic() - since
        loads.append(os.getloadavg()[0])
        return time.monotonic()

    model, model_note = dreamshard_model(args)
    seconds["model"] = time.monotonic() - began
    tasks = make_suite(parse_suite_name(args.suite, 1, args.tasks)).test_tasks
    # training tasks (never held out) for the calibration; the suite's draw of its held-out
    # tasks depends on how many training tasks it draws, so the held-out ones above are the
    # same as in the runs before the calibration
    calibration_tasks = make_suite(parse_suite_name(args.suite, args.calibration_tasks, 1))
    backend = DmpBackend(StepConfig(warmup=args.warmup, steps=args.steps))
    device = backend.device_kind()
    placed = [place_task(task, model, device) for task in tasks]
    proxy = make_backend("fbgemm")
    topology = get_topology("cpu-gloo" if device == "cpu" else "nvlink")

    # the modeled DMP terms' constants, fitted on designed plans of training tasks
    since = time.monotonic()
    step_models, calibration = calibrate(
        list(calibration_tasks.train_tasks),
        DmpBackend(StepConfig(warmup=args.warmup, steps=args.steps)),
        proxy,
        topology,
        args.calibration_rounds,
        args.proxy_rounds,
        log=lambda line: print(line, flush=True),
    )
    since = phase("calibration", since)

    # the proxy: every distinct placement of every task, one interleaved run
    ours = [[n for n, p in plans.items() if isinstance(p, Placement)] for plans in placed]
    items, index = distinct_items(tasks, [[ps[n] for n in ns] for ps, ns in zip(placed, ours)])
    where = [{n: index[(t, j)] for j, n in enumerate(names)} for t, names in enumerate(ours)]
    proxy_costs, kernels = measure_kernels(proxy, items, args.proxy_rounds, seed=1)
    batch = table_batch_size(tasks[0].tables, backend.batch_size)
    estimates = {  # the second proxy: [items] per clock, ms
        clock: np.array(
            [m.estimate(k, step_terms(t, p, batch, topology)) for (t, p), k in zip(items, kernels)]
        )
        for clock, m in step_models.items()
    }
    since = phase("proxy", since)

    per_task, profiled = [], []
    for t, (task, plans) in enumerate(zip(tasks, placed)):
        unique, plan_index = distinct(plans)
        print(f"{task.name}: {len(unique)} distinct plans under DMP", flush=True)
        run = backend.measure_plans(task, unique, args.rounds)
        loads.append(os.getloadavg()[0])
        per_task.append(task_record(task, plans, run, plan_index, proxy_costs, where[t], estimates))
    seconds["dmp"] = time.monotonic() - since
    profiled = (
        [step_profile(backend, t, ps) for t, ps in zip(tasks, placed)] if args.profile else []
    )
    seconds["all"] = time.monotonic() - began
    result = {
        **run_head(args, backend),
        "model": model_note,
        "proxy": describe_costs(proxy.config()),
        "loads": loads,
        "seconds": seconds,
        "tasks": per_task,
        "calibration": calibration,
        "topology": topology.name,
        "profile": profiled,
        "bounds": balanced_bounds(per_task, profiled),
        "summary": {clock: summarize(per_task, clock) for clock in CLOCKS},
    }
    report = render(result, argv)
    write_report(args.out, report, result)
    print(report)
    return report


def step_profile(backend: DmpBackend, task: PlacementTask, plans: dict) -> dict:
    """Per plan of `PROFILED` (distinct ones), per rank: the median step and its self CPU time
    by category (`gpu_tasks/dmp_step_profile.py`)."""
    unique, index = distinct({n: plans[n] for n in PROFILED})
    names = [next(n for n in PROFILED if index[n] == i) for i in range(len(unique))]
    job = {**backend.job(task, unique, rounds=1), "names": names}
    print(f"{task.name}: profiling {', '.join(names)}", flush=True)
    ranks = backend.run(job, task.num_devices, PROFILE_PROGRAM)["ranks"]
    return {"task": task.name, "plans": {n: [r[n] for r in ranks] for n in names}}


if __name__ == "__main__":
    run_script(main)
