"""A study run's report, rendered from its rows file alone (the runner writes it; `python -m
benchmarks report NAME` writes it again): the head says how every figure was made (command,
commit, host, tasks, judges, models), then each target's figure and verdict, then the study's
own tables."""

from __future__ import annotations

from dataclasses import asdict

from benchmarks.study import NO_FIGURE, Figure, Study
from dreamshard.report import format_table


def verdicts(study: Study, figures: dict[str, Figure]) -> list[dict]:
    """Each target's figure (NaN when the rows give none) and whether it is met."""
    return [
        {"figure": target.figure, "wanted": target.wanted(), **asdict(figure)}
        | {"met": target.met(figure), "cell": figure.cell()}
        for target in study.targets
        for figure in [figures.get(target.figure) or NO_FIGURE]
    ]


def render(study: Study, meta: dict, rows: list[dict]) -> tuple[str, list[dict]]:
    """The report, from the rows file's contents alone, and the targets' verdicts."""
    figures = study.figures(rows)
    found = verdicts(study, figures)
    models = "; ".join(
        f"{name}: sha256 {m['sha256']}, made by `{m['command']}`"
        for name, m in meta["models"].items()
    )
    judges = ", ".join(
        f"{name} ({'exact, one round' if n == 1 else f'measured, {n} interleaved rounds'})"
        for name, n in meta["judges"].items()
    )
    head = [
        f"# {study.title}",
        "",
        f"Command: `{meta['command']}`; at commit {meta['commit']}, {meta['date']}, "
        f"{meta['minutes']:.1f} min. Host: {meta['hardware']} (every figure); {meta['versions']}.",
        f"Tasks: {meta['tasks']}, fixed by the command. Judges: {judges}.",
        f"Models: {models or 'none'}.",
        f"MLflow: run `{study.name} @ {meta['commit']}` in experiment "
        f"`dreamshard-study-{study.name}` (made by the run, or from this report's rows file "
        "by `python -m benchmarks import` on any clone; the dashboard's Evidence page lists it).",
    ]
    about = meta.get("about", study.about)  # as the run said it: options set the text
    if about:
        head += ["", about]
    table = format_table(
        ["target", "wanted", "figure [95%]", "verdict"],
        [(v["figure"], v["wanted"], v["cell"], verdict(v)) for v in found],
    )
    body = ["", "## Targets", "", "```", table, "```", "", study.details(rows, figures)]
    return "\n".join(head + body).rstrip() + "\n", found


def verdict(found: dict) -> str:
    """ "met", "not met", or "no figure" where the rows give none (an arm not run, no task)."""
    return "met" if found["met"] else ("not met" if found["tasks"] else "no figure")
