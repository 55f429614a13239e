"""Stage 9, integrations: dreamshard in other stacks. `torchrec_export`: any plan as a TorchRec
ShardingPlan and its JSON; `torchrec_tables`: a TorchRec model's tables and their statistics;
`dmp_planner`: `DreamShardPlanner`, TorchRec's planner interface for DistributedModelParallel
(importing it imports TorchRec). May import: every stage below (TorchRec only when called, or
in `dmp_planner`)."""
