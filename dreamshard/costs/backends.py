"""Choosing a cost backend by name."""

from __future__ import annotations

from dreamshard.costs.types import CostBackend
from dreamshard.errors import DreamshardError
from dreamshard.lazy import load_object

BACKENDS = ("fbgemm", "simulated", "dmp")
# The dmp backend runs TorchRec training steps: it lives with the TorchRec code, above this stage
DMP = "dreamshard.integrations.dmp_backend"


def make_backend(
    name: str,
    iterations: int | None = None,
    launcher: str = "inprocess",
    topology: str = "auto",
    rounds: int | None = None,
) -> CostBackend:
    """`fbgemm` (real kernels on this host), `simulated` (the calibrated analytic model) or
    `dmp` (real TorchRec training steps under torchrun; `iterations` sets its timed steps and
    `rounds` its interleaved rounds a launch, of which a label is the median)."""
    if rounds is not None and name != "dmp":
        raise DreamshardError(
            f"measurement rounds apply to the dmp backend only, not {name!r}; drop the rounds"
        )
    if name == "fbgemm":
        from dreamshard.costs.fbgemm import FbgemmBackend
        from dreamshard.costs.tbe import TimingConfig

        timing = TimingConfig(iterations=iterations) if iterations else TimingConfig()
        return FbgemmBackend(timing=timing, topology=topology, launcher=launcher)
    if name == "simulated":
        from dreamshard.costs.simulated import SimulatedBackend

        return SimulatedBackend(topology="cpu-gloo" if topology == "auto" else topology)
    if name == "dmp":
        step_config = load_object(f"{DMP}:StepConfig")
        steps = step_config(steps=iterations) if iterations else step_config()
        backend = load_object(f"{DMP}:DmpBackend")
        return backend(steps, rounds=rounds) if rounds else backend(steps)
    raise DreamshardError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")


def describe_costs(config: dict) -> str:
    """How a backend's costs were made, in words: hardware, precision, communication."""
    name = config.get("backend", "?")
    if name == "fbgemm":
        device = config.get("device", "?")
        precision = "fp16" if device == "cuda" else "fp32"
        topology = config.get("topology", "?")
        comm = (
            "all-to-all measured (torchrun)"
            if topology == "measured"
            else f"all-to-all modeled ({topology} topology)"
        )
        return (
            f"fbgemm backend (measured): fused kernels timed on {device}, {precision} weights; "
            f"{comm}"
        )
    if name == "simulated":
        return (
            "simulated backend (not measured): the analytic cost model fitted to fbgemm CPU "
            f"measurements; all-to-all modeled ({config.get('topology', '?')} topology)"
        )
    if name == "dmp":
        clocks = load_object(f"{DMP}:CLOCKS")
        device = config.get("device", "?")
        steps = config.get("steps", {})
        precision = "fp16" if device == "cuda" else "fp32"
        group = "NCCL" if device == "cuda" else "gloo"
        return (
            f"dmp backend (measured): real TorchRec training steps (DistributedModelParallel, "
            f"fused kernels and optimizer, dense tower, all-to-alls) under torchrun, one rank "
            f"per device on {device} ({group}), {precision} weights; the slowest rank's median "
            f"of {steps.get('steps', '?')} steps after {steps.get('warmup', '?')} warm-up "
            f"({clocks[steps.get('clock', 'wall')]}), the whole step in fwd_comp (not split "
            "into terms)"
            + (", each rank bound to a core of its own" if steps.get("pin") else "")
            + (
                "; the plans' steps interleaved one by one"
                if steps.get("interleave") == "steps"
                else "; each plan's steps in a turn of their own"
            )
            + (
                f"; a label: the median over {config['rounds']} interleaved rounds beside the "
                f"task's {config['reference']} plan"
                if "rounds" in config
                else ""
            )
        )
    return f"{name} backend"
