"""The `rnn` planner: the RNN placer baseline (`learn.rnn`), trained for one device count.

It needs an RNN placer (`dreamshard train-rnn` writes one) and splits only what memory forces.
"""

from __future__ import annotations

from dreamshard.learn.rnn import RnnPlacer, resolve_rnn, rnn_place
from dreamshard.placement.planner import BasePlanner, PlanOptions
from dreamshard.placement.tasks import Placement, PlacementTask


class RnnPlanner(BasePlanner):
    name = "rnn"

    def load_model(self, model: object) -> RnnPlacer:
        return resolve_rnn(model)

    def place_tables(self, task: PlacementTask, options: PlanOptions) -> Placement:
        return rnn_place(task, options.model, options.seed)


RNN = RnnPlanner()
