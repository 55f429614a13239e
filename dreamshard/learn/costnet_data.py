"""Training examples for the cost network, read from the cost dataset."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from dreamshard.costs.dataset import CostDataset, record_costs, record_task
from dreamshard.costs.reference import normalised
from dreamshard.costs.types import DeviceCost, PlacementCost
from dreamshard.errors import DreamshardError
from dreamshard.learn.costnet import DEVICE_TERMS
from dreamshard.learn.train_config import LABELS
from dreamshard.placement.suites import held_out
from dreamshard.tables.features import FEATURE_NAMES, feature_matrix
from dreamshard.tables.traces import DEFAULT_BATCH, table_batch_size


@dataclass
class Example:
    """One measured placement as the cost network sees it."""

    features: np.ndarray  # [T, 21]
    devices: np.ndarray  # [T] device of each table
    num_devices: int
    device_targets: np.ndarray  # [D, 3] ms: fwd_comp, bwd_comm, bwd_comp
    overall: float  # ms
    task: str = ""
    method: str = ""
    batch: int | None = None  # bags a step (None: the network's own batch size)

    def as_input(self) -> tuple[np.ndarray, np.ndarray, int]:
        return self.features, self.devices, self.num_devices


def load_examples(
    dataset: CostDataset,
    config: dict | None = None,
    labels: str = "raw",
    fitting: bool = False,
    machines: Iterable[str] = (),
) -> list[Example]:
    """Every successful measurement (taken with backend settings `config`, when given;
    `fitting`: only those a network may be fitted on; `machines`: only those measured on one of
    them; see `measured_rows`).

    `labels="normalised"` labels each with its cost normalised by the reference group timed
    with it (costs/reference.py), so labels from different runs agree; `"per-term"` normalises
    the forward and backward each by the reference's own. Measurements without a reference
    time (older records, torchrun) are left out.
    """
    if labels not in LABELS:
        raise ValueError(f"unknown labels {labels!r}; choose one of {', '.join(LABELS)}")
    examples = []
    for row in measured_rows(dataset, config, fitting, machines):
        cost = labelled_cost(row, labels)
        if cost is None:
            continue
        task, placement = record_task(row)
        targets = np.array(
            [[getattr(d, t) for t in DEVICE_TERMS] for d in cost.devices], dtype=np.float32
        )
        examples.append(
            Example(
                feature_matrix(task.tables),
                np.array(placement.devices),
                task.num_devices,
                targets,
                float(cost.overall),
                task.name,
                placement.method,
                table_batch_size(task.tables, int(cost.info.get("batch") or DEFAULT_BATCH)),
            )
        )
    return examples


def measured_rows(
    dataset: CostDataset,
    config: dict | None = None,
    fitting: bool = False,
    machines: Iterable[str] = (),
) -> list:
    """The dataset's successful measurements (taken with backend settings `config`, when
    given; on one of `machines`, when given: a cost network is fitted per GPU type), oldest
    first. `fitting` leaves out the measurements of suites' test tasks
    (`placement.suites.held_out`): a dataset that also holds an evaluation (the main job's
    does) must not teach the network the tasks it is judged on."""
    wanted = json.dumps(config, sort_keys=True) if config is not None else None
    return [
        r
        for r in dataset.rows(status="ok", machines=machines)
        if (wanted is None or r["config"] == wanted) and not (fitting and held_out(r["task"]))
    ]


def labelled_cost(row, labels: str) -> PlacementCost | None:
    """A stored measurement's cost as `labels` are: as measured ("raw"), or normalised by the
    reference group timed with it (per term: "per-term"), or a DMP step split into each rank's
    own work and the rest ("step-split"); None when it has no reference time to normalise by
    (older records, measured communication) or is no DMP step."""
    cost = record_cost(row)
    if labels == "raw":
        return cost
    if labels == "step-split":
        return step_split(cost)
    try:
        return normalised(cost, per_term=labels == "per-term")
    except DreamshardError:  # no reference time recorded to normalise by
        return None


def step_split(cost: PlacementCost) -> PlacementCost | None:
    """A DMP step (`info["terms"] == "step"`) per rank split in two: the rank's own CPU time in
    the step as its `fwd_comp`, and the rest of its wall-clock step (waiting for the other
    ranks in the exchanges, and being preempted) halved into `fwd_comm` and `bwd_comm`, the
    terms the network composes twice. Each rank's total stays its wall-clock step. None for a
    record that is not such a step."""
    wall, cpu = cost.info.get("wall_ms"), cost.info.get("cpu_ms")
    if cost.info.get("terms") != "step" or not wall or not cpu or len(wall) != len(cost.devices):
        return None
    devices = tuple(
        DeviceCost(min(c, w), max(w - c, 0.0) / 2, max(w - c, 0.0) / 2, 0.0, d.cv)
        for w, c, d in zip(wall, cpu, cost.devices, strict=True)
    )
    return replace(cost, devices=devices)


def record_cost(row) -> PlacementCost:
    """A stored measurement's cost, with its info (the reference time among it)."""
    devices = tuple(DeviceCost(**c) for c in record_costs(row))
    info = json.loads(row["info"]) if row["info"] else {}
    return PlacementCost(devices, row["backend"], row["comm"] or "", info)


def mask_features(examples: list[Example], removed: Sequence[str]) -> list[Example]:
    """The examples with the named feature columns (`FEATURE_NAMES`) zeroed: the feature study.

    A column that is zero in training and evaluation alike is a constant the encoder's first
    bias absorbs, so the network learns exactly as if the feature had been dropped.
    """
    unknown = sorted(set(removed) - set(FEATURE_NAMES))
    if unknown:
        raise ValueError(f"unknown feature {unknown[0]!r}; features: {', '.join(FEATURE_NAMES)}")
    keep = np.array([name not in removed for name in FEATURE_NAMES], dtype=np.float32)
    return [replace(e, features=e.features * keep) for e in examples]
