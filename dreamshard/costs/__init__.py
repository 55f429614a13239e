"""Stage 3, costs: what a placement costs and how it is measured and stored.

`types` (DeviceCost, PlacementCost, the CostBackend protocol), `comm` (the all-to-all model),
`fbgemm` (real fused kernels; runs `gpu_tasks/`), `host_lock` (one measurement at a time per
host), `simulated` and `calibrate` (the analytic backend and its fit), `backends` (a backend by
name), `dataset` (the append-only SQLite cost dataset), `collect` (measuring a suite's
placements into it), `dmp` and `dmp_proxy` (real TorchRec training steps, and a proxy of them).
May import: placement, tables, the root modules, and `gpu_tasks` (the measurement programs).
"""

from dreamshard.costs.types import COST_TERMS, CostBackend, DeviceCost, PlacementCost

__all__ = ["COST_TERMS", "CostBackend", "DeviceCost", "PlacementCost"]
