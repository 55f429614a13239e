"""Stage 8, integrations: every piece of TorchRec code. `torchrec_planner`: TorchRec's planner
as the registered method `torchrec`; `torchrec_export`: any plan as a TorchRec ShardingPlan and
its JSON; `torchrec_judge`: any plan rated by TorchRec's EmbeddingPerfEstimator, as its
planner's stats table reports it; `torchrec_tables`: a TorchRec model's tables and their
statistics; `dmp_planner`: `DreamShardPlanner`, TorchRec's planner interface for
DistributedModelParallel (importing it imports TorchRec); `dmp_backend`: the `dmp` cost
backend, real TorchRec training steps under torchrun (the program is `gpu_tasks/dmp_step.py`);
`plan_check`: `dreamshard check`, an existing plan's legality, memory (ours and TorchRec's),
predicted cost and dreamshard's plan beside it (a live `ShardingPlan` too); `plan_reading`:
any TorchRec plan (live, or its JSON form) read back as our placement, checked as it is read;
`reference_plan`: the reference a plan for TorchRec is weighed against (TorchRec's planner in a
quarter of the budget, else the best whole-table heuristic); `tune`: `DreamShardPlanner.tune`,
the best of the candidate plans measured in the user's own DMP training steps on every rank;
`rank_zero`: work done on rank 0, its result or its error broadcast to every rank.
May import: every stage below (TorchRec only when called, or in `dmp_planner`)."""
