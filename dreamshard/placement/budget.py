"""Planning time: the deadline a planner answers by, and the default budget.

A planner's time budget (`PlanOptions.time_budget`, `dreamshard place --time-budget`) bounds
its whole answer, splitting included. `BasePlanner.place` turns it into a `Deadline` when it
starts; every part that searches (the split choice, the policy's samples, the cost network's
greedy placement, the local searches) checks it and stops with the best legal plan found so
far. The first legal plan comes from the heuristics, which take milliseconds even at 10,000
tables on 1,024 devices, so a plan is always returned; a budget too small for anything better
returns that one.

The default budget grows with the task: half a second per thousand tables, at least half a
second. At the paper's scale (856 tables on 128 GPUs) TorchRec's planner takes 0.55 s on this
2-core host (a warm process, table-wise), and its users switch only to a planner that is no
slower; at 10,000 tables that is 5 s (TorchRec's planner made no plan there). Below a few
hundred tables no planner here comes near it, so small tasks plan exactly as without a
budget (benchmarks/results/planning_speed.md).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

SECONDS_PER_1000_TABLES = 0.5
MIN_SECONDS = 0.5
# The share of a planner's budget its split choice may use; placing the shards has the rest.
SPLIT_SHARE = 0.25
# The share of the budget the parts that check the deadline may use: what runs after the last
# check (scoring the last candidates, building the plan) has the rest.
CHECKED_SHARE = 0.8


def default_time_budget(num_tables: int) -> float:
    """Seconds a planner may take by default on `num_tables` tables (module docstring)."""
    return max(MIN_SECONDS, SECONDS_PER_1000_TABLES * num_tables / 1000)


@dataclass(frozen=True)
class Deadline:
    """When a planner must answer, as a `time.perf_counter()` time (infinite: never)."""

    at: float = math.inf

    @classmethod
    def after(cls, seconds: float | None) -> Deadline:
        """A deadline `seconds` from now (None: none)."""
        return cls() if seconds is None else cls(time.perf_counter() + seconds)

    def left(self) -> float:
        """Seconds until the deadline, 0 once it has passed (inf when there is none)."""
        return max(0.0, self.at - time.perf_counter())

    def passed(self) -> bool:
        return time.perf_counter() >= self.at

    def share(self, fraction: float) -> Deadline:
        """A deadline `fraction` of the time left from now: what one part of a planner may use
        so that the parts after it keep the rest."""
        left = self.left()
        return self if math.isinf(left) else Deadline.after(fraction * left)
