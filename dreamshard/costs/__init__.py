"""Stage 3, costs: what a placement costs and how it is measured and stored.

`types` (DeviceCost, PlacementCost, the CostBackend protocol), `comm` (the all-to-all model),
`fbgemm` (real fused kernels, in process or under torchrun), `tbe` (one fused TBE per device group,
timed), `reference` (the reference group timed in every measurement), `torchrun` (a program started
under torchrun), `host_lock` (one measurement at a time per host), `simulated` and `calibrate` (the
analytic backend and its fit), `hardware` (hardware files: the constants of the hardware planned
for, each with its source), `roofline` (the GPU kernel model priced with them), `quantities` (each
table's additive share of a group, what both kernel models price), `backends` (a backend by name;
`dmp`'s is in `integrations`), `dataset` (the append-only SQLite cost dataset), `collect` (measuring
a suite's placements into it), `fanout` (measuring many placements here or on a Dask cluster's
workers).
May import: placement, tables, the root modules.
"""

from dreamshard.costs.types import COST_TERMS, CostBackend, DeviceCost, PlacementCost

__all__ = ["COST_TERMS", "CostBackend", "DeviceCost", "PlacementCost"]
