"""Planners by method name: the one dispatcher, above every planner, with model resolution.

`place(task, method, ...)` is what the CLI, the flows, the dashboard and the benchmarks call.
A learned method's `model` may be a model object, a model file, the folder `dreamshard train
--out` wrote, or an MLflow URI (`models:/name@alias`, `runs:/id/policy`).
"""

from __future__ import annotations

from pathlib import Path

from dreamshard.errors import DreamshardError
from dreamshard.learn.model_file import DreamShardModel, load_model
from dreamshard.placement.heuristics import PLANNERS, Planner
from dreamshard.placement.tasks import Placement, PlacementTask

SEARCHES = ("search_analytic",)  # local search on the calibrated analytic cost model
LEARNED = ("dreamshard", "dreamshard_search", "rnn")  # planners that need a trained model
EXTERNAL = ("torchrec",)  # planners from an optional package (`make torchrec`)
METHODS = (*PLANNERS, *SEARCHES, *LEARNED, *EXTERNAL)
MODEL_FILE = "model.pt"  # what `dreamshard train --out DIR` writes in DIR


def place(
    task: PlacementTask, method: str = "size_lookup", seed: int = 0, model=None, samples: int = 8
) -> Placement:
    """Place a task's tables with a named planner; always legal, else InfeasibleError.

    `model` is needed by `dreamshard`, which also takes `samples`, the sampled placements it
    weighs against its greedy one (0: greedy only), and by `dreamshard_search` (its placement
    refined by local search on the cost network); `rnn` needs an RnnPlacer or its file
    (`dreamshard train-rnn`) instead. `torchrec` runs TorchRec's planner (optional package) and
    raises DreamshardError when TorchRec rejects the task.
    """
    if method not in METHODS:
        raise DreamshardError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    task.validate()
    # The learned and external planners import torch models or TorchRec: loaded on first use
    # so that `dreamshard place --method lookup` and `import dreamshard` stay quick.
    if method == "dreamshard":
        from dreamshard.planners.dreamshard_planner import dreamshard_place

        return dreamshard_place(task, resolve_model(model), samples, seed)
    if method == "dreamshard_search":
        from dreamshard.planners.search import dreamshard_search_place

        return dreamshard_search_place(task, resolve_model(model), samples, seed)
    if method == "rnn":
        from dreamshard.learn.rnn import resolve_rnn, rnn_place

        return rnn_place(task, resolve_rnn(model), seed)
    if method == "search_analytic":
        from dreamshard.planners.search import search_analytic_place

        return search_analytic_place(task, seed)
    if method == "torchrec":
        from dreamshard.planners.torchrec_planner import torchrec_place

        return torchrec_place(task, seed)
    return PLANNERS[method](task, seed)


def named_planner(method: str, model=None, samples: int = 8) -> Planner:
    """A named method as a planner `(task, seed) -> Placement`, for `evaluate` and the
    benchmarks (the model resolved once, not once per task)."""
    if method in LEARNED:
        model = resolve_model(model) if method != "rnn" else model
    return lambda task, seed: place(task, method, seed, model=model, samples=samples)


def resolve_model(model: DreamShardModel | str | Path | None) -> DreamShardModel:
    """A model object as is; a model file; a `train --out` folder; or an MLflow model URI."""
    if model is None:
        raise DreamshardError("method dreamshard needs a trained model: pass --model PATH")
    if isinstance(model, DreamShardModel):
        return model
    text = str(model)
    if text.startswith(("models:/", "runs:/")):
        # MLflow takes seconds to import: only when a registry URI is given
        from dreamshard.tracking import load_registered_model

        return load_registered_model(text)
    path = Path(text)
    if path.is_dir():
        if not (path / MODEL_FILE).is_file():
            raise DreamshardError(
                f"{path} is a folder without {MODEL_FILE}: pass the folder `dreamshard train"
                " --out` wrote, or a model file"
            )
        path = path / MODEL_FILE
    return load_model(path)
