"""How uneven a perfectly even plan measures on real kernels, beside dreamshard's plan (issue 28:
how much of the `--split auto` plan's measured imbalance any plan would show on this host).

Run: .venv/bin/python benchmarks/even_plan_noise.py [--model shipped|FILE]
         [--suites cpu-50x4,cpu-100x4,cpu-100x8,cpu-200x8] [--tasks 3] [--rounds 6] [--rerender]

A plan's cost is its busiest device's, so even a plan whose devices do exactly the same work
measures above its devices' mean: each device's timing has its own noise, and the busiest is
the one the noise raised most. Per suite its first `--tasks` test tasks (those
`benchmarks/compare_planners.py` judges), and per task, in `--rounds` interleaved rounds (each
in a fresh order): dreamshard `--split auto`'s plan with `--model` (its devices relabelled at
random each round), and an even plan of the same size: the group of the plan's first device
copied onto every device (each copy its own kernel and its own copy of the trace), timed as
the fbgemm backend times a plan's devices (`time_groups_with_reference`, under the host's
measurement lock).

Unevenness of the plan: the median over rounds of its busiest device's total (compute and
exchange: its cost), over the mean over devices of each device's median total, minus 1 (what
`fbgemm_floor.py` calls a plan's imbalance, here as a share of its own mean device total). Of
the even plan: the same over its compute, scaled by the plan's mean compute over its mean total
(the same milliseconds, as a share of the plan's mean device total). The even plan's is what no
placement can avoid here; the plan's past it is what a better balance could still take.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from benchmarks.dmp_headroom import geomean_interval
from benchmarks.fbgemm_floor import judged_tasks, suite_options, tasks_line
from benchmarks.measured_variants import relabelled
from benchmarks.parts.models import trained_on
from benchmarks.script_entry import report_options, run_line, run_script, write_run
from dreamshard.costs.backends import describe_costs, make_backend
from dreamshard.costs.dataset import hardware, versions
from dreamshard.costs.fbgemm import device_groups
from dreamshard.costs.host_lock import host_lock
from dreamshard.costs.reference import reference_tables
from dreamshard.learn.model_file import resolve_model
from dreamshard.placement.registry import named_planner
from dreamshard.placement.tasks import shard_view
from dreamshard.report import markdown_table
from dreamshard.tables.traces import table_batch_size


def uneven(compute: np.ndarray) -> float:
    """[rounds, devices] compute of a plan's busy devices: its busiest device's median over
    rounds past the devices' mean median, as a share of that mean."""
    return float(np.median(compute.max(axis=1)) / np.median(compute, axis=0).mean() - 1)


def even_compute(group, devices: int, backend) -> np.ndarray:
    """[devices] compute (ms) of `group` copied onto every device, timed as the backend times a
    plan's devices, the reference group beside them."""
    from dreamshard.costs.tbe import GroupInput, time_groups_with_reference

    copies = [
        GroupInput(list(group.rows), list(group.dims), group.indices.copy(), group.offsets.copy())
        for _ in range(devices)
    ]
    tables = reference_tables()
    reference = GroupInput.of(tables, table_batch_size(tables, backend.batch_size))
    with host_lock():
        timings, _ = time_groups_with_reference(copies, reference, backend.timing)
    return np.array([t.fwd_ms + t.bwd_ms for t in timings])


def measure_task(task, plan, backend, rounds: int, seed: int) -> dict:
    """Per round each of the plan's devices' total (compute and exchange, relabelled back) and
    compute, and the even plan's compute."""
    n = task.num_devices
    group = device_groups(task, plan, table_batch_size(task.tables, backend.batch_size))[0]
    rng = np.random.default_rng(seed)
    total, compute, even = np.zeros((rounds, n)), np.zeros((rounds, n)), np.zeros((rounds, n))
    for r in range(rounds):
        for which in rng.permutation(2):
            if which == 0:
                labels = rng.permutation(n)
                measured = backend.measure(task, relabelled(plan, labels)).devices
                devices = [measured[i] for i in labels]
                total[r] = [d.total for d in devices]
                compute[r] = [d.fwd_comp + d.bwd_comp for d in devices]
            else:
                even[r] = even_compute(group, n, backend)
    busy = compute[0] > 0
    # the even plan's unevenness in ms, as a share of the plan's mean device total
    share = np.median(compute[:, busy], axis=0).mean() / np.median(total[:, busy], axis=0).mean()
    return {
        "task": task.name,
        "total": total.tolist(),
        "compute": compute.tolist(),
        "even": even.tolist(),
        "plan_uneven": uneven(total[:, busy]),
        "even_uneven": uneven(even) * float(share),
        "busy_devices": int(busy.sum()),
    }


