"""Labels from an evaluation's interleaved rounds: each placement's median over the rounds a
cost dataset stores, and one round's noise floor against it; the same placements measured
again now, in fresh interleaved rounds.

A cost network is judged on these medians (`benchmarks/costnet_accuracy.py`): one round's
measurement is as noisy as the host, the median of several much less so.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import numpy as np

from dreamshard.costs.backends import make_backend
from dreamshard.costs.collect import Job, collect
from dreamshard.costs.dataset import CostDataset, record_task
from dreamshard.errors import DreamshardError
from dreamshard.evaluation.evaluate import EVAL_ROUND_BASE
from dreamshard.evaluation.rounds import spearman
from dreamshard.learn.costnet import DEVICE_TERMS
from dreamshard.learn.costnet_data import Example, labelled_cost
from dreamshard.progress import Progress
from dreamshard.tables.features import feature_matrix

# an evaluation's rounds in a cost dataset (a benchmark's own searches are stored from 2000 on)
INTERLEAVED = range(EVAL_ROUND_BASE, EVAL_ROUND_BASE + 1000)


def median_examples(
    dataset: CostDataset, min_rounds: int, labels: str = "raw"
) -> tuple[list[Example], list[list[Example]]]:
    """(each placement's median-labelled example, and per round the one-round examples of the
    same placements) over the placements measured in each of the first `min_rounds`
    interleaved rounds; `labels="normalised"`: each measurement normalised by its reference
    group's time first (costs/reference.py)."""
    groups: dict[tuple[str, str], dict[int, object]] = defaultdict(dict)
    for row in dataset.rows(status="ok"):
        if row["round"] in INTERLEAVED:
            groups[(row["task"], row["placement"])][row["round"]] = row
    rounds = sorted({r for g in groups.values() for r in g})[:min_rounds]
    kept = [g for g in groups.values() if len(rounds) == min_rounds and set(rounds) <= set(g)]
    if not kept:
        raise DreamshardError(
            f"{dataset.path} holds no placement measured in {min_rounds} interleaved rounds "
            "(rounds 1000-1999, as benchmarks/compare_planners.py stores them)"
        )
    medians, by_round = [], [[] for _ in rounds]
    for group in kept:
        singles = [measured_example(group[r], labels) for r in rounds]
        terms = np.median(np.stack([e.device_targets for e in singles]), axis=0)
        overall = float(np.median([e.overall for e in singles]))
        medians.append(
            replace(singles[0], device_targets=terms.astype(np.float32), overall=overall)
        )
        for k, single in enumerate(singles):
            by_round[k].append(single)
    return medians, by_round


def measured_example(row, labels: str) -> Example:
    """One stored measurement as an example, labelled `labels` (raw, or normalised)."""
    task, placement = record_task(row)
    cost = labelled_cost(row, labels)
    if cost is None:
        raise DreamshardError(
            f"a measurement of {task.name} has no reference time; use --labels raw"
        )
    targets = np.array([[getattr(d, t) for t in DEVICE_TERMS] for d in cost.devices], np.float32)
    return Example(
        feature_matrix(task.tables),
        np.array(placement.devices),
        task.num_devices,
        targets,
        float(cost.overall),
        task.name,
        placement.method,
    )


def noise_floor(medians: list[Example], by_round: list[list[Example]]) -> dict[str, float]:
    """One round's measurements as if they were predictions of the medians: per head MAPE and
    the within-task Spearman, the median over rounds."""
    figures = defaultdict(list)
    for singles in by_round:
        for k, term in enumerate(DEVICE_TERMS):
            true = np.concatenate([m.device_targets[:, k] for m in medians])
            got = np.concatenate([s.device_targets[:, k] for s in singles])
            keep = true > 1e-6
            figures[f"{term}_mape"].append(float((np.abs(got - true) / true)[keep].mean()))
        true = np.array([m.overall for m in medians])
        got = np.array([s.overall for s in singles])
        figures["overall_mape"].append(float((np.abs(got - true) / true).mean()))
        figures["spearman_within"].append(_spearman_within(medians, got))
    return {name: float(np.median(values)) for name, values in figures.items()}


def _spearman_within(medians: list[Example], got: np.ndarray) -> float:
    """The mean over tasks of the Spearman correlation of `got` with the medians' overall."""
    by_task = defaultdict(list)
    for i, m in enumerate(medians):
        by_task[m.task].append(i)
    rhos = []
    for index in by_task.values():
        true = [medians[i].overall for i in index]
        if len(index) >= 3 and np.ptp(true) > 0:
            rhos.append(spearman(got[index], true))
    return float(np.mean(rhos)) if rhos else float("nan")


def remeasure(source: CostDataset, into: CostDataset, rounds: int, seed: int = 0) -> int:
    """Measure the placements `source` holds in `rounds` interleaved rounds again, now, on this
    host's fbgemm backend, into `into` (rounds 1000 on, each round in a fresh random order),
    through `costs.collect.collect`: under the host's measurement lock, and what `into` holds
    already is not measured again, so a killed run resumes. Returns how many were measured."""
    items: dict[tuple[str, str], tuple] = {}
    for row in source.rows(status="ok"):
        if row["round"] in INTERLEAVED:
            items.setdefault((row["task"], row["placement"]), record_task(row))
    if not items:
        raise DreamshardError(f"{source.path} holds no interleaved rounds to measure again")
    pairs, backend = list(items.values()), make_backend("fbgemm")
    rng, measured = np.random.default_rng(seed), 0
    progress = Progress(rounds, f"measuring {len(pairs)} placements again")
    for r in range(rounds):
        jobs = [Job(*pairs[i], INTERLEAVED[r]) for i in rng.permutation(len(pairs))]
        measured += collect(jobs, backend, into).measured
        progress.step(f"round {r + 1}/{rounds}")
    progress.close()
    return measured
