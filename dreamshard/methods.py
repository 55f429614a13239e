"""Planners by method name: the one dispatcher, above every planner, with model resolution.

`place(task, method, ...)` is what the CLI, the flows, the dashboard and the benchmarks call.
A learned method's `model` may be a model object, a model file, the folder `dreamshard train
--out` wrote, or an MLflow URI (`models:/name@alias`, `runs:/id/policy`).
"""

from __future__ import annotations

from pathlib import Path

from dreamshard.errors import DreamshardError
from dreamshard.learn.model_file import DreamShardModel, load_model
from dreamshard.placement.heuristics import HEURISTIC_KEYS, PLANNERS, Planner
from dreamshard.placement.splitting import SPLIT_MODES, memory_splits, split_place
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.tables.shards import Split

SEARCHES = ("search_analytic",)  # local search on the calibrated analytic cost model
LEARNED = ("dreamshard", "dreamshard_search", "rnn")  # planners that need a trained model
EXTERNAL = ("torchrec",)  # planners from an optional package (`make torchrec`)
METHODS = (*PLANNERS, *SEARCHES, *LEARNED, *EXTERNAL)
MODEL_FILE = "model.pt"  # what `dreamshard train --out DIR` writes in DIR


def place(
    task: PlacementTask,
    method: str = "size_lookup",
    seed: int = 0,
    model=None,
    samples: int = 8,
    split: str = "auto",
) -> Placement:
    """Place a task's tables with a named planner; always legal, else InfeasibleError.

    `model` is needed by `dreamshard`, which also takes `samples`, the sampled placements it
    weighs against its greedy one (0: greedy only), and by `dreamshard_search` (its placement
    refined by local search on the cost network); `rnn` needs an RnnPlacer or its file
    (`dreamshard train-rnn`) instead. `torchrec` runs TorchRec's planner (optional package) and
    raises DreamshardError when TorchRec rejects the task.

    `split="auto"` lets the planner split tables (`placement.splitting`): every planner splits
    a table no device holds whole; the heuristics also halve a table whose key exceeds the mean
    device load, and `dreamshard`, `dreamshard_search` and `search_analytic` pick the splits
    their cost model rates cheapest; `torchrec` lets TorchRec's planner shard column-wise and
    row-wise as it decides. `split="none"` places whole tables, as the paper does.
    """
    if method not in METHODS:
        raise DreamshardError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if split not in SPLIT_MODES:
        raise DreamshardError(
            f"unknown split mode {split!r}; choose one of {', '.join(SPLIT_MODES)}"
        )
    task.validate()
    if split == "auto" and method != "torchrec":  # TorchRec's planner decides its own splits
        if method in LEARNED and method != "rnn":
            model = resolve_model(model)
        splits = planner_splits(task, method, model)
        if splits:
            return split_place(
                task,
                splits,
                lambda shards: place(shards, method, seed, model, samples, "none"),
                method,
            )
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

        return torchrec_place(task, seed, split=split)
    return PLANNERS[method](task, seed)


def planner_splits(task: PlacementTask, method: str, model=None) -> tuple[Split, ...]:
    """The tables `method` splits under `--split auto` (see `place`)."""
    if method in HEURISTIC_KEYS:
        from dreamshard.planners.split_choice import checked_balance_splits  # quick CLI start

        return checked_balance_splits(task, method)
    if method in ("dreamshard", "dreamshard_search"):
        from dreamshard.planners.dreamshard_planner import dreamshard_splits  # torch: on use

        return dreamshard_splits(task, model)
    if method == "search_analytic":
        from dreamshard.planners.search import analytic_splits

        return analytic_splits(task)
    return memory_splits(task)  # random and rnn split only what memory forces


def named_planner(method: str, model=None, samples: int = 8, split: str = "none") -> Planner:
    """A named method as a planner `(task, seed) -> Placement`, for `evaluate` and the
    benchmarks (the model resolved once, not once per task). They compare whole-table plans,
    as the paper does, unless given `split="auto"`."""
    if method in LEARNED:
        model = resolve_model(model) if method != "rnn" else model
    return lambda task, seed: place(task, method, seed, model=model, samples=samples, split=split)


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
