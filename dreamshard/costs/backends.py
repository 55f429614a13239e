"""Choosing a cost backend by name."""

from __future__ import annotations

from dreamshard.costs.types import CostBackend
from dreamshard.errors import DreamshardError

BACKENDS = ("fbgemm", "simulated")


def make_backend(
    name: str, iterations: int | None = None, launcher: str = "inprocess", topology: str = "auto"
) -> CostBackend:
    """`fbgemm` (real kernels on this host) or `simulated` (the calibrated analytic model)."""
    if name == "fbgemm":
        from dreamshard.costs.fbgemm import FbgemmBackend
        from gpu_tasks.tbe import TimingConfig

        timing = TimingConfig(iterations=iterations) if iterations else TimingConfig()
        return FbgemmBackend(timing=timing, topology=topology, launcher=launcher)
    if name == "simulated":
        from dreamshard.costs.simulated import SimulatedBackend

        return SimulatedBackend(topology="cpu-gloo" if topology == "auto" else topology)
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
    return f"{name} backend"
