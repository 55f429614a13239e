"""A run's measurements through its cost dataset, each stored under a round of its purpose
and counted: a re-run (`--resume`) reads them back instead of measuring them again.

The interleaved rounds of `evaluate` store rounds 1000 on; a run's other measurements (a
search, a refinement) take rounds of their own through a `StoredBackend`.
"""

from __future__ import annotations

from collections import Counter

from dreamshard.costs.collect import Job, measure_and_store
from dreamshard.costs.dataset import CostDataset
from dreamshard.costs.types import CostBackend, PlacementCost
from dreamshard.placement.tasks import Placement, PlacementTask


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
