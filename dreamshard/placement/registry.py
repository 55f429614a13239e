"""Every placement method by name: the registry, and `place(task, method, ...)` over it.

The CLI's choices, the dashboard's list, the flows, `DreamShardPlanner`, the cost collector
and the benchmarks read the registry; none of them knows a method by name. A registration says
what the registry must know before the planner is loaded (its kind, what it needs, a line for
`--help`) and where the planner is: a "module:attribute" string, imported on first use, so
this low stage lists planners that live above it (the learned ones import torch, TorchRec's
imports TorchRec) and `dreamshard --help` stays quick. Adding a planner is one file with a
`BasePlanner` and one `register(...)` call (below for the built-in ones).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dreamshard.errors import DreamshardError
from dreamshard.lazy import load_object
from dreamshard.placement.planner import BasePlanner, PlanOptions, SeededPlanner
from dreamshard.placement.tasks import Placement, PlacementTask

# What a planner may need beyond the task: a trained DreamShard model (cost network and
# policy), an RNN placer (`dreamshard train-rnn`), or the optional TorchRec package.
MODEL = "model"
RNN_PLACER = "rnn placer"
TORCHREC = "torchrec"
MODEL_NEEDS = (MODEL, RNN_PLACER)  # needs that `--model` answers

# Kinds, in the order reports list them: "baseline" (random), "heuristic" (the greedy keys,
# the references of `evaluation.results`), "search", "learned", "external" (another tool's).
KINDS = ("baseline", "heuristic", "search", "learned", "external")


@dataclass(frozen=True)
class Registration:
    """A registered method: its name, kind, needs and one line for `--help`, and the planner
    (a `BasePlanner`, or the "module:attribute" string that names one)."""

    name: str
    planner: BasePlanner | str
    kind: str
    summary: str
    needs: tuple[str, ...] = ()

    def load(self) -> BasePlanner:
        planner = load_object(self.planner) if isinstance(self.planner, str) else self.planner
        if not isinstance(planner, BasePlanner) or planner.name != self.name:
            raise TypeError(f"{self.planner!r} is not a BasePlanner named {self.name!r}")
        return planner

    @property
    def needs_model(self) -> bool:
        return any(need in MODEL_NEEDS for need in self.needs)


_REGISTRY: dict[str, Registration] = {}


def register(
    name: str,
    planner: BasePlanner | str,
    kind: str,
    summary: str,
    needs: tuple[str, ...] = (),
) -> Registration:
    """List a planner under `name` (replacing one of that name). `planner` is the object or
    "module:attribute"; `kind` one of KINDS; `needs` from MODEL, RNN_PLACER, TORCHREC."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose one of {', '.join(KINDS)}")
    entry = Registration(name, planner, kind, summary, tuple(needs))
    _REGISTRY[name] = entry
    return entry


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def registration(method: str) -> Registration:
    """The registration of `method`; DreamshardError naming the choices when there is none."""
    if method not in _REGISTRY:
        raise DreamshardError(
            f"unknown method {method!r}; choose one of {', '.join(method_names())}"
        )
    return _REGISTRY[method]


def registrations(*kinds: str) -> list[Registration]:
    """Every registration (of `kinds`, when given), in registration order."""
    return [r for r in _REGISTRY.values() if not kinds or r.kind in kinds]


def kind_of(name: str) -> str | None:
    """The kind of a registered method; None for any other name (a report's "candidate")."""
    entry = _REGISTRY.get(name)
    return entry.kind if entry else None


def method_names(*kinds: str) -> tuple[str, ...]:
    """The registered methods' names (of `kinds`, when given), in registration order."""
    return tuple(r.name for r in registrations(*kinds))


