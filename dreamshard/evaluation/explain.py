"""`dreamshard explain`: why a plan puts each table where it does, as a cost model sees it.

It predicts; it does not re-plan. The judge is the calibrated analytic model (the simulated
backend) unless a model is given, whose cost network then predicts. For the plan (its shards,
where it splits tables):

- each device: its predicted forward, all-to-all and backward, and its bottleneck (its largest
  term), marked critical where it holds the step's forward or backward maximum (the overall is
  the slowest forward plus the slowest all-to-all and backward: `learn.costnet`);
- each table: its key (the plan's heuristic key for a heuristic's plan; else the judge's cost
  of the table alone on a device), the device's load of that key before the table arrived
  (tables taken in descending key, the order the heuristics and the policy place in), the
  overall cost where it is, and the two next-best devices' overall costs with it moved there
  alone (`device_search.move_costs`), among the devices its constraints and a fixed shard
  layout allow;
- with a model: the candidates that model's planner weighed for these tables (or shards:
  those a fixed layout does not pin, as `split_place` hands them over), re-run
  deterministically from the plan's seed (`ranked_candidates`), which won and by how much,
  and whether the plan is that winner. Its cost network's predictions of the candidates
  leave out the pinned shards, so they are not the plan's overall.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import numpy as np

from dreamshard.costs.hardware import Hardware
from dreamshard.costs.simulated import SimulatedBackend, analytic_judge
from dreamshard.learn.model_file import resolve_model
from dreamshard.placement.constraints import bind
from dreamshard.placement.heuristics import HEURISTIC_KEYS, heuristic_keys
from dreamshard.placement.splitting import planned_shards
from dreamshard.placement.tasks import Placement, PlacementTask, placement_task, shard_view
from dreamshard.planners.device_search import analytic_model, costnet_model, move_costs
from dreamshard.planners.dreamshard_planner import ranked_candidates

TERMS = ("forward", "all-to-all", "backward")


@dataclass
class DeviceWhy:
    device: int
    tables: int
    fwd_ms: float
    comm_ms: float
    bwd_ms: float
    bottleneck: str  # the largest of TERMS
    critical: str  # "forward", "backward", "forward and backward", or ""


@dataclass
class TableWhy:
    table: str
    device: int
    key: float
    load_before: float  # the device's key sum before this table arrived
    overall_ms: float  # the plan's predicted overall (where it is)
    next_best: list[tuple[int, float]]  # up to two (device, overall ms with it moved there)


@dataclass
class Candidate:
    name: str
    predicted_ms: float


@dataclass
class Explanation:
    task: str
    method: str
    judge: str
    key: str
    overall_ms: float
    devices: list[DeviceWhy] = field(default_factory=list)
    tables: list[TableWhy] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)  # with a model: cheapest first
    plan_is_winner: bool | None = None

    @property
    def margin(self) -> float | None:
        """How much dearer the runner-up candidate is predicted than the winner (0.05: 5%)."""
        if len(self.candidates) < 2:
            return None
        return self.candidates[1].predicted_ms / self.candidates[0].predicted_ms - 1

    def as_dict(self) -> dict:
        return asdict(self) | {"margin": self.margin}


def explain_plan(
    task: PlacementTask,
    placement: Placement,
    model=None,
    seed: int = 0,
    samples: int = 8,
    hardware: Hardware | str | None = None,
) -> Explanation:
    """The explanation of `placement` of `task` (module docstring); `model`: anything
    `resolve_model` takes, or None for the analytic model of `hardware` (None: cpu); `seed`,
    `samples`: the planner's, to re-run its candidates."""
    roomy = replace(task, constraints=None)
    shards, flat = shard_view(roomy, placement)
    devices = np.asarray(flat.devices, dtype=np.int64)
    if model is not None:
        model = resolve_model(model)
        judge = "the model's cost network"
        scale = float(model.costnet.scale)
        device_model = costnet_model(model.costnet, shards)
        per_device, overall = model.costnet.predict_ms(shards, flat)
        terms = np.asarray(per_device)[:, :3]
    else:
        analytic = SimulatedBackend(hardware=hardware)
        judge = analytic_judge(analytic)
        scale = 1.0
        device_model = analytic_model(shards, analytic)
        cost = analytic.measure(shards, flat)
        overall = cost.overall
        terms = np.array([[d.fwd_comp, d.bwd_comm, d.bwd_comp] for d in cost.devices])
    explanation = Explanation(
        task.name, placement.method, judge, "", float(overall), device_rows(terms, devices)
    )
    if placement.method in HEURISTIC_KEYS:
        explanation.key = placement.method
        keys = heuristic_keys(shards, placement.method)
    else:
        explanation.key = "predicted ms alone on a device"
        fwd, bwd, _ = device_model.terms(device_model.vectors)
        keys = (fwd + bwd) * scale
    moved = move_costs(shards, devices, device_model) * scale
    pinned, free, rest = planned_shards(task, placement.splits)  # the plan's constraints kept
    fixed = np.zeros(len(devices), dtype=bool)
    fixed[list(pinned)] = True  # a shard of a fixed layout (row-wise, data-parallel) stays
    bound = bind(placement_task(task, placement))
    if bound is not None:  # no next-best device the constraints forbid
        fixed |= bound.frozen
        for table, others in bound.partners.items():
            moved[table, devices[others]] = np.inf
    here = moved[np.arange(len(devices)), devices]
    moved[fixed] = np.inf
    moved[np.arange(len(devices)), devices] = here
    explanation.tables = table_rows(shards, devices, keys, moved)
    if model is not None:  # as `split_place` ran the planner: on the shards not pinned
        ranked = ranked_candidates(rest, model, samples, seed)
        explanation.candidates = [Candidate(p.candidate or p.method, float(ms)) for p, ms in ranked]
        winner = np.asarray(ranked[0][0].devices)
        explanation.plan_is_winner = bool((winner == devices[free]).all())
    return explanation


