"""Stage 8, evaluation: planners placed on tasks, measured in interleaved rounds, compared.

`rounds` (interleaved measurement, paired ratios, geometric means), `evaluate` (the one
evaluation: every planner on every task, the strongest fixed heuristic, the per-task best
heuristic and the best known, used by the flows, the demo, the benchmarks and the dashboard),
`refine` (`dreamshard place --refine`: a planner's top candidates measured before use).
May import: methods, tracking and every stage below.
"""