def place(
    task: PlacementTask,
    method: str = "size_lookup",
    seed: int = 0,
    model=None,
    samples: int = 8,
    split: str = "auto",
    options: PlanOptions | None = None,
    time_budget: float | None = None,
    topology: str | None = None,
    hardware: object = None,
) -> Placement:
    """Place a task's tables with a named planner; always legal, else InfeasibleError.

    A method that needs a model takes it as `model`: a model object, a model file, the folder
    `dreamshard train --out` wrote, or an MLflow URI (`models:/name@alias`, `runs:/id/policy`).
    `samples` (learned planners): sampled placements weighed against the greedy one (0: greedy
    only). `split="auto"` lets the planner split tables (its split choice, `BasePlanner.splits`;
    `placement.splitting`), `split="none"` places whole tables, as the paper does.
    `time_budget`: seconds the plan may take (None: the planner's default, `placement.budget`).
    `topology`: the devices' hosts and links (a `costs.comm` name; None: the planner's own).
    `hardware`: the hardware file planned for (`PlanOptions.hardware`; None: cpu).
    `options`, when given, replaces seed, model, samples, split, the budget, the topology and
    the hardware.
    """
    planner = registration(method).load()
    options = options or PlanOptions(
        seed, model, samples, split, time_budget, topology=topology, hardware=hardware
    )
    options = replace(options, model=planner.load_model(options.model))
    return planner.place(task, options)


def named_planner(
    method: str, model=None, samples: int = 8, split: str = "none", **options
) -> SeededPlanner:
    """A named method as a planner `(task, seed) -> Placement`, for `evaluate` and the
    benchmarks: the model resolved once, not once per task. They compare whole-table plans,
    as the paper does, unless given `split="auto"`. `options`: more `PlanOptions` fields."""
    planner = registration(method).load()
    fixed = PlanOptions(0, model, samples, split, **options)
    fixed = replace(fixed, model=planner.load_model(fixed.model))
    return lambda task, seed: planner.place(task, replace(fixed, seed=seed))


def baseline_planners(
    split: str = "none", kinds: tuple[str, ...] = ("baseline", "heuristic")
) -> dict[str, SeededPlanner]:
    """Random and the heuristics, by name: the planners that need nothing and search nothing,
    which every comparison runs (`kinds`: of those, the kinds wanted)."""
    names = method_names(*kinds)
    return {name: named_planner(name, split=split) for name in names}


def __getattr__(name: str):
    if name == "METHODS":  # the names as registered now (a test may register more)
        return method_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


register(
    "random",
    "dreamshard.planners.baselines:RANDOM",
    "baseline",
    "each table on a random device with room",
)
register("dim", "dreamshard.planners.baselines:DIM", "heuristic", "greedy balance of dims")
register(
    "size",
    "dreamshard.planners.baselines:SIZE",
    "heuristic",
    "greedy balance of sizes (rows x dim)",
)
register(
    "lookup",
    "dreamshard.planners.baselines:LOOKUP",
    "heuristic",
    "greedy balance of lookups (dim x pooling factor)",
)
register(
    "size_lookup",
    "dreamshard.planners.baselines:SIZE_LOOKUP",
    "heuristic",
    "greedy balance of dim x pooling factor x log10(rows)",
)
register(
    "search_analytic",
    "dreamshard.planners.search:SEARCH_ANALYTIC",
    "search",
    "local search on the calibrated analytic cost model",
)
register(
    "dreamshard",
    "dreamshard.planners.dreamshard_planner:DREAMSHARD",
    "learned",
    "the trained policy and cost network (DreamShard)",
    needs=(MODEL,),
)
register(
    "dreamshard_search",
    "dreamshard.planners.search:DREAMSHARD_SEARCH",
    "learned",
    "dreamshard, then local search on its cost network",
    needs=(MODEL,),
)
register(
    "rnn",
    "dreamshard.planners.rnn_planner:RNN",
    "learned",
    "the RNN placer baseline (fixed device count)",
    needs=(RNN_PLACER,),
)
register(
    "torchrec",
    "dreamshard.integrations.torchrec_planner:TORCHREC",
    "external",
    "TorchRec's EmbeddingShardingPlanner",
    needs=(TORCHREC,),
)
