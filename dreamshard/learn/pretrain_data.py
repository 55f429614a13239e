"""The shipped cost network's training data: a broad family of tables, many analytic models.

A cost network fitted on one suite's hundred placements knows that suite's tables; on tables
unlike them it can be worse than a heuristic (issue 28). NeuroShard's lesson is volume and
variety, so the shipped network (`learn/shipped.py`) is fitted on tasks drawn from a family far
wider than any suite:

    rows        log-uniform 1e2 - 1e8
    dims        a multiple of 4 from 4 to 512, log-uniform
    pooling     log-uniform 1 - 500 (a fifth of the tables one-hot)
    access skew power-law alpha uniform 0.3 - 1.3
    tables      log-uniform 10 - 1000 a task, on 2 - 128 devices (log-uniform)
    batch       a power of two from 512 to 65,536 bags a step

and each placement is labelled by an analytic model drawn around the calibrated one (domain
randomisation), never by the calibrated model itself, which stays the simulated judge:

    each kernel weight   x exp(N(0, WEIGHT_SPREAD))      (forward and backward apart)
    each term's speed    x exp(N(0, SPEED_SPREAD))       (the whole forward, the whole backward)
    last-level cache     log-uniform 8 - 256 MiB          (where lookups start to miss)
    exchange             a flat preset drawn from FLAT_TOPOLOGIES

Placements of a task: the four greedy heuristics, random, random over a few devices, and the
heuristics' placements with random moves, so the data holds balanced and unbalanced loads.
Memory is not checked: labels need no legality, and a loaded device is what a cost model must
price. The out-of-distribution families the shipped network is judged on come from generator
code of their own (`benchmarks/parts/ood_families.py`), never used here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from dreamshard.costs.comm import exchange_many, get_topology
from dreamshard.costs.quantities import table_quantities
from dreamshard.costs.simulated import (
    CACHE_BYTES,
    DEFAULT_PATH,
    SimulatedModel,
    features_of_sums,
)
from dreamshard.learn.costnet import DEVICE_TERMS, compose_overall
from dreamshard.learn.costnet_data import Example
from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place
from dreamshard.placement.tasks import PlacementTask
from dreamshard.tables.features import feature_matrix
from dreamshard.tables.synthetic import expected_histogram
from dreamshard.tables.table import Table

ROWS = (1e2, 1e8)
DIMS = tuple(range(4, 513, 4))
POOLING = (1.0, 500.0)
ONE_HOT = 0.2
ALPHA = (0.3, 1.3)
TABLES = (10, 1000)
DEVICES = (2, 128)
BATCHES = tuple(2**k for k in range(9, 17))
WEIGHT_SPREAD = 0.3
SPEED_SPREAD = 0.3
CACHE_MIB = (8.0, 256.0)
FLAT_TOPOLOGIES = ("nvlink", "pcie", "network", "cpu-gloo")
# what `learn.coverage` says a model pre-trained on the family has seen
FAMILY_RANGES = {
    "tables per task": list(TABLES),
    "devices": list(DEVICES),
    "rows": list(ROWS),
    "dim": [DIMS[0], DIMS[-1]],
    "pooling factor": list(POOLING),
}
POOL = 2500  # tables of the family per batch size
MOVES = 0.1  # of a perturbed placement's tables, the share moved to random devices


@dataclass(frozen=True)
class LabelModel:
    """One drawn analytic model: kernel weights, last-level cache and exchange."""

    fwd: np.ndarray  # [GROUP_FEATURES] ms per unit
    bwd: np.ndarray
    cache_bytes: float
    topology: str

    def as_dict(self) -> dict:
        return {
            "fwd": self.fwd.tolist(),
            "bwd": self.bwd.tolist(),
            "cache_bytes": self.cache_bytes,
            "topology": self.topology,
        }


def draw_label_model(rng: np.random.Generator, base: SimulatedModel) -> LabelModel:
    """An analytic model drawn around `base` (the shipped calibration): every weight, each
    term's speed, the cache and the exchange vary."""
    fwd, bwd = np.array(base.fwd), np.array(base.bwd)
    fwd = fwd * np.exp(rng.normal(0.0, WEIGHT_SPREAD, fwd.shape) + rng.normal(0.0, SPEED_SPREAD))
    bwd = bwd * np.exp(rng.normal(0.0, WEIGHT_SPREAD, bwd.shape) + rng.normal(0.0, SPEED_SPREAD))
    cache = 2**20 * float(np.exp(rng.uniform(*np.log(CACHE_MIB))))
    topology = FLAT_TOPOLOGIES[rng.integers(len(FLAT_TOPOLOGIES))]
    return LabelModel(fwd, bwd, cache, topology)


def log_uniform(rng: np.random.Generator, low: float, high: float) -> float:
    return float(np.exp(rng.uniform(np.log(low), np.log(high))))


@functools.lru_cache(maxsize=2 * len(BATCHES))
def family_pool(seed: int, batch: int, size: int = POOL) -> tuple[Table, ...]:
    """`size` tables of the pre-training family, their histograms expected at `batch`; tasks
    draw their tables from it (an expected histogram takes milliseconds: a pool keeps the
    pre-training data's variety at a fraction of the time)."""
    return tuple(family_tables(np.random.default_rng([seed, batch]), size, batch))


