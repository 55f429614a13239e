"""The simulated backend's optimum, bounded: a MILP of its analytic cost model.

The simulated backend (costs/simulated.py) gives a placement the overall cost F + B: F the
slowest device's forward (every device waits for it before the all-to-all), B the largest
backward plus exchange, bwd_comp_d + 2 x transfer_d. A device's forward and backward are
non-negative weighings of its group features. All of them are sums over the device's tables
except three: the per-call overhead (paid once by a device that holds any table), lookups x
width (a product of two sums, at least the sum of the tables' own products) and the cache
overflow (never negative). A device's transfer is the larger of what it sends (its own width)
and what it receives (everyone else's), both linear in the placement.

The MILP keeps the sums, the per-call overhead and the transfer exactly, takes each table's own
lookups x width product, and drops the cache overflow. Its proven bound is therefore a lower
bound on the simulated cost of every legal placement of the task, and where no group overflows
the cache and the weight of lookups x width is zero (the shipped weights), its optimum is the
simulated optimum. Table-wise tasks only (no shards).
"""

from __future__ import annotations

import time

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from dreamshard.costs.comm import exchange_bytes, get_topology, ms_per_byte
from dreamshard.costs.simulated import SimulatedBackend, table_quantities
from dreamshard.placement.tasks import Placement, PlacementTask, is_legal
from dreamshard.planners.milp import STATUS, MilpResult
from dreamshard.tables.traces import table_batch_size

CALL, TABLES, LOOKUPS, VOLUME, TOUCHED, WIDTH, LOOKUPS_X_WIDTH = range(7)


def table_terms(
    task: PlacementTask, backend: SimulatedBackend, batch: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each table's additive forward and backward ms on a device (per-call overhead and cache
    overflow apart), [T] each: the backend's weights times the table's own group features."""
    count, lookups, volume, touched, width, dims = table_quantities(task.tables, batch).T
    own = np.zeros((len(task.tables), 7))
    own[:, TABLES], own[:, LOOKUPS], own[:, VOLUME] = count, lookups, volume
    own[:, TOUCHED], own[:, WIDTH], own[:, LOOKUPS_X_WIDTH] = touched, width, lookups * dims
    fwd, bwd = (
        own @ np.asarray(w[:7], dtype=np.float64) for w in (backend.model.fwd, backend.model.bwd)
    )
    return fwd, bwd


def solve_simulated_milp(
    task: PlacementTask,
    backend: SimulatedBackend | None = None,
    time_limit_s: float = 30.0,
    rel_gap: float = 1e-4,
) -> MilpResult:
    """Minimise the simulated cost without its cache overflow, within the memory caps.

    `objective` is the placement's exact simulated cost (overflow included); `bound` the
    solver's proven lower bound on every legal placement's simulated cost.
    """
    start = time.perf_counter()
    backend = backend or SimulatedBackend()
    t, d = len(task.tables), task.num_devices
    batch = table_batch_size(task.tables, backend.batch_size)
    fwd, bwd = table_terms(task, backend, batch)
    call_fwd, call_bwd = backend.model.fwd[CALL], backend.model.bwd[CALL]
    dims = np.array([tab.dim for tab in task.tables], dtype=np.float64)
    topology = get_topology(backend.topology)
    # ms each table adds to what its device sends, and to what the others receive
    send = exchange_bytes(dims, 0.0, d, batch)[0] * ms_per_byte(topology)
    recv = exchange_bytes(np.zeros(t), dims, d, batch)[1] * ms_per_byte(topology)
    latency = topology.latency_ms * (d - 1)
    if d == 1:  # no exchange
        send, recv = np.zeros(t), np.zeros(t)

    # variables: x (table-major, T*D) | y (D: device holds a table) | F | B
    n = t * d + d + 2
    f_col, b_col = t * d + d, t * d + d + 1
    x = np.arange(t * d)
    table_of, device_of = x // d, x % d
    y_of = t * d + device_of

    def rows(row_ids, cols, values, num_rows):
        return coo_matrix((values, (row_ids, cols)), shape=(num_rows, n)).tocsr()

    dev = np.arange(d)

    def device_load(per_table, call, bound_col, rhs):
        """sum_i per_table_i x_id + call y_d - (F or B) <= rhs, one row per device."""
        matrix = rows(
            np.r_[device_of, dev, dev],
            np.r_[x, t * d + dev, np.full(d, bound_col)],
            np.r_[per_table[table_of], np.full(d, call), -np.ones(d)],
            d,
        )
        return LinearConstraint(matrix, -np.inf, rhs)

    constraints = [
        LinearConstraint(rows(table_of, x, np.ones(t * d), t), 1, 1),  # one device each
        LinearConstraint(  # y_d is 1 where device d holds a table
            rows(np.r_[x, x], np.r_[x, y_of], np.r_[np.ones(t * d), -np.ones(t * d)], t * d),
            -np.inf,
            0,
        ),
        device_load(fwd, call_fwd, f_col, 0.0),  # forward <= F
        device_load(bwd + 2 * send, call_bwd, b_col, -2 * latency),  # backward + send <= B
        # backward + receiving everyone else's width <= B
        device_load(bwd - 2 * recv, call_bwd, b_col, -2 * latency - 2 * recv.sum()),
        LinearConstraint(
            rows(device_of, x, (task.table_bytes() / task.memory_cap_bytes)[table_of], d),
            -np.inf,
            1,
        ),
    ]
    upper = np.ones(n)
    upper[[f_col, b_col]] = np.inf
    for rank, table in enumerate(np.argsort(-(fwd + bwd), kind="stable")):
        upper[table * d + rank + 1 : (table + 1) * d] = 0  # identical devices: 0..rank only
    objective = np.zeros(n)
    objective[[f_col, b_col]] = 1.0
    result = milp(
        objective,
        integrality=np.r_[np.ones(t * d + d), 0, 0],
        bounds=Bounds(np.zeros(n), upper),
        constraints=constraints,
        options={"time_limit": time_limit_s, "mip_rel_gap": rel_gap},
    )
    seconds = time.perf_counter() - start
    status = STATUS.get(result.status, result.message)
    bound = getattr(result, "mip_dual_bound", None)
    bound = float("nan") if bound is None else float(bound)
    if result.x is None:
        return MilpResult(None, float("nan"), bound, float("nan"), status, seconds)
    devices = result.x[: t * d].reshape(t, d).argmax(axis=1)
    placement = Placement(tuple(int(v) for v in devices), "milp_simulated")
    if not is_legal(task, placement):  # within HiGHS's feasibility tolerance of a cap
        return MilpResult(
            None, float("nan"), bound, float("nan"), "over a cap by tolerance", seconds
        )
    value = float(backend.overall_many(task, [placement])[0])
    bound = min(bound, value)
    return MilpResult(placement, value, bound, max(0.0, (value - bound) / value), status, seconds)
