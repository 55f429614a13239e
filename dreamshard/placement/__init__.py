"""Stage 2, placement: tasks, legal placements, splitting, and the planner contract.

`tasks` (PlacementTask, Placement, memory, legality), `constraints` (pins, together, apart and
no-split: what the user requires beyond memory, as legality, a placing order and masks),
`packing` (assignment within memory), `heuristics` (the placing rules of random and the four
greedy keys), `splitting` (which tables to split, the split candidates and their rating,
placing shards), `planner` (`BasePlanner` and `PlanOptions`: the one shape of every method),
`budget` (planning time: the deadline and the default budget), `reference` (the rule that
keeps a reference plan unless the calibrated predicted gain clears a margin), `registry`
(every method by name, `place`), `suites` (named task suites), `plan_file` (the plan JSON).
Training's warm start and the split ratings need the heuristics' rules, and the cost
collector the registry, so they sit below costs and learning; the registry names the planners
above by "module:attribute".
May import: tables and the root modules.
"""

from dreamshard.placement.tasks import Placement, PlacementTask

__all__ = ["Placement", "PlacementTask"]
