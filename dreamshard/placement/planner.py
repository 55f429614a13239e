"""The planner contract: every placement method is one `BasePlanner` with the same signature.

A planner answers `place(task, options) -> Placement`: always legal, else InfeasibleError.
`options` (`PlanOptions`) is the one object a caller fills in; later features add fields to it
(a time budget, constraints) without touching a planner's signature. Subclasses implement
`place_tables`, the placement of whole tables (or of the shards they are handed), and may
override their split choice (`splits`: what they cut under `split="auto"`; by default only
what memory forces), `load_model` (what `options.model` becomes before placing: once per
model, not once per task) and `candidates` (their best few placements, for `place --refine`).
The registry (`placement.registry`) names them; `docs/design.md` says how to add one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from dreamshard.errors import DreamshardError
from dreamshard.placement.budget import CHECKED_SHARE, Deadline, default_time_budget
from dreamshard.placement.constraints import bind, planned_splits, sharding_problem
from dreamshard.placement.splitting import SPLIT_MODES, memory_splits, split_place
from dreamshard.placement.tasks import Placement, PlacementTask, check_legal
from dreamshard.tables.shards import Split

# A planner bound to its options: (task, seed) -> legal placement, what `evaluate` and the
# benchmarks compare (`registry.named_planner` makes one from a name).
SeededPlanner = Callable[[PlacementTask, int], Placement]


@dataclass(frozen=True)
class PlanOptions:
    """What a caller asks of any planner. A planner reads the fields it uses and ignores
    the rest.

    `model`: what a planner that needs one places with (a model object, a model file, the
    folder `dreamshard train --out` wrote, or an MLflow URI; `BasePlanner.load_model` turns it
    into the object). `samples`: how many sampled placements a learned planner weighs against
    its greedy one (0: greedy only). `split`: "auto" lets the planner split tables (its
    `splits`), "none" places whole tables, as the paper does. `time_budget`: seconds a
    planner that searches may spend (None: its own default). `constraints`: what the user
    requires of the placement (a `placement.constraints.Constraints`; None: the task's own).
    `reserve`: False lets a planner that keeps memory back of its own (TorchRec's storage
    reservation) plan on the whole cap, as ours do.
    `topology`: the hosts and links the task's devices sit on, a `costs.comm` topology name (as
    nvlink-rdma:8); None: the planner's own (a model's: the one it was trained on; the
    analytic model's: cpu-gloo). Planners that model the all-to-all plan for it.
    `hardware`: the hardware file the plan is for (a `costs.hardware.Hardware`, a shipped
    file's name or a path; None: cpu, this host's calibrated model). The planners that rate
    with the analytic model rate with its kernel model and, without a topology, its links.
    """

    seed: int = 0
    model: object = None
    samples: int = 8
    split: str = "auto"
    time_budget: float | None = None
    constraints: object = None
    reserve: bool = True
    deadline: Deadline | None = None
    topology: str | None = None
    hardware: object = None

    def __post_init__(self) -> None:
        if self.split not in SPLIT_MODES:
            raise DreamshardError(
                f"unknown split mode {self.split!r}; choose one of {', '.join(SPLIT_MODES)}"
            )
        if self.samples < 0:
            raise DreamshardError(f"samples must be 0 or more, got {self.samples}")
        if self.time_budget is not None and self.time_budget <= 0:
            raise DreamshardError(f"the time budget must be positive, got {self.time_budget}")

    def until(self) -> Deadline:
        """The deadline to plan by (none when `place` did not set one)."""
        return self.deadline or Deadline()


class BasePlanner:
    """One placement method. `name` is what its placements' `method` says and the name the
    registry lists it under."""

    name: str = ""

    def default_budget(self, task: PlacementTask) -> float:
        """Seconds this planner takes at most when the caller sets no budget: a second per
        thousand tables, at least one (`placement.budget`)."""
        return default_time_budget(len(task.tables))

    def started(self, task: PlacementTask, options: PlanOptions) -> PlanOptions:
        """`options` with the deadline of a plan of `task` that starts now (kept when set)."""
        if options.deadline is not None:
            return options
        budget = options.time_budget or self.default_budget(task)
        return replace(options, deadline=Deadline.after(CHECKED_SHARE * budget))

    def load_model(self, model: object) -> object:
        """`options.model` as this planner places with it; DreamshardError when it needs a
        model and `model` is not one. Planners that need none return it unchanged."""
        return model

    def splits(self, task: PlacementTask, options: PlanOptions) -> tuple[Split, ...]:
        """The tables this planner splits under `split="auto"`: only those no device holds
        whole, unless a planner rates more (`placement.splitting`)."""
        return memory_splits(task)

    def place_tables(self, task: PlacementTask, options: PlanOptions) -> Placement:
        """A legal placement of the task's tables as they are (each may be a shard)."""
        raise NotImplementedError

    def place(self, task: PlacementTask, options: PlanOptions) -> Placement:
        """A legal placement of `task` under `options`, split as the planner chooses when
        `options.split` is "auto"; InfeasibleError when there is none."""
        task.validate()
        if options.constraints is not None:
            task = replace(task, constraints=options.constraints)
        bind(task)  # a set that cannot hold is an error before any planning
        options = self.started(task, options)
        # what --sharding asks for, in either split mode; under "auto" the planner's own
        # splits of the tables no constraint names
        own = (lambda: self.splits(task, options)) if options.split == "auto" else None
        splits = planned_splits(task, task.constraints, own)
        if splits:
            placement = split_place(
                task, splits, lambda shards: self.place_tables(shards, options), self.name
            )
        else:
            placement = self.place_tables(task, options)
        if task.constraints:  # every planner's answer holds them (`placement.constraints`)
            check_legal(task, placement)
            problem = sharding_problem(task.constraints, placement.splits)
            if problem:
                raise DreamshardError(f"{self.name} broke a constraint: {problem}")
        return placement

    def candidates(self, task: PlacementTask, options: PlanOptions, top: int) -> list[Placement]:
        """At most `top` placements worth measuring, the planner's answer first (most planners
        have only the one)."""
        return [self.place(task, options)]

    def predict(
        self, task: PlacementTask, placement: Placement, options: PlanOptions
    ) -> float | None:
        """The overall cost (ms) this planner predicts for any placement of `task` (None: it
        has no cost model)."""
        return None
