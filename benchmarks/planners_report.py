"""The report of `compare_planners.py`: its markdown sections and its raw results files.

Every ratio comes from `dreamshard.evaluation.results.Evaluation` (the one definition of the
strongest fixed heuristic, the per-task best heuristic and the best known placement).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import time
from pathlib import Path

import numpy as np
from best_known import BEST_KNOWN

from dreamshard.costs.dataset import hardware, versions
from dreamshard.evaluation.results import REFERENCES, Evaluation
from dreamshard.evaluation.rounds import geometric_mean
from dreamshard.files import write_text_atomic
from dreamshard.report import format_table


def summarise(ratios: np.ndarray) -> dict | None:
    """Geometric mean and min-max over the tasks a planner placed (NaN: declined)."""
    ok = ratios[~np.isnan(ratios)]
    if not ok.size:
        return None
    return {
        "mean": float(geometric_mean(ok)),
        "min": float(ok.min()),
        "max": float(ok.max()),
        "tasks": int(ok.size),
    }


def cell(summary: dict | None, total: int) -> str:
    if summary is None:
        return "-"
    text = f"{summary['mean']:.3f} ({summary['min']:.2f}-{summary['max']:.2f})"
    return text if summary["tasks"] == total else f"{text} [{summary['tasks']}/{total}]"


TORCHREC_SAYS = "torchrec's planner rejects this task "


def short_reason(reason: str) -> str:
    kind = re.match(re.escape(TORCHREC_SAYS) + r"\((\w+)\)", reason)
    return f"rejected ({kind.group(1)})" if kind else reason


def suite_section(name: str, view: Evaluation, model_suite: str) -> tuple[str, dict]:
    ratios = {key: view.ratios(key) for key in REFERENCES}  # [task, planner] each
    n = len(view.tasks)
    rows, summary = [], {}
    for j, planner in enumerate(view.planners):
        placed = [t for t in range(n) if view.placements[t][j] is not None]
        declined = {short_reason(view.declined[(t, j)]) for t in range(n) if t not in placed}
        status = f"{len(placed)}/{n}" + (f": {'; '.join(sorted(declined))}" if declined else "")
        summary[planner] = {key: summarise(r[:, j]) for key, r in ratios.items()}
        summary[planner]["placed"] = len(placed)
        mean_ms = float(np.mean(view.costs[:, placed, j])) if placed else "-"
        plan_s = float(view.plan_seconds[placed, j].mean()) if placed else "-"
        rows.append(
            [planner, status, mean_ms, *(cell(summary[planner][key], n) for key in ratios), plan_s]
        )
    table = format_table(
        [
            "planner",
            "placed",
            "mean ms",
            "(a) vs strongest",
            "(b) vs per-task best",
            "(c) vs best known",
            "plan s",
        ],
        rows,
    )
    zero_shot = "" if name == model_suite else " (zero-shot)"
    text = (
        f"## {name}{zero_shot}: {n} held-out task{'s' * (n != 1)}, strongest fixed heuristic "
        f"{view.strongest_heuristic()}\n\n```\n{table}\n```"
    )
    return text, summary


HEADLINE = {  # column: a planner's name or one of `REFERENCES`
    "vs torchrec (no reserve)": "torchrec (no reserve)",
    "vs torchrec": "torchrec",
    "vs strongest heuristic": "strongest_heuristic",
    "vs per-task best heuristic": "per_task_best_heuristic",
    "vs best known": "best_known",
}


def dreamshard_ratios(view: Evaluation) -> dict[str, np.ndarray]:
    """Per headline column, dreamshard's ratio per task (NaN where the reference declined)."""
    j = view.planners.index("dreamshard")
    return {label: view.ratios(reference)[:, j] for label, reference in HEADLINE.items()}


def headline(evaluation: Evaluation, views: dict[str, Evaluation]) -> str:
    """Where dreamshard stands, per suite and over every task."""
    per_suite = {name: dreamshard_ratios(view) for name, view in views.items()}
    per_suite["all tasks"] = {
        label: np.concatenate([s[label] for s in per_suite.values()]) for label in HEADLINE
    }
    rows = [
        [name, *(cell(summarise(v), len(v)) for v in values.values())]
        for name, values in per_suite.items()
    ]
    torchrec = evaluation.planners.index("torchrec")
    rejected = sum(p[torchrec] is None for p in evaluation.placements)
    return (
        f"## Headline: dreamshard's cost ({evaluation.backend} backend) relative to ...\n\n```\n"
        + format_table(["suite", *HEADLINE], rows)
        + "\n```\n\n"
        f"TorchRec's planner with its own reservation declined {rejected} of "
        f"{len(evaluation.tasks)} tasks; `-` or [k/n]: compared only where both placed."
    )


def declines_section(evaluation: Evaluation) -> str:
    rows = [
        [
            evaluation.tasks[t].name,
            evaluation.planners[j],
            reason.split("; ")[0].split(", counting")[0].replace(TORCHREC_SAYS, ""),
        ]
        for (t, j), reason in sorted(evaluation.declined.items())
    ]
    if not rows:
        return "## Declined tasks\n\nNone."
    return "## Declined tasks\n\n```\n" + format_table(["task", "planner", "why"], rows) + "\n```"


