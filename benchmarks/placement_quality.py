"""DreamShard against the heuristics on real fbgemm measurements, zero-shot suites included.

Run: .venv/bin/python benchmarks/placement_quality.py --model RUN/model.pt
     [--suites cpu-50x4,cpu-100x4,cpu-100x8,cpu-200x8] [--tasks 3] [--rounds 5]

Every planner places the held-out test tasks of every suite (the model was trained on one
suite's training pool; the test pool is disjoint); all placements are measured in one
interleaved run, `--rounds` rounds, and compared by paired ratios within rounds. Also reports
the cost network's accuracy on these fresh measurements (the policy's own placements among
them) and planning speed at data-set scale (856 tables on 128 devices). Writes
benchmarks/results/placement_quality.md.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from scipy import stats

from dreamshard.costs.backends import make_backend
from dreamshard.costs.dataset import hardware, versions
from dreamshard.evaluation.rounds import geometric_mean, measure_interleaved
from dreamshard.files import write_text_atomic
from dreamshard.learn.model_file import load_model
from dreamshard.methods import place
from dreamshard.placement.heuristics import HEURISTIC_KEYS
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import PlacementTask
from dreamshard.progress import Progress
from dreamshard.report import format_table
from dreamshard.tables.synthetic import generate_tables

RESULTS = Path(__file__).parent / "results" / "placement_quality.md"
PLANNERS = ["random", *HEURISTIC_KEYS, "dreamshard-greedy", "dreamshard"]


def plan(task, planner, model, samples):
    start = time.perf_counter()
    if planner == "dreamshard-greedy":
        placement = place(task, "dreamshard", model=model, samples=0)
    elif planner == "dreamshard":
        placement = place(task, "dreamshard", model=model, samples=samples)
    else:
        placement = place(task, planner)
    return placement, (time.perf_counter() - start) * 1000


def suite_table(costs: np.ndarray) -> tuple[list[list], dict]:
    """costs [rounds, tasks, planners] -> rows of ratios per planner, and the headline ratios."""
    heuristic = [PLANNERS.index(k) for k in HEURISTIC_KEYS]
    mean = costs.mean(axis=0)  # [tasks, planners]
    strongest = heuristic[int(np.argmin(mean[:, heuristic].mean(axis=0)))]
    per_task_best = [heuristic[int(np.argmin(mean[t, heuristic]))] for t in range(len(mean))]
    best_known = [int(np.argmin(mean[t])) for t in range(len(mean))]

    def ratio(j, reference):  # per task: geometric mean over rounds of paired ratios
        return np.array(
            [
                geometric_mean(costs[:, t, j] / costs[:, t, reference[t]])
                for t in range(costs.shape[1])
            ]
        )

    rows, headline = [], {}
    for j, name in enumerate(PLANNERS):
        a = ratio(j, [strongest] * costs.shape[1])
        b = ratio(j, per_task_best)
        c = ratio(j, best_known)
        spread = [f"{x.mean():.3f} ({x.min():.2f}-{x.max():.2f})" for x in (a, b, c)]
        rows.append([name, float(mean[:, j].mean()), *spread])
        headline[name] = (a.mean(), b.mean(), c.mean())
    headline["strongest"] = PLANNERS[strongest]
    return rows, headline


def cost_model_accuracy(model, items, breakdowns) -> str:
    from dreamshard.planners.dreamshard_planner import predicted_overall

    rows = []
    for label, keep in (
        ("all placements", lambda p: True),
        ("the policy's own", lambda p: p.startswith("dreamshard")),
    ):
        pred, true, device_err = [], [], {k: [] for k in ("fwd_comp", "bwd_comm", "bwd_comp")}
        for i, (task, placement, planner) in enumerate(items):
            if not keep(planner):
                continue
            measured = breakdowns[i]
            pred.append(predicted_overall(model, task, [placement])[0])
            true.append(np.mean([c.overall for c in measured]))
            per_device, _ = model.costnet.predict_ms(task, placement)
            for d in range(task.num_devices):
                for k, term in enumerate(device_err):
                    value = np.mean([getattr(c.devices[d], term) for c in measured])
                    if value > 1e-6:
                        device_err[term].append(abs(per_device[d, k] / value - 1))
        rho = stats.spearmanr(pred, true).statistic
        mape = np.mean(np.abs(np.array(pred) / np.array(true) - 1))
        rows.append(
            [
                label,
                len(pred),
                f"{mape:.1%}",
                f"{rho:.3f}",
                *(f"{np.mean(v):.1%}" for v in device_err.values()),
            ]
        )
    return format_table(
        [
            "placements",
            "n",
            "overall MAPE",
            "overall Spearman",
            "fwd_comp MAPE",
            "bwd_comm MAPE",
            "bwd_comp MAPE",
        ],
        rows,
    )


def planning_speed(model, samples: int) -> str:
    tables = generate_tables("dlrm", 856, seed=0)
    sizes = [t.bytes() for t in tables]
    task = PlacementTask(tuple(tables), 128, int(max(max(sizes), 1.3 * sum(sizes) / 128)))
    rows = []
    for label, method, k in (
        ("size_lookup heuristic", "size_lookup", 0),
        ("dreamshard greedy", "dreamshard", 0),
        (f"dreamshard best of {samples}", "dreamshard", samples),
    ):
        start = time.perf_counter()
        place(task, method, model=model, samples=k)
        rows.append([label, time.perf_counter() - start])
    return format_table(["planner (856 tables, 128 devices)", "seconds"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--suites", default="cpu-50x4,cpu-100x4,cpu-100x8,cpu-200x8")
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=8)
    args = parser.parse_args()
    model = load_model(args.model)
    items, plan_ms = [], {p: [] for p in PLANNERS}
    suites = args.suites.split(",")
    for name in suites:
        for task in make_suite(parse_suite_name(name, 1, args.tasks)).test_tasks:
            for planner in PLANNERS:
                placement, ms = plan(task, planner, model, args.samples)
                items.append((task, placement, planner))
                plan_ms[planner].append(ms)
    backend = make_backend("fbgemm")
    progress = Progress(len(items) * args.rounds, "measuring")
    breakdowns: dict[int, list] = {i: [] for i in range(len(items))}

    def seen(r, i, cost):
        breakdowns[i].append(cost)
        progress.step(items[i][0].name)

    costs = measure_interleaved(
        backend, [(t, p) for t, p, _ in items], args.rounds, seed=3, on_measure=seen
    )
    progress.close()
    costs = costs.reshape(args.rounds, len(suites), args.tasks, len(PLANNERS))
    sections = [
        f"# Placement quality on real fbgemm kernels ({time.strftime('%Y-%m-%d')})",
        f"Host: {hardware()}; {versions()}. Model: {args.model} (trained on "
        f"{model.metadata.get('suite')}). {args.tasks} held-out test tasks per suite, "
        f"{args.rounds} interleaved rounds, communication modeled (cpu-gloo), memory caps bind. "
        "Ratios: geometric mean over rounds of paired ratios per task; mean (min-max) over tasks. "
        "(a) vs the strongest fixed heuristic (best mean on the suite), (b) vs the per-task best "
        "heuristic, (c) vs the best known (the best mean cost of any planner on that task).",
    ]
    headlines = {}
    for s, name in enumerate(suites):
        rows, headline = suite_table(costs[:, s])
        headlines[name] = headline
        table = format_table(
            ["planner", "mean ms", "(a) vs strongest", "(b) vs per-task best", "(c) vs best known"],
            rows,
        )
        zero_shot = "" if name == model.metadata.get("suite") else " (zero-shot)"
        sections.append(
            f"## {name}{zero_shot}: strongest fixed heuristic "
            f"{headline['strongest']}\n\n```\n{table}\n```"
        )
        print(sections[-1], flush=True)
    plan_rows = [[p, float(np.mean(v))] for p, v in plan_ms.items()]
    sections.append(
        "## Planning time per task (ms)\n\n```\n"
        + format_table(["planner", "ms"], plan_rows)
        + "\n```"
    )
    sections.append(
        "## Cost network on these fresh measurements\n\n```\n"
        + cost_model_accuracy(model, items, breakdowns)
        + "\n```"
    )
    sections.append(
        "## Planning speed at data-set scale\n\n```\n"
        + planning_speed(model, args.samples)
        + "\n```"
    )
    for text in sections[-3:]:
        print(text, flush=True)
    write_text_atomic(RESULTS, "\n\n".join(sections) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
