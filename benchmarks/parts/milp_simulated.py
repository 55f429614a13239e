"""The simulated backend's optimum, bounded: a MILP of its analytic cost model.

The simulated backend (costs/simulated.py) gives a placement the overall cost F + B: F the
slowest device's forward (every device waits for it before the all-to-all), B the largest
backward plus exchange, bwd_comp_d + 2 x transfer_d. A device's forward and backward are
non-negative weighings of its group features. All of them are sums over the device's tables
except three: the per-call overhead (paid once by a device that holds any table), lookups x
width (a product of two sums, at least the sum of the tables' own products) and the cache
overflow (never negative). A device's transfer is the larger of what it sends (its own width)
and what it receives (everyone else's), both linear in the placement. Across hosts it is the
larger of four, each linear: sent and received inside its host, sent and received across hosts
(what it receives from its host is its host's width less its own).

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

from benchmarks.parts.milp import STATUS, MilpResult, constraint_rows, fix_pins
from dreamshard.costs.comm import POOLED_BYTES, get_topology, ms_per_byte
from dreamshard.costs.quantities import table_quantities
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.placement.tasks import Placement, PlacementTask, is_legal
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
    size = topology.host_size(d)
    hosts = topology.hosts_of(d)
    per_row = batch / d * POOLED_BYTES  # bytes per unit of width to one peer
    net_ms = 1000.0 / (topology.network_gbps * 1e9) if size < d else 0.0
    # ms per unit of width: sent to each peer group, received from the host and from the rest
    send_in, recv_in = per_row * (size - 1) * ms_per_byte(topology), per_row * ms_per_byte(topology)
    send_out, recv_out = per_row * (d - size) * net_ms, per_row * net_ms
    latency = topology.latency_ms * (size - 1) + topology.network_latency_ms * (d - size)
    if d == 1:  # no exchange
        send_in = recv_in = 0.0

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

    def exchange(coefficient, own, host_share, rhs):
        """Backward plus twice one part of the exchange <= B, one row per device d:
        bwd_i x_id + call y_d + 2 `coefficient` (`own` x_id + `host_share` x_ie, e on d's
        host) dim_i - B <= rhs."""
        if host_share:  # every table on every device of d's host
            row_ids, cols = np.nonzero(hosts[device_of][None, :] == hosts[:, None])
        else:
            row_ids, cols = device_of, x
        mine = device_of[cols] == row_ids
        values = 2 * coefficient * (host_share + own * mine) * dims[table_of[cols]]
        values = values + mine * bwd[table_of[cols]]
        matrix = rows(
            np.r_[row_ids, dev, dev],
            np.r_[cols, t * d + dev, np.full(d, b_col)],
            np.r_[values, np.full(d, call_bwd), -np.ones(d)],
            d,
        )
        return LinearConstraint(matrix, -np.inf, rhs)

    total = dims.sum()
    exchanges = [exchange(send_in, 1.0, 0.0, -2 * latency)]  # sent inside the host
    if size >= d:  # received: everyone else's width
        exchanges.append(exchange(recv_in, -1.0, 0.0, -2 * latency - 2 * recv_in * total))
    else:  # received from the host (its width less own), sent and received across hosts
        exchanges += [
            exchange(recv_in, -1.0, 1.0, -2 * latency),
            exchange(send_out, 1.0, 0.0, -2 * latency),
            exchange(recv_out, 0.0, -1.0, -2 * latency - 2 * recv_out * total),
        ]
    constraints = [
        LinearConstraint(rows(table_of, x, np.ones(t * d), t), 1, 1),  # one device each
        LinearConstraint(  # y_d is 1 where device d holds a table
            rows(np.r_[x, x], np.r_[x, y_of], np.r_[np.ones(t * d), -np.ones(t * d)], t * d),
            -np.inf,
            0,
        ),
        device_load(fwd, call_fwd, f_col, 0.0),  # forward <= F
        *exchanges,  # backward + each part of the exchange <= B
        LinearConstraint(
            rows(device_of, x, (task.table_bytes() / task.memory_cap_bytes)[table_of], d),
            -np.inf,
            1,
        ),
    ]
    constraints += constraint_rows(task, n)  # the task's together and apart constraints
    upper, lower = np.ones(n), np.zeros(n)
    upper[[f_col, b_col]] = np.inf
    order = np.argsort(-(fwd + bwd), kind="stable")
    if fix_pins(task, lower, upper):
        pass  # pins and groups tell the devices apart: no symmetry to break
    elif size >= d:
        for rank, table in enumerate(order):
            upper[table * d + rank + 1 : (table + 1) * d] = 0  # identical devices: 0..rank only
    else:  # hosts alike, devices alike within a host: the first table on device 0
        upper[order[0] * d + 1 : (order[0] + 1) * d] = 0
    objective = np.zeros(n)
    objective[[f_col, b_col]] = 1.0
    result = milp(
        objective,
        integrality=np.r_[np.ones(t * d + d), 0, 0],
        bounds=Bounds(lower, upper),
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
