"""The `dmp` backend: real TorchRec training steps under torchrun (2 gloo ranks, tiny tables)."""

from dataclasses import replace

import numpy as np
import pytest

from dreamshard.costs.backends import describe_costs, make_backend
from dreamshard.errors import DreamshardError
from dreamshard.integrations.dmp_backend import DmpBackend, StepConfig, host_cores
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.tables.shards import Split
from dreamshard.tables.table import Table

pytest.importorskip("torchrec")

FAST = StepConfig(warmup=2, steps=4)
GIB = 2**30


def tiny_task(devices=2, cap=GIB):
    tables = tuple(
        Table(f"t{i}", rows=1000 * (i + 1), dim=8 * (1 + i % 2), pooling_factor=2.0 + i)
        for i in range(4)
    )
    return PlacementTask(tables, devices, cap, "fp32", "tiny")


def test_plans_train_under_dmp_in_interleaved_rounds():
    """Two plans, the second with t0 data-parallel (a replica on each rank, its gradients
    all-reduced by DMP): both train, in one launch."""
    task = tiny_task()
    replica = (Split("t0", "replica", 2),)  # shards t0[dp0], t0[dp1], t1, t2, t3
    plans = [Placement((0, 0, 1, 1), method="a"), Placement((0, 1, 1, 1, 0), "b", splits=replica)]
    run = DmpBackend(FAST).measure_plans(task, plans, rounds=2)
    assert run.process_group == "gloo"
    assert run.step_ms.shape == (2, 2, 2)  # ranks, rounds, plans
    assert np.all(run.step_ms > 0) and np.all(np.isfinite(run.step_ms))
    assert np.all(run.cpu_ms > 0) and np.all(np.isfinite(run.cpu_ms))
    assert run.sharding_types == [["table_wise"], ["data_parallel", "table_wise"]]
    for per_rank in run.losses:  # the same batch every step: training lowers its loss
        for first, last in per_rank:
            assert last < first
    cost = run.label(1, reference=0)
    assert cost.backend == "dmp" and cost.comm == "measured" and cost.info["terms"] == "step"
    assert len(cost.devices) == 2  # one record per rank: its median step over the rounds
    assert [d.fwd_comp for d in cost.devices] == pytest.approx(np.median(run.step_ms[:, :, 1], 1))
    assert cost.info["round_ms"] == pytest.approx(run.overall()[:, 1])
    ratios = run.overall()[:, 1] / run.overall()[:, 0]
    assert cost.info["paired_ratio"] == pytest.approx(np.median(ratios))
    on_cpu_clock = replace(run, clock="cpu").label(1)
    assert on_cpu_clock.overall == pytest.approx(np.median(run.cpu_ms[:, :, 1], 1).max())
    assert "paired_ratio" not in on_cpu_clock.info
    for device in cost.devices:  # the whole step in fwd_comp
        assert device.fwd_comp > 0 and device.fwd_comm == device.bwd_comm == device.bwd_comp == 0


def test_the_backend_by_name_measures_one_placement_beside_the_reference():
    backend = make_backend("dmp", iterations=3, rounds=2)
    assert backend.config()["steps"]["steps"] == 3 and backend.config()["rounds"] == 2
    assert "TorchRec training steps" in describe_costs(backend.config())
    cost = backend.measure(tiny_task(), Placement((1, 0, 0, 1)))
    assert cost.overall > 0 and len(cost.devices) == 2
    assert cost.info["finished"] >= cost.info["started"]
    assert len(cost.info["reference_ms"]) == len(cost.info["round_ms"]) == 2
    assert cost.info["paired_ratio"] > 0 and cost.info["paired_cv"] >= 0


def test_bad_placements_and_hosts_are_refused_before_any_process():
    with pytest.raises(DreamshardError, match="dmp backend only"):
        make_backend("fbgemm", rounds=3)
    backend = DmpBackend(FAST)
    with pytest.raises(DreamshardError, match="outside"):
        backend.measure(tiny_task(), Placement((0, 0, 1, 2)))
    tight = tiny_task(cap=4000 * 8 * 4)
    with pytest.raises(DreamshardError, match="over its cap"):
        backend.measure(tight, Placement((1, 1, 1, 0)))
    many = host_cores() + 1
    with pytest.raises(DreamshardError, match=f"{many} devices on {many - 1} CPU cores"):
        backend.measure(tiny_task(devices=many), Placement((0, 1, 0, 1)))
    with pytest.raises(DreamshardError, match="TorchRec plan"):
        backend.measure_plans(tiny_task(), [{"not": "a plan"}])
