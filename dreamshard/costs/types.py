"""What a measurement returns, and the interface every cost backend implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from dreamshard.placement.tasks import Placement, PlacementTask

COST_TERMS = ("fwd_comp", "fwd_comm", "bwd_comm", "bwd_comp")


@dataclass(frozen=True)
class DeviceCost:
    """Milliseconds of one device's training step, split as DreamShard does."""

    fwd_comp: float
    fwd_comm: float
    bwd_comm: float
    bwd_comp: float
    cv: float = 0.0  # spread of the timed iterations (coefficient of variation)

    @property
    def total(self) -> float:
        return self.fwd_comp + self.fwd_comm + self.bwd_comm + self.bwd_comp

    def terms(self) -> tuple[float, float, float, float]:
        return (self.fwd_comp, self.fwd_comm, self.bwd_comm, self.bwd_comp)


@dataclass(frozen=True)
class PlacementCost:
    """Per-device costs of a placement; the overall cost is the slowest device's total."""

    devices: tuple[DeviceCost, ...]
    backend: str
    comm: str  # "measured" or "modeled" (or "none" on one device)
    info: dict = field(default_factory=dict, compare=False)

    @property
    def overall(self) -> float:
        return max(d.total for d in self.devices)

    @property
    def spread(self) -> float:
        """The largest per-device coefficient of variation."""
        return max(d.cv for d in self.devices)


class CostBackend(Protocol):
    """Measures (or estimates) a placement's per-device cost breakdown."""

    name: str

    def config(self) -> dict:
        """Settings that change what a measurement means (part of a record's identity)."""
        ...

    def measure(self, task: PlacementTask, placement: Placement) -> PlacementCost: ...
