"""Stage 9, integrations: dreamshard in other stacks. `torchrec_export`: any plan as a TorchRec
ShardingPlan and its JSON. May import: every stage below (TorchRec only when called)."""
