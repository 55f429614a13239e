"""The programs torchrun launches on a measurement host, one process per device: `distributed`
(each rank's fused kernel and the all-to-all, timed for real) and `dmp_step` (real TorchRec
training steps of several plans, for the `dmp` backend), and `tune_step` (`DreamShardPlanner.tune`
on that training model, for the `torchrec_tune` study). They sit at the top of the stack, as a
user's training script would, and may import any of the library; the library only names them
(`costs.torchrun` starts them), never imports them."""

import dreamshard  # noqa: F401  (installs the old module paths, `gpu_tasks.tbe` among them)
