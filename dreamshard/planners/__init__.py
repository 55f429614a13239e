"""Stage 5, planners: the registered methods (one `BasePlanner` each, listed by
`placement.registry`).

`baselines` (random and the four heuristics, with their split check), `dreamshard_planner` (the
trained policy, best of its candidates by the cost network), `for_hardware` (how it plans for a
GPU hardware file: the roofline's splits and rating, the envelope guard), `search` (local search
under any scorer; `dreamshard_search` and `search_analytic`), `device_search` (the fast search
for device-additive cost models) and `rnn_planner` (the RNN placer baseline). The references
that judge them (the MILP, its bounds and the simulated floor) are study parts in
`benchmarks/parts/`; TorchRec's planner is in `integrations`.
May import: learn, costs, placement, tables, the root modules.
"""
