"""Held-out data for judging a cost network, and the fit a study gives each network: placements
of a suite labelled by the simulated backend (its test tasks held out), or a stored dataset's.

`benchmarks/feature_ablation.py` and `benchmarks/costnet_loss.py` fit many networks on one
`StudyData` and compare their errors on its held-out placements.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from dreamshard.costs.collect import collect, collection_jobs
from dreamshard.costs.dataset import CostDataset, hardware
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.errors import DreamshardError
from dreamshard.learn.costnet import DEVICE_TERMS
from dreamshard.learn.costnet_data import Example, load_examples
from dreamshard.learn.costnet_fit import costnet_errors, fit_costnet, spearman_within_tasks
from dreamshard.learn.train import fresh_state
from dreamshard.learn.train_config import TrainConfig
from dreamshard.placement.suites import make_suite, parse_suite_name

HEADS = (*DEVICE_TERMS, "overall")  # the cost network's heads, and the cost composed of them


@dataclass
class StudyData:
    """Labelled placements to fit on and to score on, and how they were made."""

    train: list[Example]
    held_out: list[Example]
    config: dict  # the backend settings of the costs
    hardware: str  # where the costs were measured, in words
    source: str  # how the data was made, in words

    def spearman_tasks(self) -> int:
        """How many held-out tasks have the 3 placements a within-task Spearman needs."""
        return sum(1 for n in Counter(e.task for e in self.held_out).values() if n >= 3)


def simulated_data(
    suite_name: str,
    placements: int,
    held_out: int,
    tasks: int,
    dataset: Path,
    log: Callable[[str], None],
) -> StudyData:
    """The warm start's mix on the suite's training tasks, and on `tasks` test tasks, labelled
    by the simulated backend into `dataset` (kept: a re-run measures nothing)."""
    suite = make_suite(parse_suite_name(suite_name, num_test_tasks=tasks))
    backend = SimulatedBackend()
    log(f"labelling {placements} + {held_out} placements of {suite_name} (simulated backend)")
    train_jobs = list(collection_jobs(suite, placements))
    # the same mix on the test tasks: a suite whose training tasks are its test tasks
    test_jobs = list(collection_jobs(replace(suite, train_tasks=suite.test_tasks), held_out))
    stored = CostDataset(dataset)
    collect(train_jobs + test_jobs, backend, stored, suite_name)
    found = {(e.task, tuple(e.devices)): e for e in load_examples(stored, backend.config())}
    keys = [[(j.task.name, j.placement.devices) for j in jobs] for jobs in (train_jobs, test_jobs)]
    train, test = ([found[k] for k in part if k in found] for part in keys)
    return StudyData(
        train,
        test,
        backend.config(),
        f"none (simulated costs; networks fitted on {hardware()})",
        f"simulated here: {len(train)} heuristic and random placements of {suite_name}'s "
        f"{len(suite.train_tasks)} training tasks; held out: {len(test)} placements of "
        f"{len(suite.test_tasks)} of its test tasks (tables the training tasks never hold)",
    )


def dataset_data(path: str) -> StudyData:
    """An existing cost dataset: its most common backend settings; test tasks held out (else
    every fifth task by name)."""
    if not Path(path).exists():
        raise DreamshardError(f"no cost dataset at {path}")
    rows = CostDataset(path).rows(status="ok")
    if not rows:
        raise DreamshardError(f"{path} holds no successful measurement")
    config_text, _ = Counter(row["config"] for row in rows).most_common(1)[0]
    where = Counter(row["hardware"] for row in rows if row["config"] == config_text)
    examples = load_examples(CostDataset(path), json.loads(config_text))
    tasks = sorted({e.task for e in examples})
    held = {t for t in tasks if "/test/" in t}
    rule = "its test tasks"
    if not held or len(held) == len(tasks):
        held = set(tasks[4::5])
        rule = "every fifth task by name"
    train = [e for e in examples if e.task not in held]
    test = [e for e in examples if e.task in held]
    if len(train) < 5 or len(test) < 3:
        raise DreamshardError(
            f"{path}: {len(train)} training and {len(test)} held-out measurements on one "
            "backend setting; the study needs at least 5 and 3"
        )
    return StudyData(
        train,
        test,
        json.loads(config_text),
        where.most_common(1)[0][0],
        f"{path}: {len(train)} placements of {len(tasks) - len(held)} tasks; held out "
        f"({rule}): {len(test)} placements of {len(held)} tasks",
    )


def study_config(data: StudyData, seed: int, steps: int, loss: str) -> TrainConfig:
    """The fit's settings: the project's defaults, one iteration, the data's backend (which
    says whether the network learns communication or takes it from the topology model)."""
    backend = data.config.get("backend", "simulated")
    return TrainConfig(
        backend=backend, seed=seed, costnet_steps=steps, iterations=1, costnet_loss=loss
    )


def modeled_comm(data: StudyData) -> dict | None:
    """The topology model a network fitted on this data takes the all-to-all from (its
    bwd_comm is then exact by construction, not learned), or None when it learns it."""
    return getattr(fresh_state(study_config(data, 0, 1, "mse")).costnet, "comm", None)


def learned_heads(data: StudyData) -> tuple[str, ...]:
    """The heads a network fitted on this data learns (all but a modeled bwd_comm)."""
    return tuple(h for h in HEADS if not (h == "bwd_comm" and modeled_comm(data)))


def fitted_scores(config: TrainConfig, train: list, held_out: list, before=None) -> dict:
    """A fresh cost network fitted on `train` with `config`'s settings (after `before(state)`,
    a prior fit, when given); its held-out errors, Spearman rank correlation within tasks and
    how many tasks that is over (`spearman_tasks`)."""
    state = fresh_state(config)
    if before is not None:
        before(state)
    fit_costnet(state, config, train)
    spearman, tasks = spearman_within_tasks(state.costnet, held_out)
    return {
        **costnet_errors(state.costnet, held_out),
        "spearman": spearman,
        "spearman_tasks": tasks,
    }
