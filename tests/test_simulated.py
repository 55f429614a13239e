"""The simulated backend: analytic, non-additive, calibrated from real measurements."""

import numpy as np
import pytest

from dreamshard.costs.calibrate import calibrate
from dreamshard.costs.collect import collect, collection_jobs
from dreamshard.costs.dataset import CostDataset
from dreamshard.costs.fbgemm import FbgemmBackend
from dreamshard.costs.simulated import SimulatedBackend, SimulatedModel, group_features
from dreamshard.errors import DreamshardError
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.tables.table import Table
from gpu_tasks.tbe import TimingConfig


def small_tables(n, rows=1000, dim=16, pooling=2.0):
    return [Table(f"t{i}", rows, dim, pooling) for i in range(n)]


def test_shipped_model_gives_a_full_breakdown():
    tables = tuple(small_tables(8))
    task = PlacementTask(tables, 2, 2**30, "fp32")
    cost = SimulatedBackend().measure(task, Placement((0,) * 4 + (1,) * 4))
    assert cost.backend == "simulated" and cost.comm == "modeled"
    assert all(t > 0 for d in cost.devices for t in d.terms())
    assert cost.overall == max(d.total for d in cost.devices)


def test_fusion_saves_the_per_call_overhead():
    model = SimulatedModel.load()
    tables = small_tables(6)
    fused = sum(model.predict(group_features(tables, 2048)))[0]
    separate = sum(sum(model.predict(group_features([t], 2048)))[0] for t in tables)
    assert model.fwd[0] + model.bwd[0] > 0  # a per-call cost exists
    assert fused != pytest.approx(separate)  # not additive


def test_overflowing_the_cache_costs_more_than_its_lookups():
    small = group_features(small_tables(4, rows=1000), 2048)
    big = group_features(small_tables(4, rows=5_000_000, dim=128, pooling=100), 2048)
    assert small[-1] == 0 and big[-1] > 0


def test_calibration_fits_real_measurements(tmp_path):
    suite = make_suite(parse_suite_name("cpu-16x2", num_train_tasks=6, num_test_tasks=1))
    dataset = CostDataset(tmp_path / "costs.sqlite")
    collect(
        list(collection_jobs(suite, 12)), FbgemmBackend(timing=TimingConfig(iterations=3)), dataset
    )
    model = calibrate(dataset)
    assert model.fit["records"] == len(dataset) >= 10  # planners may propose a placement twice
    assert model.fit["groups"] >= 2 * model.fit["records"] - 2
    assert np.isfinite(model.fit["heldout_total_median_ape"])
    assert model.fit["total_median_ape"] < 0.5
    assert all(w >= 0 for w in model.fwd + model.bwd)


def test_calibration_needs_measurements(tmp_path):
    with pytest.raises(DreamshardError, match="collect more"):
        calibrate(CostDataset(tmp_path / "empty.sqlite"))
