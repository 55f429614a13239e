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
