"""Fits the DMP step model's constants (`benchmarks/parts/dmp_proxy.py`) on measurements.

`benchmarks/torchrec_e2e.py` calls `calibrate` before it judges any held-out plan: on the suite's
*training* tasks (never the held-out ones it reports), designed plans that vary what the
fitted constants scale with are timed by the fbgemm proxy (each rank's fused kernels) and in
real DMP steps, and `fit_step_model` fits the kernel scale, the per-step constant, the cost of
each sharding group beyond the first, of each column shard beyond a table's first and of each
bucketized row-wise id. The plans, on a cap that holds every table (memory is not what is
calibrated): the five heuristics (whole tables, kernels balanced more or less), the lookup
plan with its 2 and 6 heaviest splittable tables cut column-wise in two (one shard per rank),
with its 1 and 4 heaviest tables row-wise, and with both (2 column-wise, 1 row-wise).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from benchmarks.parts.dmp_proxy import StepTerms, fit_step_model, step_terms
from dreamshard.costs.comm import Topology
from dreamshard.costs.types import PlacementCost
from dreamshard.evaluation.rounds import geometric_mean, measure_costs
from dreamshard.integrations.dmp_backend import DmpBackend
from dreamshard.placement.registry import place
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.tables.shards import Split, split_problem
from dreamshard.tables.traces import table_batch_size

HEURISTICS = ("dim", "size", "lookup", "size_lookup", "random")
DESIGNED = {  # name: (column-split tables, row-split tables), the heaviest first
    "cw2": (2, 0),
    "cw6": (6, 0),
    "rw1": (0, 1),
    "rw4": (0, 4),
    "cw2_rw1": (2, 1),
}


def kernels_of(cost: PlacementCost) -> np.ndarray:
    """Each device's fused kernels, forward + backward with the optimizer (ms)."""
    return np.array([d.fwd_comp + d.bwd_comp for d in cost.devices])


def measure_kernels(proxy, items: list, rounds: int, seed: int) -> tuple[np.ndarray, list]:
    """The proxy's overall costs [rounds, items] and each item's kernels per device (ms, the
    geometric mean over rounds), in interleaved rounds."""
    costs = measure_costs(proxy, items, rounds, seed)
    kernels = [
        geometric_mean(np.array([kernels_of(row[i]) for row in costs])) for i in range(len(items))
    ]
    return np.array([[c.overall for c in row] for row in costs]), kernels


def split_plan(task: PlacementTask, base: Placement, cut: dict[str, str], name: str) -> Placement:
    """`base` with the tables of `cut` split in two, `{table: "column" | "row"}`: a column
    table's shards on its device and the next, a row table's shard r on rank r (TorchRec's)."""
    d = task.num_devices
    devices: list[int] = []
    for table, device in zip(task.tables, base.devices):
        kind = cut.get(table.name)
        if kind == "column":
            devices += [device, (device + 1) % d]
        elif kind == "row":
            devices += list(range(d))
        else:
            devices.append(device)
    splits = tuple(Split(t, kind, 2 if kind == "column" else d) for t, kind in cut.items())
    return Placement(tuple(devices), method=name, splits=splits)


def calibration_plans(task: PlacementTask) -> dict[str, Placement]:
    plans = {name: place(task, name, split="none") for name in HEURISTICS}
    heavy = sorted(task.tables, key=lambda t: -t.pooling_factor * t.dim)
    columns = [t.name for t in heavy if split_problem(t, "column", 2) is None]
    rows = [t.name for t in heavy if split_problem(t, "row", task.num_devices) is None]
    for name, (c, r) in DESIGNED.items():
        cut = dict.fromkeys(columns[:c], "column")
        cut.update(dict.fromkeys([t for t in rows if t not in cut][:r], "row"))
        plans[name] = split_plan(task, plans["lookup"], cut, name)
    return plans


def calibrate(
    tasks: list[PlacementTask],
    backend: DmpBackend,
    proxy,
    topology: Topology,
    rounds: int,
    proxy_rounds: int,
    log=print,
) -> tuple[dict, dict]:
    """({clock: the fitted DmpStepModel}, a record of the plans, their measurements and the fit)."""
    roomy = [replace(t, memory_cap_bytes=int(t.table_bytes().sum())) for t in tasks]
    designed = [calibration_plans(task) for task in roomy]
    items = [(task, p) for task, plans in zip(roomy, designed) for p in plans.values()]
    log(f"calibration: {len(items)} designed plans of {len(roomy)} training tasks, proxy")
    _, kernels = measure_kernels(proxy, items, proxy_rounds, seed=2)
    measured: list[dict[str, float]] = []
    for task, plans in zip(roomy, designed):
        log(f"calibration: {task.name}, {len(plans)} plans under DMP")
        run = backend.measure_plans(task, list(plans.values()), rounds)
        measured.append(
            {
                clock: geometric_mean(run.overall(clock)).tolist()
                for clock in ("wall", "cpu")
                if backend.device_kind() == "cpu" or clock == "wall"
            }
        )
    terms: list[StepTerms] = [
        step_terms(task, p, table_batch_size(task.tables, backend.batch_size), topology)
        for task, p in items
    ]
    models, fits = {}, {}
    for clock in measured[0]:
        steps = [ms for m in measured for ms in m[clock]]
        models[clock], fits[clock] = fit_step_model(kernels, terms, steps)
    rows, i = [], 0
    for t, plans in enumerate(designed):
        for j, name in enumerate(plans):
            row = {"task": roomy[t].name, "plan": name, "kernels_ms": kernels[i].tolist()}
            row["terms"] = terms[i].to_dict()
            for clock in models:
                row[f"dmp_{clock}_ms"] = measured[t][clock][j]
                row[f"model_{clock}_ms"] = models[clock].estimate(kernels[i], terms[i])
            rows.append(row)
            i += 1
    record = {
        "tasks": [t.name for t in roomy],
        "plans": rows,
        "fitted": {c: models[c].fitted() for c in models},
        "fit": fits,
        "rounds": rounds,
        "proxy_rounds": proxy_rounds,
    }
    return models, record
