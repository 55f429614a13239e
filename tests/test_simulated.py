"""The simulated backend: analytic, non-additive, calibrated from real measurements."""

import numpy as np
import pytest

from dreamshard.costs.calibrate import calibrate
from dreamshard.costs.collect import collect, collection_jobs
from dreamshard.costs.dataset import CostDataset
from dreamshard.costs.fbgemm import FbgemmBackend
from dreamshard.costs.simulated import (
    DEFAULT_PATH,
    GROUP_FEATURES,
    SimulatedBackend,
    SimulatedModel,
    fit_model,
    group_features,
)
from dreamshard.costs.tbe import TimingConfig
from dreamshard.errors import DreamshardError
from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import Placement, PlacementTask, is_legal
from dreamshard.tables.table import Table


def small_tables(n, rows=1000, dim=16, pooling=2.0):
    return [Table(f"t{i}", rows, dim, pooling) for i in range(n)]


def shipped() -> SimulatedModel:
    """The weights shipped with the package (not a calibration the state folder may hold)."""
    return SimulatedModel.load(DEFAULT_PATH)


def test_shipped_model_gives_a_full_breakdown():
    tables = tuple(small_tables(8))
    task = PlacementTask(tables, 2, 2**30, "fp32")
    backend = SimulatedBackend(shipped())
    cost = backend.measure(task, Placement((0,) * 4 + (1,) * 4))
    assert cost.backend == "simulated" and cost.comm == "modeled"
    assert all(t > 0 for d in cost.devices for t in d.terms())
    # relabelling the devices moves their costs along and keeps the overall cost
    varied = tuple(
        Table(f"v{i}", 1000 * (i + 1) ** 2, 4 * (1 + i % 5), 1.0 + 3 * i) for i in range(12)
    )
    many = PlacementTask(varied, 4, 2**30, "fp32")
    devices = (0, 1, 1, 0, 2, 3, 3, 2, 1, 0, 3, 3)
    before = backend.measure(many, Placement(devices))
    after = backend.measure(many, Placement(tuple((d + 1) % 4 for d in devices)))
    np.testing.assert_allclose(
        [after.devices[(d + 1) % 4].terms() for d in range(4)],
        [d.terms() for d in before.devices],
        rtol=1e-12,
    )
    assert after.overall == pytest.approx(before.overall, rel=1e-12)
    # piling the tables on one device costs more than spreading them
    piled = backend.measure(task, Placement((0,) * 8))
    assert piled.overall > cost.overall
    assert piled.devices[1].fwd_comp == 0 == piled.devices[1].bwd_comp  # nothing to compute


def fusion_saving(model: SimulatedModel, tables: list[Table], batch: int = 2048) -> float:
    """Milliseconds saved by one fused kernel over one kernel per table (fwd + bwd)."""
    fused = sum(model.predict(group_features(tables, batch)))[0]
    separate = sum(sum(model.predict(group_features([t], batch)))[0] for t in tables)
    return float(separate - fused)


def test_fusion_saves_at_most_the_per_call_overhead_it_removes():
    model = shipped()
    per_call = model.fwd[0] + model.bwd[0]
    small = small_tables(6)  # cheap lookups: fusing saves (nearly) five calls' overhead
    assert 0.9 * 5 * per_call < fusion_saving(model, small) <= 5 * per_call * (1 + 1e-9)
    # tables whose fused working set overflows the cache: the group costs more than its parts
    big = small_tables(6, rows=5_000_000, dim=128, pooling=100)
    assert fusion_saving(model, big) < 5 * per_call
    # whatever the (non-negative) weights: every other feature of a group only grows when fused
    rng = np.random.default_rng(0)
    for _ in range(200):
        weights = rng.exponential(size=(2, len(GROUP_FEATURES))) * rng.random((2, 1)) ** 4
        features = np.array([group_features([t], 2048) for t in small + big])
        weights /= np.maximum(features.max(axis=0), 1.0)  # every feature matters somewhere
        random_model = SimulatedModel(weights[0].tolist(), weights[1].tolist())
        tables = [
            Table(f"r{i}", int(rng.integers(10, 10**7)), int(rng.choice([4, 32, 256])), 1 + i)
            for i in range(int(rng.integers(1, 8)))
        ]
        limit = (len(tables) - 1) * (weights[0, 0] + weights[1, 0])
        assert fusion_saving(random_model, tables) <= limit + 1e-9 * (1 + abs(limit))


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
    assert all(w >= 0 for w in model.fwd + model.bwd)


def test_the_fit_recovers_the_weights_that_made_the_times():
    rng = np.random.default_rng(1)
    groups = []
    for _ in range(120):
        n = int(rng.integers(1, 9))
        groups.append(
            [
                Table(
                    f"t{i}",
                    int(10 ** rng.uniform(3, 7)),
                    int(rng.choice([4, 16, 64, 128])),
                    float(rng.uniform(1, 80)),
                )
                for i in range(n)
            ]
        )
    features = np.array([group_features(g, int(rng.choice([512, 2048]))) for g in groups])
    truth = shipped()
    fwd_ms, bwd_ms = truth.predict(features)
    fitted = fit_model(features, fwd_ms, bwd_ms)
    assert fitted.fit["total_median_ape"] < 1e-6
    fitted_fwd, fitted_bwd = fitted.predict(features)
    np.testing.assert_allclose(fitted_fwd, fwd_ms, rtol=1e-6)
    np.testing.assert_allclose(fitted_bwd, bwd_ms, rtol=1e-6)
    # and times twice as slow give weights twice as large
    doubled = fit_model(features, 2 * fwd_ms, 2 * bwd_ms)
    np.testing.assert_allclose(doubled.predict(features)[0], 2 * fwd_ms, rtol=1e-6)


def test_calibration_needs_measurements(tmp_path):
    with pytest.raises(DreamshardError, match="collect more"):
        calibrate(CostDataset(tmp_path / "empty.sqlite"))


def test_many_placements_at_once_cost_what_each_measures():
    backend = SimulatedBackend()
    rng = np.random.default_rng(0)
    for name in ("cpu-20x1", "cpu-30x4", "cpu-60x8"):
        task = make_suite(parse_suite_name(name, 1, 1)).test_tasks[0]
        placements = [
            Placement(tuple(int(d) for d in rng.integers(0, task.num_devices, len(task.tables))))
            for _ in range(30)
        ]
        placements = [p for p in placements if is_legal(task, p)]
        placements += [greedy_place(task, key) for key in HEURISTIC_KEYS]
        measured = [backend.measure(task, p).overall for p in placements]
        assert backend.overall_many(task, placements) == pytest.approx(measured, rel=1e-12)
