"""The simulated backend: an analytic cost model fitted to real fbgemm measurements.

Each device's fused-kernel time (forward, and backward with the optimizer update) is a
non-negative combination of group features with the non-additive shape of the real kernel:

    per-call overhead (paid once per fused kernel, so fusion saves it)
    + per-table overhead + lookups (B * pooling) + lookup volume (B * pooling * dim)
    + touched rows (unique rows * dim) + output width (B * sum of dims)
    + lookups x width (a group's cost grows faster than the sum of its parts)
    + lookup volume that misses the last-level cache: volume * (1 - cache / working set),
      so groups whose working set overflows the cache cost more

Communication comes from the same topology model as the in-process fbgemm backend.
`dreamshard calibrate` fits the weights to the measurements in the cost dataset and writes
them to the state folder; without one, the weights shipped in `simulated_default.json`
(fitted on a 2-core CPU host) are used. Every cost from here says `backend: simulated`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dreamshard.costs.comm import allreduce_ms, exchange_many, get_topology, modeled_comm
from dreamshard.costs.hardware import Hardware, load_hardware
from dreamshard.costs.quantities import table_quantities
from dreamshard.costs.roofline import RooflineModel
from dreamshard.costs.types import DeviceCost, PlacementCost
from dreamshard.errors import DreamshardError
from dreamshard.files import write_json_atomic
from dreamshard.placement.tasks import (
    Placement,
    PlacementTask,
    check_legal,
    placement_task,
    shard_view,
)
from dreamshard.state import calibration_path
from dreamshard.tables.shards import pooled_width, reduce_width
from dreamshard.tables.table import Table
from dreamshard.tables.traces import DEFAULT_BATCH, table_batch_size

GROUP_FEATURES = (
    "call",
    "tables",
    "lookups",
    "volume",
    "touched",
    "width",
    "lookups_x_width",
    "overflow",
)
CACHE_BYTES = 32 * 2**20
DEFAULT_PATH = Path(__file__).with_name("simulated_default.json")


def group_features(tables: Sequence[Table], batch_size: int) -> np.ndarray:
    """The model's features of one fused group (zeros for an empty device)."""
    return features_of_sums(table_quantities(tables, batch_size).sum(axis=0, keepdims=True))[0]


def features_of_sums(sums: np.ndarray, cache_bytes: float = CACHE_BYTES) -> np.ndarray:
    """[N, GROUP_FEATURES] from groups' sums [N, 6] of `table_quantities` (what
    `group_features` computes table by table; the cache overflow, past a last-level cache of
    `cache_bytes`, is the one non-additive)."""
    count, lookups, volume, touched, width, dims = sums.T
    working_set = 4 * (touched + width)
    miss = np.maximum(0.0, 1.0 - cache_bytes / np.maximum(working_set, 1e-30))
    return np.stack(
        [count > 0, count, lookups, volume, touched, width, lookups * dims, volume * miss],
        axis=1,
    ).astype(np.float64)


