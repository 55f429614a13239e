"""Fitting the simulated backend to the real fbgemm measurements in the cost dataset.

A split placement's record holds its shards as tables (`CostDataset.append` stores it over its
shards), so a device group of shards is fitted like any other: a column shard with its width,
a row shard with its rows and the lookups inside them. Only the kernels' times are fitted
(fwd_comp, bwd_comp): communication, row-wise partial sums included, is the topology model's.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from dreamshard.costs.dataset import CostDataset, record_costs, record_task
from dreamshard.costs.simulated import (
    GROUP_FEATURES,
    SimulatedModel,
    fit_model,
    group_features,
)
from dreamshard.errors import DreamshardError
from dreamshard.tables.traces import DEFAULT_BATCH, table_batch_size


def measured_groups(
    dataset: CostDataset,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list, np.ndarray]:
    """Every measured device group: (features, fwd ms, bwd ms, record ids, whether the group
    holds a shard of a split table)."""
    features, fwd, bwd, ids, shards = [], [], [], [], []
    for row in dataset.rows(status="ok", backend="fbgemm"):
        task, placement = record_task(row)
        batch = table_batch_size(task.tables, DEFAULT_BATCH)
        costs = record_costs(row)
        for device, members in enumerate(placement.device_tables(task.num_devices)):
            if not members or costs[device]["fwd_comp"] <= 0:
                continue
            tables = [task.tables[i] for i in members]
            features.append(group_features(tables, batch))
            fwd.append(costs[device]["fwd_comp"])
            bwd.append(costs[device]["bwd_comp"])
            ids.append(row["id"])
            shards.append(any(t.shard is not None for t in tables))
    return np.array(features), np.array(fwd), np.array(bwd), ids, np.array(shards, dtype=bool)


def calibrate(dataset: CostDataset, holdout: float = 0.2, seed: int = 0) -> SimulatedModel:
    """Fit on all measured groups; report in-sample and held-out (by record) errors."""
    features, fwd, bwd, ids, shards = measured_groups(dataset)
    if len(features) < 2 * len(GROUP_FEATURES):
        raise DreamshardError(
            f"only {len(features)} measured device groups in {dataset.path}; collect more with "
            "`dreamshard collect --backend fbgemm` first"
        )
    records = np.unique(ids)
    rng = np.random.default_rng(seed)
    held = set(rng.choice(records, size=max(1, int(len(records) * holdout)), replace=False))
    test = np.array([i in held for i in ids])
    trial = fit_model(features[~test], fwd[~test], bwd[~test])
    fwd_pred, bwd_pred = trial.predict(features[test])
    model = fit_model(features, fwd, bwd)
    model.fit["records"] = int(len(records))
    model.fit["shard_groups"] = int(shards.sum())
    model.fit["heldout_total_median_ape"] = float(
        np.median(np.abs((fwd_pred + bwd_pred) / (fwd[test] + bwd[test]) - 1))
    )
    model.fit["heldout_groups"] = int(test.sum())
    return model


def describe_fit(model: SimulatedModel, path: Path) -> str:
    fit = model.fit
    return (
        f"fitted the simulated backend to {fit['groups']} measured device groups "
        f"({fit['records']} placements; {fit.get('shard_groups', 0)} groups with shards of "
        f"split tables): median error fwd {fit['fwd_median_ape']:.1%}, "
        f"bwd {fit['bwd_median_ape']:.1%}, fwd+bwd {fit['total_median_ape']:.1%}; on "
        f"{fit['heldout_groups']} held-out groups fwd+bwd {fit['heldout_total_median_ape']:.1%}\n"
        f"wrote {path}\nweights: " + json.dumps({"fwd": model.fwd, "bwd": model.bwd})
    )
