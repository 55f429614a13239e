"""Stage 5, planners that need a model or a peer: they place a task, given what they need.

`dreamshard_planner` (the trained policy, best of its episodes by the cost network),
`search` (local search under any scorer), `milp` and `bounds` (exact references on an additive
cost), `torchrec_planner` (TorchRec's planner, optional package). The heuristics live in
`placement`; every planner by name is `dreamshard.methods.place`.
May import: learn, costs, placement, tables, the root modules.
"""