@dataclass
class SimulatedModel:
    """Weights of the forward and backward kernel models, in ms per feature unit."""

    fwd: list[float]
    bwd: list[float]
    fit: dict = field(default_factory=dict)

    def predict(self, features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        features = np.atleast_2d(features)
        return features @ np.array(self.fwd), features @ np.array(self.bwd)

    def quantities(self, tables: Sequence[Table], batch_size: int, precision: str) -> np.ndarray:
        """[T, 6] each table's share of a group's sums: `table_quantities` (the precision is in
        the features' weights)."""
        return table_quantities(tables, batch_size)

    def predict_sums(self, sums: np.ndarray, precision: str) -> tuple[np.ndarray, np.ndarray]:
        """(fwd ms, bwd ms) of groups from their sums [N, 6] of `table_quantities` (the CPU
        model weighs fp32 and fp16 alike: it was fitted on fp32 kernels)."""
        return self.predict(features_of_sums(np.atleast_2d(sums)))

    def save(self, path: Path) -> None:
        write_json_atomic(
            path,
            {"features": list(GROUP_FEATURES), "fwd": self.fwd, "bwd": self.bwd, "fit": self.fit},
        )

    @classmethod
    def load(cls, path: Path | None = None) -> SimulatedModel:
        if path is None:
            path = calibration_path() if calibration_path().exists() else DEFAULT_PATH
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise DreamshardError(
                f"cannot read the simulated backend's weights {path}: {exc}"
            ) from None
        if data.get("features") != list(GROUP_FEATURES):
            raise DreamshardError(f"{path} was fitted for other features; run dreamshard calibrate")
        return cls(data["fwd"], data["bwd"], data.get("fit", {}))


def fit_model(features: np.ndarray, fwd_ms: np.ndarray, bwd_ms: np.ndarray) -> SimulatedModel:
    """Non-negative weights minimising squared relative error, and the fit's errors."""
    from scipy.optimize import nnls  # slow to import; only fitting needs it

    features = np.asarray(features, dtype=np.float64)
    scale = features.max(axis=0)
    scale[scale == 0] = 1.0
    weights = []
    for target in (fwd_ms, bwd_ms):
        target = np.asarray(target, dtype=np.float64)
        rel = features / scale / target[:, None]  # rows divided by the target: relative error
        coef, _ = nnls(rel, np.ones(len(target)))
        weights.append((coef / scale).tolist())
    model = SimulatedModel(weights[0], weights[1])
    fwd_pred, bwd_pred = model.predict(features)
    model.fit = {
        "groups": int(len(features)),
        "fwd_median_ape": float(np.median(np.abs(fwd_pred / fwd_ms - 1))),
        "bwd_median_ape": float(np.median(np.abs(bwd_pred / bwd_ms - 1))),
        "total_median_ape": float(np.median(np.abs((fwd_pred + bwd_pred) / (fwd_ms + bwd_ms) - 1))),
    }
    return model


@dataclass
class SimulatedBackend:
    """The analytic backend for one hardware file: `cpu` (the default) prices each device's
    kernel with the calibrated model, a GPU file with its roofline (`costs.roofline`); the
    exchange on `topology`, or the file's own links when none is given."""

    model: SimulatedModel | None = None
    topology: str | None = None  # None: the hardware file's links (cpu: cpu-gloo)
    batch_size: int = DEFAULT_BATCH
    hardware: Hardware | str | None = None  # None: cpu
    name: str = field(default="simulated", init=False)

    def __post_init__(self):
        self.hardware = load_hardware(self.hardware or "cpu")
        if self.hardware.is_gpu:
            self.kernel = RooflineModel(self.hardware)
        else:
            self.model = self.model or SimulatedModel.load()
            self.kernel = self.model
        self.topology = self.topology or self.hardware.topology_name()
        get_topology(self.topology)

    def config(self) -> dict:
        if self.hardware.is_gpu:
            return {
                "backend": self.name,
                "topology": self.topology,
                "hardware": self.hardware.record(),
            }
        return {
            "backend": self.name,
            "topology": self.topology,
            "fwd": self.model.fwd,
            "bwd": self.model.bwd,
        }

    def overall_many(self, task: PlacementTask, placements: Sequence[Placement]) -> np.ndarray:
        """`measure(task, p).overall` of many placements of one task at once (no legality check).

        Every group feature but the cache overflow is a sum over the group's tables, so each
        placement's device features are per-table quantities summed by device; a local search
        scores thousands of neighbours a second this way.
        """
        if placements and placements[0].splits:  # placements of one task share its splits
            task = placement_task(task, placements[0])
        batch = table_batch_size(task.tables, self.batch_size)
        tables = task.tables
        per_table = self.kernel.quantities(tables, batch, task.precision)
        n, d = len(placements), task.num_devices
        devices = np.asarray([p.devices for p in placements], dtype=np.int64)  # [N, T]
        slot = (devices + d * np.arange(n)[:, None]).ravel()
        sums = np.stack(
            [np.bincount(slot, np.tile(per_table[:, k], n), n * d) for k in range(6)], axis=1
        )  # [N * D, 6]
        fwd, bwd = self.kernel.predict_sums(sums, task.precision)
        fwd, bwd = fwd.reshape(n, d), bwd.reshape(n, d)
        transfer = exchange_many(tables, devices, batch, get_topology(self.topology), d)
        wait = fwd.max(axis=1, keepdims=True) - fwd if d > 1 else np.zeros_like(fwd)
        return (fwd + wait + 2 * transfer + bwd).max(axis=1)

    def cheapest(self, task: PlacementTask, placements: list[Placement]) -> float:
        """The lowest overall cost among placements of one task: how the analytic model rates
        a split candidate (`placement.splitting.SplitRating`)."""
        return float(self.overall_many(task, placements).min())

    def device_sums(self, task: PlacementTask, placement: Placement) -> np.ndarray:
        """[devices, 6] each device's sums of its kernel's `quantities` (zeros for none), of
        the placement's shards, at this backend's batch size: what `measure` weighs."""
        task, placement = shard_view(task, placement)
        batch = table_batch_size(task.tables, self.batch_size)
        per_table = self.kernel.quantities(task.tables, batch, task.precision)
        members = placement.device_tables(task.num_devices)
        return np.stack([per_table[list(m)].sum(axis=0) for m in members])

    def measure(self, task: PlacementTask, placement: Placement) -> PlacementCost:
        task.validate()
        check_legal(task, placement)
        task, placement = shard_view(task, placement)
        batch = table_batch_size(task.tables, self.batch_size)
        groups = [[task.tables[i] for i in m] for m in placement.device_tables(task.num_devices)]
        fwd, bwd = self.kernel.predict_sums(self.device_sums(task, placement), task.precision)
        widths = np.array([sum(pooled_width(t) for t in g) for g in groups])
        topology = get_topology(self.topology)
        allreduce = allreduce_ms(task.tables, task.num_devices, topology)
        reduced = np.array([sum(reduce_width(t) for t in g) for g in groups])
        fwd_comm, bwd_comm = modeled_comm(widths, fwd, batch, topology, allreduce, reduced)
        devices = tuple(
            DeviceCost(float(f), float(fc), float(bc), float(b))
            for f, fc, bc, b in zip(fwd, fwd_comm, bwd_comm, bwd)
        )
        comm = "modeled" if task.num_devices > 1 else "none"
        info = {"topology": self.topology, "batch": batch}
        if self.hardware.is_gpu:
            info["hardware"] = self.hardware.label()
        return PlacementCost(devices, self.name, comm, info)


def analytic_judge(backend: SimulatedBackend) -> str:
    """What the analytic model of `backend` is, in words (`check` and `explain` say it)."""
    if backend.hardware.is_gpu:
        return f"the GPU kernel roofline of the {backend.hardware.label()} hardware file"
    return "the calibrated analytic model (the simulated backend)"
