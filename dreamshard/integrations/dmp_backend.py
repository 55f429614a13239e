"""The end-to-end backend, `dmp`: a placement's cost as real TorchRec training steps.

The task's tables become one `EmbeddingBagCollection` of a small training model (a dense tower
and a loss on top), sharded by the placement's plan with TorchRec's `DistributedModelParallel`
and trained under torchrun, one process per device (gloo on the CPU, NCCL on GPUs): forward,
all-to-alls, backward with the fused optimizer, the dense optimizer. Each rank times its steps
after a warm-up (`gpu_tasks/dmp_step.py`); the cost is the slowest rank's median step.

A step is not split into DreamShard's four terms: a rank's whole median step is recorded as its
`fwd_comp`, the other three terms are 0 and `info["terms"]` says so (communication is measured,
inside the step). The step is timed by the wall clock; `StepConfig(clock="cpu")` takes each
rank's CPU time during the step instead (the CPU only), which a busy shared host disturbs far
less: it leaves out the time a rank was preempted and the time it waited for the other ranks,
so the slowest rank's is its own work, the part a placement balances.

Several plans of one task are measured in one launch by `measure_plans`, in interleaved rounds
(plans in a fresh order each round), and TorchRec's own plans, which may be data-parallel and
so not a `Placement`, are measured the same way from their JSON form. A measurement (a label
for the cost network) is `rounds` such rounds beside the task's reference plan: each rank's
median step over the rounds, and the paired ratio to the reference in the same rounds.
`measure_batch` measures many placements of a task in one launch, which is how a collection
(`costs/collect.py`) runs: a launch that fails loses only its own placements.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from dreamshard.costs.fbgemm import MeasurementError, available_memory_bytes
from dreamshard.costs.host_lock import host_lock
from dreamshard.costs.torchrun import TorchrunError, run_job
from dreamshard.costs.types import DeviceCost, PlacementCost
from dreamshard.errors import DreamshardError, InfeasibleError
from dreamshard.placement.plan_file import plan_to_dict
from dreamshard.placement.registry import place
from dreamshard.placement.tasks import Placement, PlacementTask, check_legal
from dreamshard.report import format_bytes
from dreamshard.tables.sources import table_to_dict
from dreamshard.tables.traces import DEFAULT_BATCH, table_batch_size

PROGRAM = "gpu_tasks.dmp_step"
STEP_TERMS = "step"  # info["terms"]: the whole step sits in fwd_comp
CLOCKS = {"wall": "wall clock", "cpu": "each rank's CPU time in the step"}
# The heuristic whose plan of the task is measured in every launch, for paired ratios: a plan
# and the reference see the same host state in each round, so their ratio drifts far less than
# either step (`info["paired_ratio"]`, `info["paired_cv"]`).
REFERENCE = "size_lookup"


@dataclass(frozen=True)
class StepConfig:
    """How the training steps are run and timed (part of a measurement's identity)."""

    warmup: int = 5  # steps before timing, every time a plan's turn comes
    steps: int = 20  # timed steps per turn; the median is kept
    optimizer: str = "EXACT_SGD"  # the fused embedding optimizer (fbgemm's EmbOptimType name)
    learning_rate: float = 0.01
    hidden: int = 64  # width of the dense tower's hidden layer
    threads: int = 1  # per rank, on the CPU
    device: str = "auto"  # "auto": CUDA when present (one GPU per rank), else the CPU
    seed: int = 0
    clock: str = "wall"  # or "cpu": each rank's CPU time during the step (CPU runs only)
    pin: bool = False  # on the CPU, each rank bound to a core of its own (rank i: the i-th)
    # "steps": in a round, one timed step of each plan in turn, `steps` times (a slow moment of
    # the host falls on every plan alike: the paired ratio's spread over rounds 4.5% at 20
    # steps, 3.4% at 40, against 10.6% and 8.1% in turns, and 10.3% at 80); "turns": each
    # plan's timed steps in a row (docs/torchrec.md, "DMP noise")
    interleave: str = "steps"


@dataclass(frozen=True)
class DmpRun:
    """Step times of several plans of one task, measured in interleaved rounds in one launch."""

    step_ms: np.ndarray  # [ranks, rounds, plans]: each rank's median step of each turn (wall)
    cpu_ms: np.ndarray  # [ranks, rounds, plans]: the same, the rank's CPU time in the step
    cv: np.ndarray  # [ranks, rounds, plans]: spread of the timed steps of each turn (wall)
    losses: list  # per plan, per rank: [loss after the first warm-up, loss at the end]
    sharding_types: list[list[str]]  # per plan
    process_group: str
    batch: int  # the global batch (per rank: batch // ranks)
    clock: str = "wall"  # which of the two `overall` and `placement_cost` take
    info: dict = field(default_factory=dict)

    def per_rank(self, clock: str | None = None) -> np.ndarray:
        return self.cpu_ms if (clock or self.clock) == "cpu" else self.step_ms

    def overall(self, clock: str | None = None) -> np.ndarray:
        """[rounds, plans]: the slowest rank's median step (by `clock`, default the run's)."""
        return self.per_rank(clock).max(axis=0)

    def label(self, plan: int, reference: int | None = None) -> PlacementCost:
        """Plan `plan`'s measurement: each rank's median step over the rounds (by the run's
        clock) in `fwd_comp`. With `reference`, the plan measured beside it in every round,
        `info` holds the paired ratio (the median over rounds of this plan's slowest-rank step
        over the reference's) and its spread (`paired_cv`, over rounds)."""
        ms = self.per_rank()[:, :, plan]  # [ranks, rounds]
        cv = np.median(self.cv[:, :, plan], axis=1)
        devices = tuple(
            DeviceCost(float(np.median(ms[r])), 0.0, 0.0, 0.0, float(cv[r]))
            for r in range(ms.shape[0])
        )
        overall = self.overall()
        info = {
            "terms": STEP_TERMS,
            "clock": self.clock,
            "rounds": int(ms.shape[1]),
            "round_ms": overall[:, plan].tolist(),  # the slowest rank's step, each round
            "wall_ms": np.median(self.step_ms[:, :, plan], axis=1).tolist(),
            "cpu_ms": np.median(self.cpu_ms[:, :, plan], axis=1).tolist(),
            "batch": self.batch,
            "process_group": self.process_group,
            "sharding_types": self.sharding_types[plan],
            **self.info,
        }
        if reference is not None:
            ratios = overall[:, plan] / overall[:, reference]
            info["reference_ms"] = overall[:, reference].tolist()
            info["paired_ratio"] = float(np.median(ratios))
            info["paired_cv"] = float(ratios.std() / ratios.mean()) if len(ratios) > 1 else 0.0
        return PlacementCost(devices, DmpBackend.name, "measured", info)


@dataclass
class DmpBackend:
    """Placements measured as TorchRec training steps. A measurement is `rounds` interleaved
    rounds in one launch beside the task's `REFERENCE` plan; `measure_batch` measures up to
    `plans_per_launch` placements of one task in a launch (collections do), since starting
    the ranks and building the models costs more than the steps of a small task."""

    steps: StepConfig = field(default_factory=StepConfig)
    batch_size: int = DEFAULT_BATCH  # the global batch for tables without a trace
    retries: int = 1
    timeout_s: float = 3600.0
    rounds: int = 3  # interleaved rounds per launch; a label is each rank's median over them
    plans_per_launch: int = 8  # placements of one task measured together (`measure_batch`)
    program: str = PROGRAM  # the program torchrun starts (a module, or a script's path)
    name: str = field(default="dmp", init=False)

    def __post_init__(self):
        if self.steps.clock not in CLOCKS:
            raise DreamshardError(f"unknown clock {self.steps.clock!r}; use wall or cpu")
        if self.steps.interleave not in ("turns", "steps"):
            raise DreamshardError(
                f"unknown interleave {self.steps.interleave!r}; use turns or steps"
            )
        if self.rounds < 1 or self.plans_per_launch < 1:
            raise DreamshardError("the dmp backend needs at least one round and one plan a launch")

    def device_kind(self) -> str:
        if self.steps.device != "auto":
            return self.steps.device
        import torch  # only to ask whether CUDA is here

        return "cuda" if torch.cuda.is_available() else "cpu"

    def config(self) -> dict:
        return {
            "backend": self.name,
            "device": self.device_kind(),
            "launcher": "torchrun",
            "topology": "measured",
            "steps": asdict(self.steps),
            "rounds": self.rounds,
            "reference": REFERENCE,
        }

    def measure(self, task: PlacementTask, placement: Placement) -> PlacementCost:
        return self.measure_batch(task, [placement])[0]

    def measure_batch(
        self, task: PlacementTask, placements: Sequence[Placement]
    ) -> list[PlacementCost]:
        """The placements' labels (`DmpRun.label`), measured in one launch with the task's
        reference plan (`REFERENCE`'s placement, left out where it cannot place the task)."""
        reference = reference_placement(task)
        plans = list(placements) if reference is None else [reference, *placements]
        run = self.measure_plans(task, plans, rounds=self.rounds)
        first = len(plans) - len(placements)
        return [
            run.label(first + i, None if reference is None else 0) for i in range(len(placements))
        ]

    def measure_plans(
        self, task: PlacementTask, plans: Sequence[Placement | dict], rounds: int = 1
    ) -> DmpRun:
        """Every plan (a `Placement` of the task, or a TorchRec plan in its JSON form,
        `integrations.torchrec_export`) trained under DMP, in `rounds` interleaved rounds."""
        job = self.job(task, plans, rounds)
        started = time.time()
        result = self.run(job, task.num_devices, self.program)
        finished = time.time()
        ranks = result["ranks"]
        return DmpRun(
            step_ms=np.array([r["step_ms"] for r in ranks]),
            cpu_ms=np.array([r["cpu_ms"] for r in ranks]),
            cv=np.array([r["cv"] for r in ranks]),
            losses=[[r["loss"][p] for r in ranks] for p in range(len(plans))],
            sharding_types=ranks[0]["sharding_types"],
            process_group=result["backend"],
            batch=job["global_batch"],
            clock=self.steps.clock,
            info={"started": started, "finished": finished, "device": ranks[0]["device"]},
        )

    def job(self, task: PlacementTask, plans: Sequence[Placement | dict], rounds: int) -> dict:
        """What the program is told: the tables, the plans, the batch and the step settings;
        DreamshardError first when the plans or this host cannot be run."""
        task.validate()
        entries = [self._plan_entry(task, plan) for plan in plans]
        self._check_host(task, len(entries))
        batch = table_batch_size(task.tables, self.batch_size)
        if batch < task.num_devices:
            raise DreamshardError(
                f"a batch of {batch} cannot be split over {task.num_devices} ranks"
            )
        return {
            "tables": [table_to_dict(t) for t in task.tables],
            "plans": entries,
            "global_batch": batch,
            "rounds": rounds,
            **asdict(self.steps),
        }

    def run(self, job: dict, ranks: int, program: str = PROGRAM) -> dict:
        """The program (a module, or a script's path) on `ranks` ranks under torchrun, holding
        the host's measurement lock, retried once; its result JSON."""
        with host_lock():  # one measurement at a time on this host (costs/host_lock.py)
            for attempt in range(self.retries + 1):
                try:
                    return run_job(
                        program, ranks, job, timeout_s=self.timeout_s, threads=self.steps.threads
                    )
                except TorchrunError as exc:
                    if attempt == self.retries:
                        raise MeasurementError(str(exc)) from exc
                    print(f"dreamshard: DMP run failed ({exc}); retrying", file=sys.stderr)
        raise AssertionError("unreachable")

    def _plan_entry(self, task: PlacementTask, plan: Placement | dict) -> dict:
        if isinstance(plan, Placement):
            check_legal(task, plan)
            return {"placement": plan_to_dict(task, plan)}  # our plan JSON
        if not isinstance(plan, dict) or "plan" not in plan:
            raise DreamshardError("a plan to measure is a Placement or a TorchRec plan's JSON form")
        return {"sharding_plan": plan}  # TorchRec's ShardingPlan JSON

    def _check_host(self, task: PlacementTask, plans: int) -> None:
        """One clear line when this host cannot run the ranks or hold the models."""
        if importlib.util.find_spec("torchrec") is None:
            raise DreamshardError(
                "the dmp backend needs torchrec: run `make torchrec` (docs/torchrec.md)"
            )
        ranks = task.num_devices
        if self.device_kind() == "cuda":
            import torch

            if self.steps.clock == "cpu":
                raise DreamshardError("clock cpu times CPU runs only; on GPUs use the wall clock")
            if ranks > torch.cuda.device_count():
                raise DreamshardError(
                    f"the dmp backend runs one rank per GPU: {ranks} devices asked, "
                    f"{torch.cuda.device_count()} GPUs here"
                )
            return
        cores = host_cores()
        if ranks > cores:
            raise DreamshardError(
                f"the dmp backend runs one process per device: {ranks} devices on {cores} CPU "
                "cores would share cores and time nothing real; use at most "
                f"{cores} devices here, or a host with {ranks} GPUs"
            )
        needed = plans * sum(t.rows * t.dim * 4 for t in task.tables) * 2  # weights, with slack
        free = available_memory_bytes()
        if needed > 0.8 * free:
            raise DreamshardError(
                f"training {plans} plan(s) of these tables under DMP needs about "
                f"{format_bytes(needed)} of host memory; only {format_bytes(free)} is available"
            )


def reference_placement(task: PlacementTask) -> Placement | None:
    """The plan every launch measures beside its placements: `REFERENCE`'s placement of the
    task (None where it cannot place it)."""
    try:
        return place(task, REFERENCE)
    except InfeasibleError:
        return None


def host_cores() -> int:
    """The CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