def device_rows(terms: np.ndarray, devices: np.ndarray) -> list[DeviceWhy]:
    """Each device's terms [D, 3] (forward, all-to-all, backward ms), bottleneck and whether it
    holds the forward or the backward maximum (over the devices with tables)."""
    d = len(terms)
    count = np.bincount(devices, minlength=d)
    busy = count > 0
    fwd = np.where(busy, terms[:, 0], -np.inf)
    rest = np.where(busy, 2 * terms[:, 1] + terms[:, 2], -np.inf)
    rows = []
    for k in range(d):
        marks = [
            name
            for name, values in (("forward", fwd), ("backward", rest))
            if busy[k] and values[k] == values.max()
        ]
        rows.append(
            DeviceWhy(
                k,
                int(count[k]),
                float(terms[k, 0]),
                float(terms[k, 1]),
                float(terms[k, 2]),
                TERMS[int(np.argmax(terms[k]))],
                " and ".join(marks),
            )
        )
    return rows


def table_rows(
    task: PlacementTask, devices: np.ndarray, keys: np.ndarray, moved: np.ndarray
) -> list[TableWhy]:
    """Each table (largest key first): its key, its device's key load before it, the overall
    where it is and its two next-best devices (`moved` [T, D] overall ms)."""
    order = sorted(range(len(devices)), key=lambda i: (-keys[i], i))
    load = np.zeros(task.num_devices)
    rows = []
    for i in order:
        d = int(devices[i])
        others = [int(k) for k in np.argsort(moved[i], kind="stable") if k != d]
        best = [(k, float(moved[i, k])) for k in others if np.isfinite(moved[i, k])][:2]
        rows.append(
            TableWhy(
                task.tables[i].name, d, float(keys[i]), float(load[d]), float(moved[i, d]), best
            )
        )
        load[d] += keys[i]
    return rows
