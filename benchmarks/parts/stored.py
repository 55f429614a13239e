"""What a long run keeps between sessions, so that a re-run (`--resume`) measures nothing twice.

- Its measurements, through its cost dataset, each stored under a round of its purpose and
  counted (`Measurements`): the interleaved rounds of `evaluate` store rounds 1000 on; a run's
  other measurements take rounds of their own through a `StoredBackend` (a best-known search
  SEARCH_ROUND, a measured refinement REFINE_ROUND + n, the n-th time it measures a placement).
- Its plans (`PlanStore`): each planner's placement of each task (or why it declined), its
  planning time and the searches' logs, written after every planner. A resumed run returns
  them as they were: time-limited searches and measured ones would not repeat placements
  exactly, and a changed placement is a new measurement.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from dreamshard.costs.collect import Job, measure_and_store
from dreamshard.costs.dataset import CostDataset
from dreamshard.costs.types import CostBackend, PlacementCost
from dreamshard.errors import DreamshardError
from dreamshard.files import write_text_atomic
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.tables.shards import Split


class Measurements:
    """The run's measurements through its dataset, counted per purpose: measured now or read
    back from an earlier session."""

    def __init__(self, backend: CostBackend, dataset: CostDataset, suite_name: str):
        self.backend, self.dataset, self.suite_name = backend, dataset, suite_name
        self.measured: Counter[str] = Counter()
        self.read_back: Counter[str] = Counter()

    def measure(self, job: Job, purpose: str) -> PlacementCost:
        cost, fresh = measure_and_store(job, self.backend, self.dataset, self.suite_name)
        (self.measured if fresh else self.read_back)[purpose] += 1
        return cost

    def backend_for(self, purpose: str, first_round: int) -> StoredBackend:
        return StoredBackend(self, purpose, first_round)


class StoredBackend:
    """A cost backend whose measurements go through the run's dataset under rounds of their
    own, from `first_round` (a placement's n-th measurement: `first_round + n`); they also take
    the host's measurement lock. For a run's searches and refinements."""

    def __init__(self, measurements: Measurements, purpose: str, first_round: int):
        self.measurements, self.purpose, self.first_round = measurements, purpose, first_round
        self.name = measurements.backend.name
        self.times: Counter[tuple] = Counter()  # per (task, placement): measured so far

    def config(self) -> dict:
        return self.measurements.backend.config()

    def measure(self, task: PlacementTask, placement: Placement) -> PlacementCost:
        same = (task.name, placement.splits, placement.devices)
        job = Job(task, placement, self.first_round + self.times[same])
        self.times[same] += 1
        return self.measurements.measure(job, self.purpose)


SEARCH_ROUND = 2000  # best-known screening and search: each placement measured once
REFINE_ROUND = 3000  # measured refinement: REFINE_ROUND + n for a placement's n-th measurement


def placement_record(placement: Placement) -> dict:
    return {
        "devices": list(placement.devices),
        "method": placement.method,
        "candidate": placement.candidate,
        "splits": [asdict(s) for s in placement.splits],
    }


def placement_from(record: dict) -> Placement:
    return Placement(
        tuple(record["devices"]),
        record["method"],
        record["candidate"],
        tuple(Split(**s) for s in record["splits"]),
    )


class PlanStore:
    """Per task, each planner's placement or decline and its seconds, and the searches' logs.

    `settings` are what the placements depend on; resuming with other settings is refused.
    """

    def __init__(self, path: Path, settings: dict, resume: bool):
        self.path = path
        self.data = {"settings": settings, "plans": {}, "logs": {}}
        if resume and path.exists():
            stored = json.loads(path.read_text())
            if stored["settings"] != settings:
                old = stored["settings"]
                changed = sorted(k for k in settings | old if settings.get(k) != old.get(k))
                raise DreamshardError(
                    f"--resume: the stored plans in {path} were made with other "
                    f"{', '.join(changed)}; rerun with the same options, or without --resume"
                )
            self.data = stored
        self.seconds: dict[tuple[str, str], float] = {}

    def restore_seconds(self, evaluation) -> None:
        """Each placement's planning time in `evaluation` as stored with it (a resumed run
        planned some in an earlier session)."""
        for t, task in enumerate(evaluation.tasks):
            for j, name in enumerate(evaluation.planners):
                evaluation.plan_seconds[t, j] = self.seconds[(task.name, name)]

    def log(self, kind: str) -> dict:
        """The live per-task log of a kind ("best_known", "milp", "refine"), saved with the
        plans: a planner writes its task's entry before it returns."""
        return self.data["logs"].setdefault(kind, {})

    def planner(self, name: str, plan):
        """`plan` wrapped: a stored placement (or decline) as it was, else planned and stored."""

        def stored(task: PlacementTask, seed: int) -> Placement:
            plans = self.data["plans"].setdefault(task.name, {})
            if name not in plans:
                plans[name] = self._plan(plan, task, seed)
                write_text_atomic(self.path, json.dumps(self.data, indent=1) + "\n")
            record = plans[name]
            self.seconds[(task.name, name)] = record["seconds"]
            if "declined" in record:
                raise DreamshardError(record["declined"])
            return placement_from(record)

        return stored

    @staticmethod
    def _plan(plan, task: PlacementTask, seed: int) -> dict:
        start = time.perf_counter()
        try:
            placement = plan(task, seed)
        except DreamshardError as exc:  # a decline: kept, so a resumed run declines alike
            return {"declined": str(exc), "seconds": time.perf_counter() - start}
        return placement_record(placement) | {"seconds": time.perf_counter() - start}
