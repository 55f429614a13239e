"""Real fbgemm measurements on tiny tables: the cost breakdown and its guarantees."""

import numpy as np
import pytest

from dreamshard.costs.fbgemm import FbgemmBackend, MeasurementError
from dreamshard.costs.tbe import TimingConfig
from dreamshard.costs.types import COST_TERMS
from dreamshard.errors import DreamshardError
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.tables.table import Table

FAST = TimingConfig(warmup=1, iterations=5)
GIB = 2**30


def tiny_task(pooling=(4.0, 4.0, 4.0, 4.0), devices=2):
    tables = tuple(
        Table(f"t{i}", rows=2000, dim=32, pooling_factor=p) for i, p in enumerate(pooling)
    )
    return PlacementTask(tables, devices, GIB, "fp32", "tiny")


def test_breakdown_is_positive_and_every_device_waits_for_the_slowest_forward():
    task = tiny_task()
    cost = FbgemmBackend(timing=FAST).measure(task, Placement((0, 0, 1, 1)))
    assert cost.backend == "fbgemm" and cost.comm == "modeled"
    assert len(cost.devices) == 2
    for device in cost.devices:
        assert all(term > 0 for term in device.terms())
    # equal widths: the measured forward times feed the all-to-all model, so both devices
    # leave the forward exchange together, the faster one having waited the difference
    fwd_comp = np.array([d.fwd_comp for d in cost.devices])
    fwd_comm = np.array([d.fwd_comm for d in cost.devices])
    bwd_comm = np.array([d.bwd_comm for d in cost.devices])
    np.testing.assert_allclose(fwd_comp + fwd_comm, fwd_comp.max() + bwd_comm, rtol=1e-9)
    assert bwd_comm[0] == pytest.approx(bwd_comm[1], rel=1e-12)


def test_more_lookups_cost_more():
    light = tiny_task(pooling=(1.0,), devices=1)
    heavy = tiny_task(pooling=(128.0,), devices=1)
    backend = FbgemmBackend(timing=FAST)
    light_cost = backend.measure(light, Placement((0,))).overall
    heavy_cost = backend.measure(heavy, Placement((0,))).overall
    assert heavy_cost > 3 * light_cost  # 128x the lookups: far beyond any noise


def test_two_process_gloo_measures_communication():
    task = tiny_task()
    cost = FbgemmBackend(timing=FAST, launcher="torchrun").measure(task, Placement((0, 1, 0, 1)))
    assert cost.comm == "measured" and cost.info["process_group"] == "gloo"
    assert len(cost.devices) == 2
    for device in cost.devices:
        assert device.fwd_comp > 0 and device.bwd_comp > 0
        assert device.fwd_comm > 0 and device.bwd_comm > 0


def test_a_failing_kernel_is_retried_then_named():
    # EXACT_ADAM has no CPU kernel in fbgemm: building the fused kernel fails for real
    backend = FbgemmBackend(timing=TimingConfig(optimizer="ADAM", iterations=1))
    with pytest.raises(MeasurementError, match="device 0"):
        backend.measure(tiny_task(devices=1), Placement((0, 0, 0, 0)))


def test_illegal_placements_are_refused_before_any_kernel():
    backend = FbgemmBackend(timing=FAST)
    with pytest.raises(DreamshardError, match="outside"):
        backend.measure(tiny_task(), Placement((0, 0, 1, 2)))
    tight = PlacementTask(tiny_task().tables, 2, 2000 * 32 * 4 * 2, "fp32")
    with pytest.raises(DreamshardError, match="over its cap"):
        backend.measure(tight, Placement((0, 0, 0, 1)))


def test_a_placement_too_big_for_this_host_is_refused_with_the_figure():
    huge = (Table("huge", rows=2_000_000_000, dim=128, pooling_factor=1.0),)
    task = PlacementTask(huge, 1, 2**41, "fp16")
    with pytest.raises(DreamshardError, match=r"needs about [\d.]+ (GiB|TiB)"):
        FbgemmBackend(timing=FAST).measure(task, Placement((0,)))


def test_terms_are_in_dreamshard_order():
    cost = FbgemmBackend(timing=FAST).measure(tiny_task(devices=1), Placement((0, 0, 0, 0)))
    device = cost.devices[0]
    assert dict(zip(COST_TERMS, device.terms())) == {t: getattr(device, t) for t in COST_TERMS}
    assert cost.comm == "none" and device.fwd_comm == 0 == device.bwd_comm
    assert np.isfinite(cost.spread)
