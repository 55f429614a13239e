"""Local search that re-scores only the devices a move changes: seconds at any size.

Both cost models the planners search on are *device-additive*: a device's compute is a function
of the sum of per-table vectors (the cost network's table encodings; the analytic model's
lookups, volume, touched rows and widths), and the all-to-all depends only on the devices'
widths. A placement's overall cost is then

    overall = max_d fwd(S_d) + max_d (2 x comm_d(widths) + bwd(S_d))

so a move or a swap changes two device sums, and its cost needs two device evaluations, not D.
On a topology across hosts a device's exchange also depends on its host's summed width: a move
between hosts re-rates the exchange of every device on the two hosts (2 L, not D).
Only moves that touch a *critical* device (one holding the forward or the backward maximum)
can lower the overall cost, since every other move leaves both maxima where they are or
raises them; the search lists just those: every table of a critical device moved to any
device with room and swapped with every table elsewhere (both devices within the cap), and
every other table moved onto a critical device (a learned device cost need not grow with
each table it gets, so adding one can lower it), none that breaks the task's constraints. It
takes the best neighbour each round (best improvement) until none is better, `max_rounds`
rounds pass, or `seconds` run out.

`DeviceModel` is what a cost model provides; `costnet_model` and `analytic_model` build one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from dreamshard.costs.comm import (
    Topology,
    allreduce_ms,
    blended_transfer_ms,
    device_transfer_ms,
    get_topology,
)
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.learn.costnet import CostNet
from dreamshard.placement.constraints import bind
from dreamshard.placement.tasks import Placement, PlacementTask, device_memory
from dreamshard.tables.shards import pooled_width
from dreamshard.tables.traces import table_batch_size


@dataclass
class DeviceModel:
    """A device-additive cost model of one task.

    `vectors` [T, F]: each table's additive vector. `terms(S)` maps device sums [N, F] to
    (fwd [N], bwd [N], own_comm [N] or None); own_comm is a per-device communication that
    depends on the device's sum alone (a learned head), else `transfer(widths, host)` [N] gives
    a device's modeled all-to-all from its own width and its host's summed width (the total
    width never changes; on one host a device's move leaves the others' times alone). `hosts`
    [D] is each device's host when the topology spans hosts, else None. An empty device (zero
    sum) costs nothing itself; with a modeled all-to-all it still exchanges.
    """

    vectors: np.ndarray
    terms: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray | None]]
    transfer: Callable[[np.ndarray, np.ndarray], np.ndarray] | None
    dims: np.ndarray  # [T] each table's width
    hosts: np.ndarray | None = None

    def host_of(self, d: int) -> np.ndarray:
        """[d] each device's host (all on host 0 when the topology is one host)."""
        return self.hosts if self.hosts is not None else np.zeros(d, dtype=np.int64)

    def device_terms(
        self, sums: np.ndarray, busy: np.ndarray, widths: np.ndarray, host: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(fwd, rest, base) of devices with sums [N, F], table counts > 0 `busy`, widths [N]
        and host widths [N]: fwd is -inf where idle; rest is 2 x comm + bwd (an idle device
        only exchanges, or with a learned comm head is -inf); base is rest less the modeled
        exchange."""
        fwd, bwd, own = self.terms(sums)
        fwd = np.where(busy, fwd, -np.inf)
        if own is None:
            base = np.where(busy, bwd, 0.0)
            return fwd, base + 2 * self.transfer(widths, host), base
        rest = np.where(busy, 2 * own + bwd, -np.inf)
        return fwd, rest, rest

    def cost(self, task: PlacementTask, devices: np.ndarray) -> float:
        """The model's overall cost of one placement."""
        state = _State.start(self, task, np.asarray(devices, dtype=np.int64))
        return float(state.fwd.max() + state.rest.max())


@dataclass
class _State:
    devices: np.ndarray  # [T]
    sums: np.ndarray  # [D, F]
    count: np.ndarray  # [D] tables per device
    widths: np.ndarray  # [D]
    used: np.ndarray  # [D] bytes
    fwd: np.ndarray  # [D]
    rest: np.ndarray  # [D]
    base: np.ndarray  # [D] rest less the modeled exchange
    host: np.ndarray  # [H] each host's summed width (one entry on one host)

    @classmethod
    def start(cls, model: DeviceModel, task: PlacementTask, devices: np.ndarray) -> _State:
        d = task.num_devices
        sums = np.zeros((d, model.vectors.shape[1]), dtype=model.vectors.dtype)
        np.add.at(sums, devices, model.vectors)
        count = np.bincount(devices, minlength=d)
        widths = np.bincount(devices, model.dims, d).astype(np.float64)
        used = device_memory(task, Placement(tuple(int(v) for v in devices)))
        hosts = model.host_of(d)
        host = np.bincount(hosts, widths).astype(np.float64)
        fwd, rest, base = model.device_terms(sums, count > 0, widths, host[hosts])
        used = used.astype(np.int64)
        return cls(devices.copy(), sums, count, widths, used, fwd, rest, base, host)


# Neighbours scored at once: each takes two devices' sums and the model's terms of them, so a
# search at 10,000 tables on 1,024 devices (178,000 neighbours a step) peaked 420 MB above
# the rest of the plan (1,090 MB) when it scored them all together; in chunks of this many the
# scores are the same.
SCORE_CHUNK = 16_384


def device_search(
    task: PlacementTask,
    start: Placement,
    model: DeviceModel,
    seconds: float | None = None,
    max_rounds: int | None = None,
    max_scored: int | None = None,
    first_improving: int | None = None,
) -> tuple[Placement, float, int]:
    """(best placement found, its model cost, improving steps) from `start`.

    Stops at a local optimum, after `max_rounds` steps, once `max_scored` neighbours have
    been scored (a budget of work, so the answer does not depend on the machine's speed), or
    when `seconds` run out (the only budget that does). `first_improving`: score the
    neighbours in chunks of this many (`_likely_first`: moves, then swaps with the least loaded
    devices first) and take the best of the first chunk that holds a better one, not the best
    of all: where a step scores thousands of neighbours (856 tables on 64 devices, 12 ms a
    step), more steps fit in the time.
    """
    began = time.perf_counter()
    deadline = began + seconds if seconds is not None else float("inf")
    sizes = task.table_bytes().astype(np.int64)
    cap, d = task.memory_cap_bytes, task.num_devices
    state = _State.start(model, task, np.asarray(start.devices, dtype=np.int64))
    cost = float(state.fwd.max() + state.rest.max())
    bound = bind(task)
    steps = scored = 0
    while (max_rounds is None or steps < max_rounds) and time.perf_counter() < deadline:
        if max_scored is not None and scored >= max_scored:
            break
        rows = _critical_neighbours(state, sizes, cap, d, bound)
        if not len(rows):
            break
        chunk = SCORE_CHUNK
        if first_improving:
            rows, chunk = _likely_first(state, rows), first_improving
        found = None
        for i in range(0, len(rows), chunk):
            costs = _score(state, model, rows[i : i + chunk])
            scored += len(costs)
            best = int(costs.argmin())
            if costs[best] < cost - 1e-9 * abs(cost) and (found is None or costs[best] < found[1]):
                found = (rows[i + best], float(costs[best]))
            if found is not None and first_improving:
                break
        if found is None:
            break
        _apply(state, model, found[0], sizes)
        cost = found[1]
        steps += 1
    return Placement(tuple(int(v) for v in state.devices), start.method), cost, steps


def _critical_neighbours(state: _State, sizes, cap, d, bound=None) -> np.ndarray:
    """[N, 4] (table a, a's new device, table b or -1, b's new device) touching a device
    that holds a maximum, and holding the constraints `bound` (`BoundConstraints.keep`)."""
    critical = np.unique([int(np.argmax(state.fwd)), int(np.argmax(state.rest))])
    tables = np.flatnonzero(np.isin(state.devices, critical))
    source = state.devices[tables]
    # moves: a critical table to any other device with room, and any other table onto a
    # critical device (a learned cost need not grow with every table added)
    a, target = np.repeat(tables, d), np.tile(np.arange(d), len(tables))
    outside = np.flatnonzero(~np.isin(state.devices, critical))
    a = np.concatenate([a, np.repeat(outside, len(critical))])
    target = np.concatenate([target, np.tile(critical, len(outside))])
    keep = (target != state.devices[a]) & (state.used[target] + sizes[a] <= cap)
    none = -np.ones(int(keep.sum()), dtype=np.int64)
    moves = np.stack([a[keep], target[keep], none, none])
    # swaps: a critical table with any table on another device
    others = np.arange(len(state.devices))
    a, b = np.repeat(tables, len(others)), np.tile(others, len(tables))
    da, db = np.repeat(source, len(others)), state.devices[b]
    keep = (da != db) & ~(np.isin(b, tables) & (b < a))  # each critical pair once
    keep &= state.used[da] - sizes[a] + sizes[b] <= cap
    keep &= state.used[db] - sizes[b] + sizes[a] <= cap
    swaps = np.stack([a[keep], db[keep], b[keep], da[keep]])
    rows = np.concatenate([moves, swaps], axis=1).T
    return rows if bound is None else rows[bound.keep(state.devices, rows)]


def _likely_first(state: _State, rows: np.ndarray) -> np.ndarray:
    """`rows` (`_critical_neighbours`) reordered: the moves, then the swaps by their other
    device's load (forward and rest, each over its maximum), the least loaded first."""
    load = state.fwd / max(state.fwd.max(), 1e-30) + state.rest / max(state.rest.max(), 1e-30)
    order = np.where(rows[:, 2] < 0, -np.inf, load[rows[:, 1]])
    return rows[np.argsort(order, kind="stable")]


def _max_without(values: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """[N] the max of `values` [D] over the devices other than i[n] and j[n] (-inf if none)."""
    padded = np.concatenate([values, np.full(3, -np.inf)])
    top = np.argsort(-padded, kind="stable")[:3]
    first, second, third = (np.full(len(i), k) for k in top)
    pick = np.where(
        (first != i) & (first != j), first, np.where((second != i) & (second != j), second, third)
    )
    return padded[pick]


def _score(state: _State, model: DeviceModel, rows: np.ndarray) -> np.ndarray:
    """Overall costs of the neighbours `rows`: two changed devices each, the rest unchanged."""
    a, to_a, b, _ = rows.T
    swap = b >= 0
    b = np.maximum(b, 0)
    from_a = state.devices[a]
    delta = model.vectors[a] - np.where(swap[:, None], model.vectors[b], 0)
    width = model.dims[a] - np.where(swap, model.dims[b], 0.0)
    count = 1 - swap.astype(np.int64)
    # the device losing a (gaining b on a swap), then the device gaining a (losing b)
    sums = np.concatenate([state.sums[from_a] - delta, state.sums[to_a] + delta])
    busy = np.concatenate([state.count[from_a] - count, state.count[to_a] + count]) > 0
    widths = np.concatenate([state.widths[from_a] - width, state.widths[to_a] + width])
    n = len(rows)
    if model.hosts is None:
        host = np.full(2 * n, state.host[0])
    else:  # a move between hosts takes its width from one host to the other
        hf, ht = model.hosts[from_a], model.hosts[to_a]
        moved = np.where(hf == ht, 0.0, width)
        host = np.concatenate([state.host[hf] - moved, state.host[ht] + moved])
    fwd, rest, _ = model.device_terms(sums, busy, widths, host)
    forward = np.maximum(_max_without(state.fwd, from_a, to_a), np.maximum(fwd[:n], fwd[n:]))
    changed = np.maximum(rest[:n], rest[n:])
    if model.hosts is None:
        return forward + np.maximum(_max_without(state.rest, from_a, to_a), changed)
    return forward + np.maximum(
        _hosts_rest(state, model, from_a, to_a, host[:n], host[n:]), changed
    )


def _hosts_rest(state: _State, model: DeviceModel, from_a, to_a, host_from, host_to) -> np.ndarray:
    """[N] the max rest over every device but the two a neighbour changes, on a topology across
    hosts: a move inside a host leaves the others alone; one between hosts re-rates the
    exchange of the two hosts' other devices, and leaves the other hosts alone."""
    hosts = model.hosts
    hf, ht = hosts[from_a], hosts[to_a]
    inside = _max_without(state.rest, from_a, to_a)
    per_host = np.full(len(state.host), -np.inf)
    np.maximum.at(per_host, hosts, state.rest)
    elsewhere = _max_without(per_host, hf, ht)
    members, widths, base = _host_members(hosts), state.widths, state.base
    peers = []
    for host, width, device in ((hf, host_from, from_a), (ht, host_to, to_a)):
        slots = members[host]  # [N, L]
        rest = base[slots] + 2 * model.transfer(widths[slots], width[:, None])
        peers.append(np.where(slots == device[:, None], -np.inf, rest).max(axis=1))
    between = np.maximum(elsewhere, np.maximum(*peers))
    return np.where(hf == ht, inside, between)


def _host_members(hosts: np.ndarray) -> np.ndarray:
    """[H, L] the devices of each host, in order (device i on host i // L)."""
    return np.arange(len(hosts)).reshape(int(hosts[-1]) + 1, -1)


def _apply(state: _State, model: DeviceModel, row: np.ndarray, sizes: np.ndarray) -> None:
    a, to_a, b, to_b = (int(v) for v in row)
    moved = [(a, to_a)] + ([(b, to_b)] if b >= 0 else [])
    changed = [int(state.devices[a]), to_a]
    for table, target in moved:
        source = state.devices[table]
        state.sums[source] -= model.vectors[table]
        state.sums[target] += model.vectors[table]
        state.count[source] -= 1
        state.count[target] += 1
        state.widths[source] -= model.dims[table]
        state.widths[target] += model.dims[table]
        state.used[source] -= sizes[table]
        state.used[target] += sizes[table]
        state.devices[table] = target
    hosts = model.host_of(len(state.fwd))
    state.host = np.bincount(hosts, state.widths, len(state.host)).astype(np.float64)
    fwd, rest, base = model.device_terms(
        state.sums[changed],
        state.count[changed] > 0,
        state.widths[changed],
        state.host[hosts[changed]],
    )
    state.fwd[changed], state.rest[changed], state.base[changed] = fwd, rest, base
    if model.transfer is not None and model.hosts is not None:  # the two hosts' exchanges
        peers = np.flatnonzero(np.isin(hosts, hosts[changed]))
        exchange = model.transfer(state.widths[peers], state.host[hosts[peers]])
        state.rest[peers] = state.base[peers] + 2 * exchange


def costnet_model(costnet: CostNet, task: PlacementTask) -> DeviceModel:
    """The cost network as a device-additive model (scaled costs; NumPy copies of its heads)."""
    with torch.no_grad():
        encoded = costnet.encode_tables(task.tables)
    heads = costnet.numpy_heads()

    def terms(sums):
        fwd, comm, bwd = np.moveaxis(heads(sums), -1, 0)
        return fwd, bwd, (None if costnet.comm is not None else comm)

    dims = np.array([pooled_width(t) for t in task.tables], dtype=np.float64)
    transfer = None
    if costnet.comm is not None:
        scale, total, d = float(costnet.scale), dims.sum(), task.num_devices
        batch = table_batch_size(task.tables, costnet.comm["batch"])
        topology = get_topology(costnet.comm["topology"])
        half = allreduce_ms(task.tables, d, topology) / 2  # counted twice, as the network does

        def transfer(w, h):
            return (device_transfer_ms(w, total, d, batch, topology, h) + half) / scale

        return DeviceModel(encoded.numpy(), terms, transfer, dims, _spread(topology, d))
    return DeviceModel(encoded.numpy(), terms, transfer, dims)


def analytic_model(task: PlacementTask, backend: SimulatedBackend | None = None) -> DeviceModel:
    """The simulated backend's analytic model as a device-additive model (ms)."""
    backend = backend or SimulatedBackend()
    batch = table_batch_size(task.tables, backend.batch_size)
    kernel, precision = backend.kernel, task.precision
    vectors = kernel.quantities(task.tables, batch, precision)

    def terms(sums):
        shape = sums.shape[:-1]
        fwd, bwd = kernel.predict_sums(sums.reshape(-1, sums.shape[-1]), precision)
        return fwd.reshape(shape), bwd.reshape(shape), None

    topology = get_topology(backend.topology)
    dims = np.array([pooled_width(t) for t in task.tables], dtype=np.float64)
    total, d = dims.sum(), task.num_devices
    half = allreduce_ms(task.tables, d, topology) / 2  # rest = bwd + 2 x transfer

    def transfer(w, h):
        return device_transfer_ms(w, total, d, batch, topology, h) + half

    return DeviceModel(vectors, terms, transfer, dims, _spread(topology, d))


def blended_model(
    task: PlacementTask, backends: list[SimulatedBackend], weights: list[float]
) -> DeviceModel:
    """The weighted sum of several backends' analytic models of `task` (one hardware file at
    several points: its centre and corners): each device's forward, backward and exchange are
    the weighted sums of theirs, so a search on it balances the devices under all of them at
    once. The backends must share the task's quantities and hosts (points of one file do).
    The exchange's bytes are worked out once for all of them (`comm.blended_transfer_ms`): the
    search's most frequent call, a third of the time it took per view."""
    models = [analytic_model(task, backend) for backend in backends]
    topologies = [get_topology(backend.topology) for backend in backends]
    (batch,) = {table_batch_size(task.tables, backend.batch_size) for backend in backends}
    d, total = task.num_devices, models[0].dims.sum()
    half = sum(w * allreduce_ms(task.tables, d, t) / 2 for w, t in zip(weights, topologies))

    def terms(sums):
        parts = [model.terms(sums) for model in models]
        fwd = sum(w * part[0] for w, part in zip(weights, parts))
        bwd = sum(w * part[1] for w, part in zip(weights, parts))
        return fwd, bwd, None

    def transfer(widths, host):
        return blended_transfer_ms(widths, total, d, batch, topologies, weights, host) + half

    first = models[0]
    return DeviceModel(first.vectors, terms, transfer, first.dims, first.hosts)


def _spread(topology: Topology, d: int) -> np.ndarray | None:
    """Each of `d` devices' host when the topology spans hosts there, else None."""
    return topology.hosts_of(d) if topology.host_size(d) < d else None


def move_costs(task: PlacementTask, devices, model: DeviceModel) -> np.ndarray:
    """[T, D] the model's overall cost of the placement `devices` with table t moved to device
    d alone (the placement's own cost where d is t's device; inf where d lacks the room): what
    `dreamshard explain` shows of each table's next-best devices."""
    devices = np.asarray(devices, dtype=np.int64)
    state = _State.start(model, task, devices)
    t, d = len(devices), task.num_devices
    table, target = np.divmod(np.arange(t * d), d)
    sizes = task.table_bytes().astype(np.int64)
    moving = target != devices[table]
    costs = np.full(t * d, float(state.fwd.max() + state.rest.max()))
    none = -np.ones(int(moving.sum()), dtype=np.int64)
    rows = np.stack([table[moving], target[moving], none, none], axis=1)
    costs[moving] = _score(state, model, rows)
    costs[moving & (state.used[target] + sizes[table] > task.memory_cap_bytes)] = np.inf
    return costs.reshape(t, d)