def run(args: argparse.Namespace) -> dict:
    began = time.monotonic()
    model = resolve_model(args.model)
    backend = make_backend("fbgemm")
    suites = {}
    for suite, tasks in judged_tasks(args.suites, args.tasks):
        records = []
        for t, task in enumerate(tasks):
            plan = named_planner("dreamshard", model, split="auto")(task, 0)
            record = measure_task(task, plan, backend, args.rounds, seed=t)
            record["predicted"] = predicted(model, task, plan)
            records.append(record)
            print(
                f"{task.name}: plan {record['plan_uneven']:.1%} uneven, even plan "
                f"{record['even_uneven']:.1%}",
                flush=True,
            )
        suites[suite] = records
    return {
        "args": vars(args),
        "hardware": hardware(),
        "versions": versions(),
        "costs": describe_costs(backend.config()),
        "model": f"`{args.model}` ({trained_on(model)})",
        "suites": suites,
        "seconds": time.monotonic() - began,
    }


def predicted(model, task, plan) -> dict:
    """What the model predicts of the plan's devices: totals and compute in ms, and how many
    tables or shards each device holds."""
    shards, view = shard_view(task, plan)
    devices, _ = model.costnet.predict_ms(shards, view)
    return {
        "total": devices.sum(axis=1).tolist(),
        "compute": (devices[:, 0] + devices[:, 2]).tolist(),
        "tables": [len(m) for m in view.device_tables(task.num_devices)],
    }


def busiest_rows(result: dict) -> list[list]:
    """Per task: the device the model predicts busiest (its tables, predicted and measured total)
    beside the device measured busiest, and the range over the plan's busy devices of measured
    over predicted compute."""
    rows = []
    for records in result["suites"].values():
        for r in records:
            measured = np.median(np.array(r["total"]), axis=0)
            compute = np.median(np.array(r["compute"]), axis=0)
            predicted = np.array(r["predicted"]["total"])
            ratio = compute / np.array(r["predicted"]["compute"])
            busy = compute > 0
            p, m = int(np.argmax(predicted)), int(np.argmax(measured))
            rows.append(
                [
                    r["task"],
                    r["predicted"]["tables"][p],
                    f"{predicted[p]:.1f} / {measured[p]:.1f}",
                    r["predicted"]["tables"][m],
                    f"{predicted[m]:.1f} / {measured[m]:.1f}",
                    f"{ratio[busy].min():.2f}-{ratio[busy].max():.2f}",
                ]
            )
    return rows


def cells(records: list[dict]) -> list[str]:
    plan = [r["plan_uneven"] for r in records]
    even = [r["even_uneven"] for r in records]
    ratio, low, high = geomean_interval([np.log((1 + p) / (1 + e)) for p, e in zip(plan, even)])
    return [
        f"{np.mean(plan):.1%}",
        f"{np.mean(even):.1%}",
        f"{np.mean(np.array(plan) - np.array(even)):.1%}",
        f"{ratio:.3f} [{low:.3f}, {high:.3f}]",
    ]


def render(result: dict) -> str:
    args = result["args"]
    rows, pooled = [], []
    for suite, records in result["suites"].items():
        pooled += records
        rows.append([suite, len(records), *cells(records)])
    rows.append(["all", len(pooled), *cells(pooled)])
    header = [
        "suite",
        "tasks",
        "dreamshard --split auto uneven",
        "even plan uneven",
        "the plan's past it",
        "plan's busiest / even plan's (over their means)",
    ]
    lines = [
        f"# How uneven an even plan measures on real kernels ({time.strftime('%Y-%m-%d')})",
        run_line("even_plan_noise.py", result),
        f"Costs: {result['costs']}; compute only (fused kernels' forward and backward). "
        f"{args['rounds']} interleaved rounds, each in a fresh order; the plan's devices "
        "relabelled at random each round.",
        f"{tasks_line(args)} Model: {result['model']}.",
        "Even plan: the group of dreamshard `--split auto`'s first device copied onto every "
        "device, each copy its own kernel. Uneven: the median over rounds of the busiest "
        "device's total (compute and exchange) over the devices' mean median total, minus 1; "
        "the even plan's over its compute, as a share of the plan's mean total; mean over "
        "tasks; "
        "past it: the plan's minus the even plan's; the last column: (1 + the plan's) over "
        "(1 + the even plan's), geometric mean over tasks [bootstrap 95%].",
        markdown_table(header, rows),
        "## Where the plan's busiest device is\n\nPer task, the device the model predicts "
        "busiest and the device measured busiest: the tables (or shards) on it, its predicted "
        "/ measured total in ms (medians over rounds); and the range over the plan's busy "
        "devices of measured over predicted compute (one factor on every device would leave the "
        "balance as predicted).",
        markdown_table(
            [
                "task",
                "predicted busiest: tables",
                "predicted / measured ms",
                "measured busiest: tables",
                "predicted / measured ms",
                "measured / predicted compute",
            ],
            busiest_rows(result),
        ),
    ]
    return "\n\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="shipped", help="dreamshard's model (default shipped)")
    suite_options(parser)
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds")
    report_options(parser, "benchmarks/results/even_plan_noise.md")
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("--rounds must be at least 2")
    return args


def main(argv: list[str] | None = None) -> int:
    return write_run(parse_args(sys.argv[1:] if argv is None else argv), run, render)


if __name__ == "__main__":
    run_script(main)
