"""Stage 2, placement: tasks, legal placements and the planners that need no model.

`tasks` (PlacementTask, Placement, memory, legality), `packing` (assignment within memory),
`heuristics` (random and the four greedy keys), `suites` (named task suites), `plan_file` (the
plan JSON). Training's warm start needs the heuristics, so they sit below learning.
May import: tables and the root modules.
"""

from dreamshard.placement.tasks import Placement, PlacementTask

__all__ = ["Placement", "PlacementTask"]
