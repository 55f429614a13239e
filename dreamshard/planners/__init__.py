"""Stage 5, planners: the registered methods (one `BasePlanner` each, listed by
`placement.registry`) and the references that judge them.

`baselines` (random and the four heuristics, with their split check), `dreamshard_planner`
(the trained policy, best of its candidates by the cost network), `search` (local search under
any scorer; `dreamshard_search` and `search_analytic`), `device_search` (the fast search for
device-additive cost models), `rnn_planner` (the RNN placer baseline), and the references
`milp`, `bounds` (exact on an additive cost) and `milp_simulated` (a proven floor of the
simulated cost). TorchRec's planner is in `integrations`.
May import: learn, costs, placement, tables, the root modules.
"""
