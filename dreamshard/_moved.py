"""Module paths from before the stage packages (0.1), kept as aliases for one release.

`import dreamshard.synthetic` still works and gives the module at its new path, with a
DeprecationWarning that names it. Remove in 0.3 (CHANGELOG.md lists the moves).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED = {
    "dreamshard.synthetic": "dreamshard.tables.synthetic",
    "dreamshard.features": "dreamshard.tables.features",
    "dreamshard.dlrm_data": "dreamshard.tables.dlrm_data",
    "dreamshard.table_io": "dreamshard.tables.sources",
    "dreamshard.traces": "dreamshard.tables.traces",
    "dreamshard.tasks": "dreamshard.placement.tasks",
    "dreamshard.packing": "dreamshard.placement.packing",
    "dreamshard.suites": "dreamshard.placement.suites",
    "dreamshard.plan": "dreamshard.placement.plan_file",
    "dreamshard.comm": "dreamshard.costs.comm",
    "dreamshard.fbgemm_backend": "dreamshard.costs.fbgemm",
    "dreamshard.simulated": "dreamshard.costs.simulated",
    "dreamshard.calibrate": "dreamshard.costs.calibrate",
    "dreamshard.backends": "dreamshard.costs.backends",
    "dreamshard.dataset": "dreamshard.costs.dataset",
    "dreamshard.collect": "dreamshard.costs.collect",
    "dreamshard.costnet": "dreamshard.learn.costnet",
    "dreamshard.examples": "dreamshard.learn.costnet_data",
    "dreamshard.fit": "dreamshard.learn.costnet_fit",
    "dreamshard.policy": "dreamshard.learn.policy",
    "dreamshard.model_io": "dreamshard.learn.model_file",
    "dreamshard.train": "dreamshard.learn.train",
    "dreamshard.train_config": "dreamshard.learn.train_config",
    "dreamshard.rnn": "dreamshard.learn.rnn",
    "dreamshard.rnn_config": "dreamshard.learn.rnn_config",
    "dreamshard.learned": "dreamshard.planners.dreamshard_planner",
    "dreamshard.search": "dreamshard.planners.search",
    "dreamshard.milp": "dreamshard.planners.milp",
    "dreamshard.bounds": "dreamshard.planners.bounds",
    "dreamshard.torchrec_planner": "dreamshard.planners.torchrec_planner",
    "dreamshard.compare": "dreamshard.evaluation.rounds",
    "dreamshard.evaluate": "dreamshard.evaluation.evaluate",
    "dreamshard.torchrec_export": "dreamshard.integrations.torchrec_export",
    "dreamshard.summaries": "dreamshard.cli.summaries",
    "dreamshard.demo": "dreamshard.cli.demo",
}


class _Aliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module path and hands back the module at its new path."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}; the old path goes in dreamshard 0.3",
            DeprecationWarning,
            stacklevel=3,
        )
        return importlib.import_module(new)

    def exec_module(self, module) -> None:
        pass  # the module at the new path is already executed


def install() -> None:
    if not any(isinstance(finder, _Aliases) for finder in sys.meta_path):
        sys.meta_path.append(_Aliases())
