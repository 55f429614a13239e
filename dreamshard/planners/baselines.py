"""The planners that need no model: random placement and the paper's four greedy heuristics.

Their placing rules are `placement.heuristics` (training's warm start and the split ratings use
them too); here they become registered planners with their split choice. Under `--split auto`
random splits only what memory forces; a heuristic also halves tables by its balance rule,
kept only where the calibrated analytic model (the `simulated` backend) rates the split plan
cheaper (`placement.splitting.checked_balance_splits`).
"""

from __future__ import annotations

from dreamshard.costs.comm import get_topology
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.placement.heuristics import greedy_place, random_place
from dreamshard.placement.planner import BasePlanner, PlanOptions
from dreamshard.placement.splitting import checked_balance_splits
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.tables.shards import Split


class RandomPlanner(BasePlanner):
    name = "random"

    def place_tables(self, task: PlacementTask, options: PlanOptions) -> Placement:
        return random_place(task, options.seed)


class HeuristicPlanner(BasePlanner):
    """Largest key first, each table to the device with the smallest key sum that has room."""

    def __init__(self, key_name: str) -> None:
        self.name = key_name

    def place_tables(self, task: PlacementTask, options: PlanOptions) -> Placement:
        return greedy_place(task, self.name)

    def splits(self, task: PlacementTask, options: PlanOptions) -> tuple[Split, ...]:
        backend = SimulatedBackend(topology=options.topology, hardware=options.hardware)
        host_size = get_topology(backend.topology).host_size(task.num_devices)
        return checked_balance_splits(task, self.name, backend.cheapest, options.until(), host_size)


RANDOM = RandomPlanner()
DIM = HeuristicPlanner("dim")
SIZE = HeuristicPlanner("size")
LOOKUP = HeuristicPlanner("lookup")
SIZE_LOOKUP = HeuristicPlanner("size_lookup")