def milp_section(evaluation: Evaluation, milp_log: dict) -> str:
    j = evaluation.planners.index("milp")
    rows = []
    for t, task in enumerate(evaluation.tasks):
        r = milp_log[task.name]
        measured = float(np.mean(evaluation.costs[:, t, j])) if r.placement else "-"
        rows.append([task.name, r.status, r.gap, r.seconds, r.objective, measured])
    return (
        "## MILP on the cost network's single-table costs\n\nExact for the additive surrogate "
        "only (the max over devices of the sum of each table's predicted cost alone); the real "
        "cost is not additive, so its optimum bounds nothing measured.\n\n```\n"
        + format_table(
            ["task", "status", "gap", "seconds", "additive optimum ms", "measured mean ms"], rows
        )
        + "\n```"
    )


def search_section(evaluation: Evaluation, search_log: dict) -> str:
    j = evaluation.planners.index(BEST_KNOWN)
    rows = []
    for t, task in enumerate(evaluation.tasks):
        s = search_log[task.name]
        means = evaluation.costs[:, t].mean(axis=0)
        reference = "yes" if means[j] <= np.nanmin(means) else "no"  # ties: the same placement
        rows.append(
            [
                task.name,
                s["start"],
                s["start_ms"],
                s["steps"],
                s["measured"],
                s["search_ms"],
                float(means[j]),
                reference,
            ]
        )
    return (
        "## Best known: measured local search\n\nScreening: each distinct placement of the "
        "other planners measured once; the search starts from the cheapest. 'search ms' is the "
        "search's own best measurement, 'rounds ms' the mean of the independent interleaved "
        "rounds (the gap is the winner's curse); 'reference' says whether it was the best "
        "placement of the task in the rounds (else the cheaper planner's placement is the best "
        "known).\n\n```\n"
        + format_table(
            [
                "task",
                "start",
                "start ms",
                "steps",
                "measured",
                "search ms",
                "rounds ms",
                "reference",
            ],
            rows,
        )
        + "\n```"
    )


def write_raw(evaluation: Evaluation, out: Path, extra: dict) -> None:
    data = evaluation.to_dict() | extra
    write_text_atomic(out.with_suffix(".json"), json.dumps(data, indent=1, default=str) + "\n")
    csv_path = out.with_suffix(".csv")
    with open(csv_path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["task", "planner", "round", "overall_ms"])
        for t, task in enumerate(evaluation.tasks):
            for j, planner in enumerate(evaluation.planners):
                if evaluation.placements[t][j] is not None:
                    for r in range(evaluation.costs.shape[0]):
                        writer.writerow([task.name, planner, r, evaluation.costs[r, t, j]])


def torchrec_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torchrec")
    except PackageNotFoundError:
        return "not installed"


def render(run, args: argparse.Namespace, command: str) -> tuple[str, dict]:
    """The markdown report, and the per-suite summaries for the JSON."""
    evaluation = run.evaluation
    views, sections, summaries, offset = {}, [], {}, 0
    for name, suite_tasks in run.suites.items():
        views[name] = evaluation.subset(list(range(offset, offset + len(suite_tasks))))
        offset += len(suite_tasks)
        text, summaries[name] = suite_section(name, views[name], run.model_suite)
        sections.append(text)
    phases = ", ".join(f"{k} {v / 60:.1f}" for k, v in run.seconds.items())
    counts = ", ".join(f"{k} {v}" for k, v in run.measurements.items())
    report = "\n\n".join(
        [
            f"# Planners compared on measured cost ({time.strftime('%Y-%m-%d')})",
            f"Host: {hardware()}; {versions()}; torchrec {torchrec_version()}. Costs: "
            f"{evaluation.costs_made} ({run.notes['backend']}).",
            f"Model: {run.notes['model']}. RNN: {run.notes['rnn']}. {args.tasks} held-out test "
            f"task(s) per suite, {args.rounds} interleaved rounds over all {len(evaluation.tasks)} "
            f"tasks and {len(evaluation.planners)} planners in one run; best known search budget "
            f"{args.search_budget} measurements per task; MILP time limit {args.milp_seconds:g} s. "
            f"Measurements: {counts}. Minutes: {phases}. Command: `{command}`.",
            (
                "Ratios paired within rounds: per task the geometric mean over rounds of cost /"
                " reference, then the geometric mean over tasks (min-max over tasks; [k/n] "
                "where a planner placed only k of n tasks). (a) the strongest fixed heuristic "
                "of the suite (best mean cost), (b) the per-task best heuristic, (c) the best "
                "known placement of the task (lowest mean cost in these rounds: the measured "
                "search's result, or a planner's placement where that was cheaper). 'plan s': "
                "planning time per task (best_known's includes its screening and search "
                "measurements). Below 1 is better than the reference."
            ),
            headline(evaluation, views),
            *sections,
            declines_section(evaluation),
            milp_section(evaluation, run.milp_log),
            search_section(evaluation, run.search_log),
        ]
    )
    return report, summaries
