"""Stage 7, evaluation: planners placed on tasks, measured in interleaved rounds, compared.

`rounds` (interleaved measurement, paired ratios, geometric means, bootstrap intervals),
`evaluate` (the one evaluation: every planner on every task, measured in rounds; used by the
flows, the demo, the benchmarks and the dashboard), `results` (`Evaluation`: the strongest fixed
heuristic, the per-task best heuristic, the best known and every ratio to them), `refine`
(`dreamshard place --refine`: a planner's top candidates measured before use), `explain`
(`dreamshard explain`: why a plan puts each table where it does, as a cost model sees it).
For the benchmarks' reports: `ratio_tables` (a ratio's cells: mean with its range or interval,
[k/n]), `report_files` (the markdown, its JSON and CSV, the host line), `models` (a model
trained for a run, in words), `best_known` (a task's best known placement by measured search),
`stored` (a run's measurements and plans, kept so a resumed run reads them back), `balance`
(a measured plan's mean device load and the bounds beside it), `medians` (labels as medians of
an evaluation's rounds), `costnet_study` (held-out data for judging a cost network),
`scale_study` (the scale study's tasks, time limit and plans judged twice), `ood_families`
(table families no model trains on) and `ood_study` (the shipped model on them, zero-shot),
`ablation` (the default planner's parts run alone on the same tasks).
May import: tracking and every stage below.
"""
