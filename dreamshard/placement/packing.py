"""Memory-legal assignment: greedy by a planner's preference, backtracking only when stuck.

Every planner here is "visit tables in some order, try devices in some preference order".
The first path of the depth-first search is exactly the plain greedy placement; the search only
backtracks when a table no longer fits anywhere, so planners never return an illegal placement
and only report infeasibility when the search proves it (or gives up at its node limit).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence

import numpy as np

from dreamshard.errors import InfeasibleError
from dreamshard.placement.constraints import bind
from dreamshard.placement.tasks import PlacementTask
from dreamshard.report import format_bytes

# Preference: given the table index, the key load and the bytes used per device (for the tables
# placed so far), the devices in the order to try.
DevicePreference = Callable[[int, np.ndarray, np.ndarray], Sequence[int]]

NODE_LIMIT = 200_000


def check_capacity(task: PlacementTask) -> None:
    """Raise InfeasibleError when the task cannot fit whatever the placement."""
    sizes = task.table_bytes()
    cap = task.memory_cap_bytes
    largest = int(sizes.argmax())
    if sizes[largest] > cap:
        raise InfeasibleError(
            f"table {task.tables[largest].name} needs {format_bytes(sizes[largest])}, more than "
            f"one device's {format_bytes(cap)}; raise the memory per device, or let the "
            "planner split it (--split auto)"
        )
    if sizes.sum() > cap * task.num_devices:
        raise InfeasibleError(
            f"the tables need {format_bytes(sizes.sum())} in total, more than "
            f"{task.num_devices} devices x {format_bytes(cap)}; add devices or memory"
        )


class Candidates:
    """The devices with room for one depth's table, most preferred first, handed out lazily.

    Two devices with equal bytes used lead to the same sub-problem for memory, so only the
    more preferred one is tried. The search asks for the next one only after undoing every
    deeper try, so `used` is then what it was when the list was made; the greedy path, which
    takes the first device at every depth, never pays for the rest.
    """

    def __init__(self, devices: list[int], alike: bool = True):
        self.devices, self.position, self.tried = devices, 0, set()
        self.alike = alike  # False where devices differ beyond their bytes (constraints)

    def next(self, used: np.ndarray) -> int | None:
        while self.position < len(self.devices):
            device = self.devices[self.position]
            self.position += 1
            key = int(used[device]) if self.alike else device
            if key not in self.tried:
                self.tried.add(key)
                return device
        return None


def search_assignment(
    task: PlacementTask,
    order: Sequence[int],
    prefer: DevicePreference,
    keys: np.ndarray | None = None,
    node_limit: int = NODE_LIMIT,
) -> tuple[list[int] | None, bool]:
    """Depth-first assignment of tables (in `order`) to devices (in `prefer` order).

    `keys[i]` is added to a device's load when table i goes there (what a greedy balances).

    Returns (devices per table or None, exhausted). `exhausted` is True when the search ran
    to the end, so None then proves no legal placement exists.
    """
    sizes = task.table_bytes()
    cap = task.memory_cap_bytes
    bound = bind(task)
    order = list(order) if bound is None else bound.order(list(order))
    placed = np.full((1, len(sizes)), -1, dtype=np.int64)  # for the constraints' mask
    # suffix[k]: bytes still to place after the first k tables of the order
    suffix = np.concatenate([np.cumsum(sizes[order][::-1])[::-1], [0]])
    keys = np.zeros(len(sizes)) if keys is None else np.asarray(keys, dtype=np.float64)
    used = np.zeros(task.num_devices, dtype=np.int64)
    load = np.zeros(task.num_devices)
    assignment = [-1] * len(task.tables)
    stack: list[Candidates] = []  # devices still to try per depth
    nodes = 0

    def candidates(depth: int) -> Candidates:
        table = order[depth]
        preferred = np.asarray(prefer(table, load, used), dtype=np.int64)
        preferred = preferred[used[preferred] + sizes[table] <= cap]
        if bound is None:
            return Candidates(preferred.tolist())
        allowed = bound.allowed(table, placed, used[None], sizes, cap)[0]
        return Candidates(preferred[allowed[preferred]].tolist(), alike=False)

    if suffix[0] > cap * task.num_devices:
        return None, True
    stack.append(candidates(0))
    while stack:
        depth = len(stack) - 1
        table = order[depth]
        if assignment[table] >= 0:  # undo the previous try at this depth
            used[assignment[table]] -= sizes[table]
            load[assignment[table]] -= keys[table]
            assignment[table] = placed[0, table] = -1
        device = stack[-1].next(used)
        if device is None:
            stack.pop()
            continue
        nodes += 1
        if nodes > node_limit:
            return None, False
        assignment[table] = placed[0, table] = device
        used[device] += sizes[table]
        load[device] += keys[table]
        if depth + 1 == len(order):
            return assignment, True
        if suffix[depth + 1] <= cap * task.num_devices - used.sum():
            stack.append(candidates(depth + 1))
    return None, True


def least_load_dive(
    task: PlacementTask, order: Sequence[int], keys: np.ndarray
) -> list[int] | None:
    """The first path of `search_assignment` when the preference is smallest key load first
    (ties by index): each table, in `order`, to the least-loaded device with room. None where
    a table finds no room and the search would have to backtrack. A few array operations per
    table instead of the search's sorted candidate lists: the same answer, several times sooner.
    `keys` [T, K] (several loads, each in its own units): each table to the device with room
    whose largest load would be least with it (`planners.for_hardware.balanced_place`).
    """
    if bind(task) is not None:  # constraints: the search, which follows them
        return None
    sizes = task.table_bytes()
    cap = task.memory_cap_bytes
    used = np.zeros(task.num_devices, dtype=np.int64)
    load = np.zeros((task.num_devices, *np.shape(keys)[1:]))
    devices = [-1] * len(sizes)
    for table in order:
        room = used + sizes[table] <= cap
        if not room.any():
            return None
        score = load if load.ndim == 1 else (load + keys[table]).max(axis=1)
        device = int(np.where(room, score, np.inf).argmin())
        used[device] += sizes[table]
        load[device] += keys[table]
        devices[table] = device
    return devices


def largest_first(task: PlacementTask) -> list[int]:
    """Table indices by bytes, largest first (ties by index): the order that packs best."""
    return np.argsort(-task.table_bytes(), kind="stable").tolist()


def least_used_first(_table: int, _load: np.ndarray, used: np.ndarray) -> Sequence[int]:
    return np.argsort(used, kind="stable")


def assign_within_memory(
    task: PlacementTask,
    order: Sequence[int],
    prefer: DevicePreference,
    method: str,
    keys: np.ndarray | None = None,
) -> list[int]:
    """A legal assignment that follows the planner's preferences, or InfeasibleError.

    Three tries, each a search that backtracks only when stuck: (1) the planner's own order,
    briefly; (2) its device preference with tables taken largest first, which packs far more
    easily; (3) pure packing (largest first, least-used device first), run long enough to
    settle feasibility. The greedy result is (1) whenever memory does not get in its way.
    """
    check_capacity(task)
    brief = 20 * len(task.tables)
    packing_order = largest_first(task)
    tries = [(order, prefer, keys, brief), (packing_order, prefer, keys, brief)]
    tries.append((packing_order, least_used_first, None, NODE_LIMIT))
    for try_order, try_prefer, try_keys, limit in tries:
        devices, exhausted = search_assignment(task, try_order, try_prefer, try_keys, limit)
        if devices is not None:
            return devices
    sizes = task.table_bytes()
    fill = sizes.sum() / (task.memory_cap_bytes * task.num_devices)
    if exhausted:
        raise InfeasibleError(
            f"no legal placement exists: the tables ({fill:.0%} of total memory) cannot be split "
            f"over {task.num_devices} devices of {format_bytes(task.memory_cap_bytes)}; "
            "add devices or memory"
        )
    raise InfeasibleError(
        f"{method}: no legal placement found within the search limit (tables fill {fill:.0%} of "
        "total memory); add devices or memory"
    )


def best_fit_leftover(sizes_desc: Sequence[int], free: np.ndarray) -> np.ndarray | None:
    """Free memory per device after best-fit (largest first, tightest device that fits, the
    first of equally tight ones) places every size, or None when it cannot. The devices stay
    sorted by free memory, so each size costs a binary search, not a scan of every device: the
    completion guard calls this thousands of times a step when memory binds."""
    order = sorted((int(f), d) for d, f in enumerate(free))  # (free, device), tightest first
    keys = [f for f, _ in order]
    for size in sizes_desc:
        i = bisect_left(keys, size)
        if i == len(keys):
            return None
        left, d = order.pop(i)
        keys.pop(i)
        j = bisect_left(order, (left - size, d))
        order.insert(j, (left - size, d))
        keys.insert(j, left - size)
    out = np.empty_like(free)
    for left, d in order:
        out[d] = left
    return out


class CompletionGuard:
    """Which devices can take the next table without leaving the rest unable to fit.

    Tables are placed in a fixed order. With slack = D * cap - total bytes, any table no larger
    than slack / (D - 1) can always be placed last by any-fit (whatever is left free is at
    least slack), so only the "big" tables still to come need checking: a device is allowed
    when best-fit can still pack them into the free memory left after this table goes there.
    A device whose leftover after packing the big tables without this one still holds this
    one is allowed at once. Best-fit may miss a packing that exists, so a row where it finds
    none falls back to every device with room.
    """

    def __init__(self, task: PlacementTask, order: Sequence[int]):
        self.bound = bind(task)
        if self.bound is not None:
            order = self.bound.order(list(order))
        self.order = list(order)  # the order to place in: `order`, the constraints' first
        self.cap = task.memory_cap_bytes
        self.table_sizes = task.table_bytes()
        self.sizes = self.table_sizes[list(order)]
        d = task.num_devices
        slack = d * self.cap - int(self.sizes.sum())
        big_limit = slack / (d - 1) if d > 1 else np.inf
        # (size, position in the order) of the big tables, largest first
        self.big = sorted(
            ((int(s), k) for k, s in enumerate(self.sizes) if s > big_limit), reverse=True
        )
        self.last_big = max((k for _, k in self.big), default=-1)

    def mask(self, step: int, used: np.ndarray, devices: np.ndarray | None = None) -> np.ndarray:
        """Allowed devices [episodes, devices] for the table at `step` of `self.order`, given
        bytes `used` and, where the task has constraints, `devices` [episodes, tables] (each
        placed table's device, -1 where not yet)."""
        allowed = self._memory_mask(step, used)
        if self.bound is not None:
            table = self.order[step]
            allowed &= self.bound.allowed(table, devices, used, self.table_sizes, self.cap)
        return allowed

    def _memory_mask(self, step: int, used: np.ndarray) -> np.ndarray:
        size = self.sizes[step]
        room = used + size <= self.cap
        if step >= self.last_big:  # no big table to come: room is all it takes
            return room
        big = [s for s, k in self.big if k > step]
        allowed = room.copy()
        for e in range(len(used)):
            free = self.cap - used[e]
            leftover = best_fit_leftover(big, free)
            if leftover is None:
                continue  # best-fit finds no packing even now: fall back to room
            packs: dict[int, bool] = {}  # devices with equal free bytes answer alike
            for d in np.flatnonzero(room[e] & (leftover < size)):
                if int(free[d]) not in packs:
                    after = free.copy()
                    after[d] -= size
                    packs[int(free[d])] = best_fit_leftover(big, after) is not None
                allowed[e, d] = packs[int(free[d])]
            if not allowed[e].any():
                allowed[e] = room[e]
        return allowed
