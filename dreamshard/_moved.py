"""Module paths that moved, kept as aliases for one release.

`import dreamshard.synthetic` still works and gives the module at its new path, with a
DeprecationWarning that names it: the stage packages (0.1) and the planner registry (0.2).
A module whose names went to several places (`MOVED_NAMES`) gives a stand-in that finds each
name at its new home. Remove in 0.3 (CHANGELOG.md lists the moves).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
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
    "dreamshard.torchrec_planner": "dreamshard.integrations.torchrec_planner",
    "dreamshard.compare": "dreamshard.evaluation.rounds",
    "dreamshard.evaluate": "dreamshard.evaluation.evaluate",
    "dreamshard.torchrec_export": "dreamshard.integrations.torchrec_export",
    "dreamshard.summaries": "dreamshard.cli.summaries",
    "dreamshard.demo": "dreamshard.cli.demo",
    # 0.2: the planner registry, splitting in one module, TorchRec code in integrations
    "dreamshard.methods": "dreamshard.placement.registry",
    "dreamshard.planners.split_choice": "dreamshard.placement.splitting",
    "dreamshard.planners.torchrec_planner": "dreamshard.integrations.torchrec_planner",
    "dreamshard.costs.dmp": "dreamshard.integrations.dmp_backend",
    "gpu_tasks.tbe": "dreamshard.costs.tbe",  # the kernel timing is the library's; programs stay
}

# Names of a moved module that went elsewhere than the module (old module -> name -> new module)
MOVED_NAMES = {
    "dreamshard.methods": {
        "resolve_model": "dreamshard.learn.model_file",
        "MODEL_FILE": "dreamshard.learn.model_file",
    },
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
        module = importlib.import_module(new)
        if spec.name not in MOVED_NAMES:
            return module
        return _stand_in(spec.name, module, MOVED_NAMES[spec.name])

    def exec_module(self, module) -> None:
        pass  # the module at the new path is already executed


def _stand_in(old: str, module: types.ModuleType, elsewhere: dict[str, str]):
    """A module named `old` whose names are `module`'s, except those in `elsewhere`."""
    stand_in = types.ModuleType(old, module.__doc__)

    def __getattr__(name: str):
        if name in elsewhere:
            return getattr(importlib.import_module(elsewhere[name]), name)
        return getattr(module, name)

    stand_in.__getattr__ = __getattr__
    return stand_in


def install() -> None:
    if not any(isinstance(finder, _Aliases) for finder in sys.meta_path):
        sys.meta_path.append(_Aliases())
