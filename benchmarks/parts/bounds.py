"""Lower bounds on the makespan of an additive per-table cost, for any task.

The additive surrogate: each table i has a cost c_i (a heuristic key such as size_lookup, or
the cost network's prediction for the table alone), a device's load is the sum of its tables'
costs, and the makespan is the largest load. Every bound here holds for every placement of the
task under THAT surrogate, memory caps or not. They say nothing certain about the real measured
cost, which is not additive: a fused kernel costs less than its tables apart (fusion saves
per-table overhead), more when the group overflows caches, and communication depends on the
other devices. Use them to judge how far a placement is from optimal on the surrogate only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dreamshard.placement.tasks import Placement


def device_loads(costs: np.ndarray, placement: Placement, num_devices: int) -> np.ndarray:
    """Additive load per device: the sum of its tables' costs."""
    return np.bincount(np.asarray(placement.devices), weights=costs, minlength=num_devices)


def additive_makespan(costs: np.ndarray, placement: Placement, num_devices: int) -> float:
    """The largest device load of a placement under the additive cost."""
    return float(device_loads(costs, placement, num_devices).max())


@dataclass(frozen=True)
class LowerBounds:
    """Makespan lower bounds under the additive cost (each holds on its own; `best` is the max).

    average: total cost / D (some device carries at least the mean load);
    largest: the costliest table (it sits whole on one device);
    pigeonhole: the D-th plus the (D+1)-th largest costs (of the D+1 costliest tables two share
    a device, and the cheapest such pair is at least these two); 0 when T <= D.
    """

    average: float
    largest: float
    pigeonhole: float

    @property
    def best(self) -> float:
        return max(self.average, self.largest, self.pigeonhole)


def lower_bounds(costs: np.ndarray, num_devices: int) -> LowerBounds:
    """The three bounds for per-table `costs` (non-negative) on `num_devices` devices."""
    ranked = np.sort(np.asarray(costs, dtype=np.float64))[::-1]
    pigeonhole = 0.0
    if len(ranked) > num_devices:
        pigeonhole = float(ranked[num_devices - 1] + ranked[num_devices])
    return LowerBounds(float(ranked.sum() / num_devices), float(ranked[0]), pigeonhole)
