"""The reference group timed inside every fbgemm measurement, and labels normalised by it."""

import json
from dataclasses import replace

import numpy as np
import pytest

from dreamshard.costs.dataset import CostDataset, hardware, measurement_key
from dreamshard.costs.fanout import BackendSpec
from dreamshard.costs.fbgemm import FbgemmBackend
from dreamshard.costs.reference import NOMINAL_MS, normalised, reference_tables, term_factors
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.costs.tbe import TimingConfig
from dreamshard.errors import DreamshardError
from dreamshard.learn.costnet import DEVICE_TERMS
from dreamshard.learn.costnet_data import load_examples
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.tables.table import Table
from dreamshard.tables.traces import concat_traces

FAST = TimingConfig(warmup=1, iterations=3, device="cpu")  # the nominal is the CPU's


def tiny_task(devices=2):
    tables = tuple(Table(f"t{i}", rows=2000, dim=32, pooling_factor=4.0) for i in range(4))
    return PlacementTask(tables, devices, 2**30, "fp32", "tiny")


def test_the_reference_group_is_the_same_every_time():
    first, second = reference_tables(), reference_tables()
    assert first == second and len(first) >= 4
    a, b = concat_traces(first, 2048), concat_traces(second, 2048)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert len({t.rows for t in first}) > 1 and len({t.dim for t in first}) > 1  # a mixed group


def test_every_in_process_measurement_records_its_reference():
    backend = FbgemmBackend(timing=FAST)
    cost = backend.measure(tiny_task(), Placement((0, 0, 1, 1)))
    assert cost.info["reference_ms"] > 0
    assert cost.info["reference_nominal_ms"] == NOMINAL_MS["cpu"] > 0
    terms = cost.info["reference_fwd_ms"], cost.info["reference_bwd_ms"]
    assert min(terms) > 0 and sum(terms) == pytest.approx(cost.info["reference_ms"])
    # the reference leaves what a measurement means, and so its dataset key, alone
    assert backend.config() == FbgemmBackend(timing=FAST, reference=False).config()


def test_normalising_scales_compute_and_keeps_every_device_waiting_for_the_slowest():
    cost = FbgemmBackend(timing=FAST).measure(tiny_task(), Placement((0, 0, 0, 1)))
    # the same measurement, as if the reference had run twice as long: the machine was slow
    slow = replace(cost, info={**cost.info, "reference_ms": 2 * cost.info["reference_ms"]})
    base, halved = normalised(cost), normalised(slow)
    for b, h, raw in zip(base.devices, halved.devices, cost.devices):
        assert h.fwd_comp == pytest.approx(b.fwd_comp / 2)
        assert h.bwd_comp == pytest.approx(b.bwd_comp / 2)
        assert h.bwd_comm == b.bwd_comm == raw.bwd_comm  # the modeled transfer is no compute
    for devices in (base.devices, halved.devices):
        done = [d.fwd_comp + d.fwd_comm - d.bwd_comm for d in devices]
        assert max(done) == pytest.approx(min(done))  # the forward all-to-all waits for all
    assert halved.overall < base.overall


def test_per_term_normalising_follows_each_term_of_the_reference():
    """A measurement whose reference's backward ran twice as long (memory traffic slows the
    backward more): per term only the backward halves; one factor halves neither term fully."""
    cost = FbgemmBackend(timing=FAST).measure(tiny_task(), Placement((0, 0, 0, 1)))
    info = cost.info
    slow_bwd = {
        **info,
        "reference_bwd_ms": 2 * info["reference_bwd_ms"],
        "reference_ms": info["reference_fwd_ms"] + 2 * info["reference_bwd_ms"],
    }
    base = normalised(cost, per_term=True)
    slow = normalised(replace(cost, info=slow_bwd), per_term=True)
    one = normalised(replace(cost, info=slow_bwd))
    for b, s, o in zip(base.devices, slow.devices, one.devices):
        assert s.fwd_comp == pytest.approx(b.fwd_comp)
        assert s.bwd_comp == pytest.approx(b.bwd_comp / 2)
        assert s.bwd_comp < o.bwd_comp and o.fwd_comp < s.fwd_comp
    done = [d.fwd_comp + d.fwd_comm - d.bwd_comm for d in slow.devices]
    assert max(done) == pytest.approx(min(done))
    # a record from before the terms were kept apart has no per-term label
    older = {k: v for k, v in info.items() if k not in ("reference_fwd_ms", "reference_bwd_ms")}
    normalised(replace(cost, info=older))
    with pytest.raises(DreamshardError, match="no reference"):
        normalised(replace(cost, info=older), per_term=True)


def test_a_measurement_without_a_reference_cannot_be_normalised():
    task, placement = tiny_task(), Placement((0, 1, 0, 1))
    plain = FbgemmBackend(timing=FAST, reference=False).measure(task, placement)
    assert "reference_ms" not in plain.info
    for cost in (plain, SimulatedBackend().measure(task, placement)):
        with pytest.raises(DreamshardError, match="no reference"):
            normalised(cost)


def test_an_evaluation_measures_without_the_reference_under_the_same_key():
    # the evaluate flow's spec: its rounds are compared within the run, so no reference group
    spec = BackendSpec("fbgemm", iterations=3, reference=False)
    backend = spec.build()
    cost = backend.measure(tiny_task(), Placement((0, 1, 0, 1)))
    assert "reference_ms" not in cost.info and cost.overall > 0
    assert backend.config() == BackendSpec("fbgemm", iterations=3).build().config()
    assert BackendSpec("simulated", reference=False).build().name == "simulated"


def test_timing_gives_the_process_its_torch_threads_back():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)  # FAST times on one thread; a cost network fitted next needs its own
    try:
        FbgemmBackend(timing=FAST).measure(tiny_task(), Placement((0, 0, 1, 1)))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_normalised_labels_come_from_the_stored_reference(tmp_path):
    task, placement = tiny_task(), Placement((0, 0, 1, 1))
    dataset = CostDataset(tmp_path / "costs.sqlite")
    backends = (FbgemmBackend(timing=FAST), FbgemmBackend(timing=FAST, reference=False))
    for round_, backend in enumerate(backends):
        cost = backend.measure(task, placement)
        key = measurement_key(task, placement, backend.config(), round_, hardware())
        dataset.append(key, task, placement, cost, backend.config(), round_=round_)
    raw = load_examples(dataset)
    (norm,) = load_examples(dataset, labels="normalised")  # the unreferenced one is left out
    assert len(raw) == 2
    info = json.loads(dataset.rows()[0]["info"])
    factor = info["reference_nominal_ms"] / info["reference_ms"]
    compute = [DEVICE_TERMS.index("fwd_comp"), DEVICE_TERMS.index("bwd_comp")]
    np.testing.assert_allclose(
        norm.device_targets[:, compute], raw[0].device_targets[:, compute] * factor, rtol=1e-5
    )
    assert norm.overall != raw[0].overall
    (terms,) = load_examples(dataset, labels="per-term")
    fwd, bwd = term_factors(info)
    np.testing.assert_allclose(
        terms.device_targets[:, compute], raw[0].device_targets[:, compute] * [fwd, bwd], rtol=1e-5
    )
    with pytest.raises(ValueError, match="unknown labels"):
        load_examples(dataset, labels="scaled")
