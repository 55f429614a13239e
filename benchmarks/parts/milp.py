"""The exact reference: the optimal placement of a small task under an additive per-table cost.

A mixed-integer program solved by HiGHS (through `scipy.optimize.milp`): binary x[i, d] puts
table i on device d, each table on exactly one device, each device within its memory cap, and
the makespan z at least every device's load sum_i c_i x[i, d]; minimise z. Devices are
identical, so the k-th costliest table may only use devices 0..k (symmetry breaking), and z
starts at the best lower bound of `benchmarks.parts.bounds`.

What it proves: the minimum over legal placements of the ADDITIVE makespan for the given
per-table costs (a heuristic key, or the cost network's prediction for each table alone). The
real measured cost is not additive (fusion, caches, communication), so the MILP's placement is
optimal for the surrogate only, and its objective bounds nothing about measured cost.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from benchmarks.parts.bounds import additive_makespan, lower_bounds
from dreamshard.placement.constraints import bind
from dreamshard.placement.tasks import Placement, PlacementTask, is_legal

STATUS = {0: "optimal", 1: "time_limit", 2: "infeasible"}


@dataclass(frozen=True)
class MilpResult:
    """`placement` is None when none was found (infeasible, or the time ran out first).

    objective: the placement's additive makespan; bound: the solver's proven lower bound on the
    optimum; gap = (objective - bound) / objective (0 when proven optimal within tolerance).
    """

    placement: Placement | None
    objective: float
    bound: float
    gap: float
    status: str  # optimal | time_limit | infeasible | over a cap by tolerance | solver message
    seconds: float


def _constraints(task: PlacementTask, costs: np.ndarray) -> list[LinearConstraint]:
    """Rows over [x (table-major, T*D), z]: one device per table, loads <= z, memory <= cap,
    and the task's together and apart constraints."""
    t, d = len(costs), task.num_devices
    x = np.arange(t * d)
    table_of, device_of = x // d, x % d
    n = t * d + 1

    def matrix(rows, cols, values, num_rows):
        return coo_matrix((values, (rows, cols)), shape=(num_rows, n)).tocsr()

    one_each = matrix(table_of, x, np.ones(t * d), t)
    load = matrix(
        np.concatenate([device_of, np.arange(d)]),
        np.concatenate([x, np.full(d, t * d)]),
        np.concatenate([costs[table_of], -np.ones(d)]),
        d,
    )
    memory = matrix(device_of, x, (task.table_bytes() / task.memory_cap_bytes)[table_of], d)
    rows = [
        LinearConstraint(one_each, 1, 1),
        LinearConstraint(load, -np.inf, 0),
        LinearConstraint(memory, -np.inf, 1),
    ]
    return rows + constraint_rows(task, n)


def constraint_rows(task: PlacementTask, n: int) -> list[LinearConstraint]:
    """The task's together and apart constraints as rows over n columns whose first T*D are
    x (table-major: x[t * D + d] = 1 where table t is on device d): each group member on its
    first member's device, and at most one of a table and each partner per device."""
    bound, d = bind(task), task.num_devices
    if bound is None:
        return []
    pairs = [(int(m[0]), int(o)) for m in bound.members for o in m[1:]]
    pairs_apart = [(a, int(b)) for a, bs in bound.partners.items() for b in bs if a < b]
    found = []
    for kind, listed in (("together", pairs), ("apart", pairs_apart)):
        if not listed:
            continue
        first, other = np.array(listed).T
        k = np.arange(len(listed) * d)
        cols_a = np.repeat(first, d) * d + np.tile(np.arange(d), len(listed))
        cols_b = np.repeat(other, d) * d + np.tile(np.arange(d), len(listed))
        sign = -1.0 if kind == "together" else 1.0
        values = np.concatenate([np.ones(len(k)), np.full(len(k), sign)])
        matrix = coo_matrix(
            (values, (np.concatenate([k, k]), np.concatenate([cols_a, cols_b]))),
            shape=(len(k), n),
        ).tocsr()
        if kind == "together":
            found.append(LinearConstraint(matrix, 0.0, 0.0))
        else:
            found.append(LinearConstraint(matrix, -np.inf, 1.0))
    return found


def fix_pins(task: PlacementTask, lower: np.ndarray, upper: np.ndarray) -> bool:
    """Fix the pinned tables' x to their devices in the bounds; True where the task has
    constraints (its devices then differ, so no symmetry may be broken by hand)."""
    bound, d = bind(task), task.num_devices
    if bound is None:
        return False
    for table in np.flatnonzero(bound.pin >= 0):
        upper[table * d : (table + 1) * d] = 0
        upper[table * d + bound.pin[table]] = lower[table * d + bound.pin[table]] = 1
    return True


def solve_milp(
    task: PlacementTask, costs: np.ndarray, time_limit_s: float = 10.0, rel_gap: float = 1e-4
) -> MilpResult:
    """Minimise the additive makespan of `costs` (one per table) within the memory caps.

    HiGHS stops as optimal once the relative gap to its bound is under `rel_gap` (its default).
    """
    start = time.perf_counter()
    costs = np.asarray(costs, dtype=np.float64)
    t, d = len(costs), task.num_devices
    scale = float(costs.max()) or 1.0  # solve in units of the costliest table
    scaled = costs / scale
    upper = np.ones(t * d + 1)
    upper[-1] = np.inf
    lower = np.zeros(t * d + 1)
    if not fix_pins(task, lower, upper):  # devices alike: table k on devices 0..k only
        for rank, table in enumerate(np.argsort(-scaled, kind="stable")):
            upper[table * d + rank + 1 : (table + 1) * d] = 0
    lower[-1] = lower_bounds(scaled, d).best
    objective = np.zeros(t * d + 1)
    objective[-1] = 1.0
    result = milp(
        objective,
        integrality=np.r_[np.ones(t * d), 0],
        bounds=Bounds(lower, upper),
        constraints=_constraints(task, scaled),
        options={"time_limit": time_limit_s, "mip_rel_gap": rel_gap},
    )
    seconds = time.perf_counter() - start
    status = STATUS.get(result.status, result.message)
    bound = getattr(result, "mip_dual_bound", None)
    bound = float("nan") if bound is None else float(bound) * scale
    if result.x is None:
        return MilpResult(None, float("nan"), bound, float("nan"), status, seconds)
    devices = result.x[: t * d].reshape(t, d).argmax(axis=1)
    placement = Placement(tuple(int(v) for v in devices), "milp")
    if not is_legal(task, placement):  # within HiGHS's feasibility tolerance (1e-7) of a cap
        return MilpResult(
            None, float("nan"), bound, float("nan"), "over a cap by tolerance", seconds
        )
    value = additive_makespan(costs, placement, d)
    gap = max(0.0, (value - bound) / value) if value > 0 else 0.0
    return MilpResult(placement, value, min(bound, value), gap, status, seconds)
