"""Stage 7, evaluation: planners placed on tasks, measured in interleaved rounds, compared.

`rounds` (interleaved measurement, paired ratios, geometric means, bootstrap intervals),
`evaluate` (the one evaluation: every planner on every task, measured in rounds; used by the
flows, the demo, the benchmarks and the dashboard), `results` (`Evaluation`: the strongest fixed
heuristic, the per-task best heuristic, the best known and every ratio to them), `refine`
(`dreamshard place --refine`: a planner's top candidates measured before use), `explain`
(`dreamshard explain`: why a plan puts each table where it does, as a cost model sees it).
The benchmarks' own parts (report tables, stored runs, study tasks) live in `benchmarks/parts/`.
May import: tracking and every stage below.
"""