def family_tables(rng: np.random.Generator, count: int, batch: int) -> list[Table]:
    """`count` tables of the pre-training family, their histograms expected at `batch`."""
    tables = []
    for index in range(count):
        rows = int(log_uniform(rng, *ROWS))
        dim = int(DIMS[min(len(DIMS) - 1, int(log_uniform(rng, 1, len(DIMS) + 1)) - 1)])
        one_hot = rng.random() < ONE_HOT
        pooling = 1.0 if one_hot else log_uniform(rng, *POOLING)
        alpha = float(rng.uniform(*ALPHA))
        histogram = expected_histogram(rows, alpha, batch * pooling)[0]
        tables.append(Table(f"p{index:04d}", rows, dim, pooling, histogram))
    return tables


def label_placement(
    tables: list[Table], devices: np.ndarray, num_devices: int, batch: int, model: LabelModel
) -> np.ndarray:
    """[D, 3] fwd_comp, bwd_comm (the modeled all-to-all), bwd_comp in ms of one placement
    under a drawn model (the simulated backend's arithmetic, its constants drawn)."""
    per_table = table_quantities(tables, batch)
    sums = np.stack(
        [np.bincount(devices, per_table[:, k], num_devices) for k in range(per_table.shape[1])],
        axis=1,
    )
    features = features_of_sums(sums, model.cache_bytes)
    fwd, bwd = features @ model.fwd, features @ model.bwd
    comm = exchange_many(tables, devices[None], batch, get_topology(model.topology), num_devices)
    return np.stack([fwd, comm[0], bwd], axis=1).astype(np.float32)


def task_placements(
    task: PlacementTask, rng: np.random.Generator, count: int
) -> list[tuple[str, np.ndarray]]:
    """`count` (method, devices) placements of a task whose memory never binds."""
    t, d = len(task.tables), task.num_devices
    heuristics = [(key, np.array(greedy_place(task, key).devices)) for key in HEURISTIC_KEYS]
    placements = []
    for i in range(count):
        kind = i % 4
        if kind == 0:
            placements.append(heuristics[(i // 4) % len(heuristics)])
        elif kind == 1:
            placements.append(("random", rng.integers(d, size=t)))
        elif kind == 2:
            few = rng.choice(d, size=max(1, int(rng.integers(1, d + 1) // 2)), replace=False)
            placements.append(("crowded", rng.choice(few, size=t)))
        else:
            method, devices = heuristics[rng.integers(len(heuristics))]
            moved = devices.copy()
            picks = rng.random(t) < MOVES
            moved[picks] = rng.integers(d, size=int(picks.sum()))
            placements.append((f"{method}+moves", moved))
    return placements


def pretrain_examples(
    seed: int,
    tasks: int,
    placements_per_task: int,
    base: SimulatedModel | None = None,
    progress: Callable[[int], None] | None = None,
    pool: int = POOL,
    randomise: bool = True,
) -> list[Example]:
    """`tasks` tasks of the family, each with its own drawn analytic model, batch and device
    count, and `placements_per_task` labelled placements of each, the tables drawn from pools of
    `pool` per batch size; the same seed gives the same examples. `randomise=False` labels
    them by the centre of the randomisation instead (`base`'s weights and cache, a drawn
    exchange): what the shipped ensemble's confidence is calibrated on (`learn/shipped.py`)."""
    base = base or SimulatedModel.load(DEFAULT_PATH)
    examples = []
    for index in range(tasks):
        rng = np.random.default_rng([seed, index])
        batch = int(BATCHES[rng.integers(len(BATCHES))])
        num_tables = int(log_uniform(rng, TABLES[0], TABLES[1] + 1))
        num_devices = min(int(log_uniform(rng, DEVICES[0], DEVICES[1] + 1)), num_tables)
        drawn = family_pool(seed, batch, pool)
        num_tables = min(num_tables, len(drawn))
        tables = [drawn[i] for i in rng.choice(len(drawn), size=num_tables, replace=False)]
        task = PlacementTask(tuple(tables), num_devices, 2**62, name=f"pretrain-{seed}-{index}")
        model = draw_label_model(rng, base)
        if not randomise:
            model = LabelModel(np.array(base.fwd), np.array(base.bwd), CACHE_BYTES, model.topology)
        features = feature_matrix(tables)
        for method, devices in task_placements(task, rng, placements_per_task):
            targets = label_placement(tables, devices, num_devices, batch, model)
            examples.append(
                Example(
                    features,
                    devices,
                    num_devices,
                    targets,
                    overall_of(targets),
                    task.name,
                    method,
                    batch,
                )
            )
        if progress is not None:
            progress(index + 1)
    return examples


def overall_of(targets: np.ndarray) -> float:
    """A placement's overall ms from its devices' [fwd_comp, all-to-all, bwd_comp], composed
    as the network composes it (`compose_overall` with the modeled exchange)."""
    labels = torch.from_numpy(targets)
    busy = torch.from_numpy(targets[:, [0, 2]].sum(1) > 0)
    return float(compose_overall(labels, busy, labels[:, DEVICE_TERMS.index("bwd_comm")]))
