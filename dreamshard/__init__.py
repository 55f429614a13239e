"""dreamshard: learned placement of embedding tables across devices.

The packages name the stages, bottom to top; a module imports only from its own stage and the
ones below it (docs/design.md has the map, `tests/test_layout.py` keeps it free of circles):

- root modules `errors`, `files`, `state`, `progress`, `report`, `lazy` (objects named by a
  "module:attribute" string), used by every stage, and `_moved` (old module paths, deprecated);
- `tables`: tables, shards, features, the synthetic generator, traces, table files, the data set;
- `placement`: tasks, placements, packing, the heuristics' rules, splitting, suites, plan files,
  the planner contract and the registry of every method (`place`);
- `costs`: cost types, communication, the fbgemm and simulated backends, the cost dataset;
- `learn`: the cost network, the policy, their training, model files, the RNN baseline;
- `planners`: the registered planners (baselines, dreamshard, searches, RNN) and the references;
- `tracking`: MLflow, the only module that imports it;
- `evaluation`: planners placed and measured in interleaved rounds, and every ratio;
- `integrations`: TorchRec (its planner, plans, tables, DMP planner and backend); `cli`: the
  `dreamshard` command.
"""

from __future__ import annotations

import importlib

from dreamshard import _moved

# `import dreamshard` stays quick: what it offers is imported on first use.
_EXPORTS = {
    "DreamshardError": "dreamshard.errors",
    "InfeasibleError": "dreamshard.errors",
    "Table": "dreamshard.tables.table",
    "Placement": "dreamshard.placement.tasks",
    "PlacementTask": "dreamshard.placement.tasks",
    "PLANNERS": "dreamshard.placement.heuristics",  # deprecated: `registry.baseline_planners`
    "METHODS": "dreamshard.placement.registry",
    "place": "dreamshard.placement.registry",
    "register": "dreamshard.placement.registry",
    "BasePlanner": "dreamshard.placement.planner",
    "PlanOptions": "dreamshard.placement.planner",
    "Constraints": "dreamshard.placement.constraints",
}
__all__ = sorted(_EXPORTS)

_moved.install()


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dreamshard' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
