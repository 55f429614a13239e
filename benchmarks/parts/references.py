"""A study's references taken from its rows by `dreamshard.evaluation.results` (the one
definition of the strongest fixed heuristic, the per-task best heuristic and the best known),
each group of tasks (a suite) on its own."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from benchmarks.study import costs
from dreamshard.evaluation.results import REFERENCES, Evaluation


def evaluation_of(rows: list[dict], arms: list[str], judge: str) -> Evaluation:
    """The rows' costs under `judge` as an `Evaluation`: [round, task, arm], NaN where an arm
    declined or was not judged (what its references read: the costs and the planners' names)."""
    found = [costs(rows, arm, judge) for arm in arms]  # [round, task] each
    cube = np.full((max(c.shape[0] for c in found), len(rows), len(arms)), np.nan)
    for j, c in enumerate(found):
        cube[: c.shape[0], :, j] = c
    seconds, none = np.zeros((len(rows), len(arms))), [None] * len(rows)
    return Evaluation([r["task"] for r in rows], arms, none, cube, none, seconds, judge)


def with_references(
    rows: list[dict], arms: list[str], judge: str, group: Callable[[str], str], names: dict
) -> tuple[list[dict], dict[str, str]]:
    """The rows, each with the `REFERENCES` as plans of their own, named by `names` (their
    costs per round, by `Evaluation.reference_costs` within the task's group: `group(task
    name)`), and each group's strongest fixed heuristic, in the order the groups first come."""
    groups = [group(r["task"]) for r in rows]
    out, strongest = [dict(r, plans=dict(r["plans"])) for r in rows], {}
    for label, view in evaluation_of(rows, arms, judge).groups(groups).items():
        strongest[label] = view.strongest_heuristic()
        at = [t for t, g in enumerate(groups) if g == label]
        for reference in REFERENCES:
            found = view.reference_costs(reference)  # [round, task of the group]
            for k, t in enumerate(at):
                cost = [None if np.isnan(c) else float(c) for c in found[:, k]]
                out[t]["plans"][names[reference]] = {"costs": {judge: cost}}
    return out, strongest
