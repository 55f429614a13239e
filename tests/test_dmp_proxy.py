"""The modeled DMP step terms (`benchmarks/parts/dmp_proxy.py`) on the shards of real plans."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.parts.dmp_proxy import DmpStepModel, fit_step_model, step_terms
from dreamshard.costs.comm import get_topology, transfer_ms
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.tables.shards import Split
from tests.conftest import table

GLOO = get_topology("cpu-gloo")
BATCH = 2048


def task_of(tables, devices: int = 4) -> PlacementTask:
    return PlacementTask(tuple(tables), devices, 1 << 40, "fp32")


def four_tables(hot_pooling: float = 40.0):
    return [
        table("hot", rows=5000, dim=32, pooling=hot_pooling),
        table("a", dim=16),
        table("b", dim=16),
        table("c", dim=16),
    ]


def test_column_split_sends_the_tables_ids_to_the_second_shards_rank_too():
    task = task_of(four_tables())
    whole = step_terms(task, Placement((0, 1, 2, 3)), BATCH, GLOO)
    # hot cut in two column shards: shard 0 stays on rank 0, shard 1 goes to rank 2
    split = Placement((0, 2, 1, 2, 3), splits=(Split("hot", "column", 2),))
    cut = step_terms(task, split, BATCH, GLOO)
    assert cut.ids_ms[2] > whole.ids_ms[2] + 0.1  # rank 2 now receives hot's ids as well
    assert cut.ids_ms[0] >= whole.ids_ms[0]  # rank 0 still receives them all
    assert (whole.groups, whole.column_shards) == (1, 0)
    assert (cut.groups, cut.column_shards) == (2, 1)  # a column-wise group beside table-wise
    # the pooled bytes do not grow (each shard returns its half of the columns), so what the
    # kernel-and-pooled proxy sees cannot tell the split's extra input traffic
    assert cut.pooled_ms.sum() == pytest.approx(
        whole.pooled_ms.sum() + 2 * transfer_ms(np.zeros(4), BATCH, GLOO).sum(), rel=0.05
    )


def test_moving_a_heavy_table_moves_its_input_traffic_with_it():
    task = task_of(four_tables())
    on_0 = step_terms(task, Placement((0, 1, 2, 3)), BATCH, GLOO)
    on_3 = step_terms(task, Placement((3, 1, 2, 0)), BATCH, GLOO)
    assert on_0.ids_ms[0] > on_0.ids_ms[3] + 0.1
    assert on_3.ids_ms[3] > on_3.ids_ms[0] + 0.1
    assert on_0.ids_ms[0] == pytest.approx(on_3.ids_ms[3])
    # more lookups per bag: more ids to send
    heavier = step_terms(task_of(four_tables(80.0)), Placement((0, 1, 2, 3)), BATCH, GLOO)
    assert heavier.ids_ms[0] > on_0.ids_ms[0]


def test_row_wise_tables_add_partial_sums_and_bucketized_ids():
    tables = four_tables()
    task = task_of(tables, devices=2)
    whole = step_terms(task, Placement((0, 1, 0, 1)), BATCH, GLOO)
    rows = Placement((0, 1, 1, 0, 1), splits=(Split("hot", "row", 2),))
    cut = step_terms(task, rows, BATCH, GLOO)
    assert whole.row_ms.max() == 0.0 and whole.row_ids == 0.0
    assert (cut.row_ms > 0).all() and cut.groups == 2
    assert cut.row_ids == pytest.approx(BATCH / 2 * tables[0].pooling_factor, rel=0.05)
    wide = [table("hot", rows=5000, dim=128, pooling=40.0), *tables[1:]]
    wider = step_terms(task_of(wide, devices=2), rows, BATCH, GLOO)
    assert (wider.row_ms > cut.row_ms).all()  # partial sums are [batch, dim]


def test_the_fit_recovers_the_constants_of_steps_it_could_explain():
    truth = DmpStepModel(
        kernel_scale=0.7, base_ms=9.0, group_ms=1.5, column_shard_ms=0.3, row_id_us=0.02
    )
    tables = four_tables()
    task = task_of(tables, devices=2)
    plans = [
        Placement((0, 1, 0, 1)),
        Placement((0, 0, 1, 1)),
        Placement((1, 0, 0, 0)),
        Placement((0, 1, 1, 0, 1), splits=(Split("hot", "column", 2),)),
        Placement((0, 1, 1, 0, 1), splits=(Split("hot", "row", 2),)),
        Placement((0, 1, 0, 1, 1, 0), splits=(Split("hot", "row", 2), Split("a", "column", 2))),
        Placement((0, 1, 1, 0, 1, 0), splits=(Split("hot", "column", 2), Split("a", "column", 2))),
    ]  # the calibration's design: 1 and 2 column-split tables tell a group from a shard
    terms = [step_terms(task, p, BATCH, GLOO) for p in plans]
    rng = np.random.default_rng(0)
    kernels = [rng.uniform(3.0, 12.0, 2) for _ in plans]
    steps = [truth.estimate(k, t) for k, t in zip(kernels, terms)]
    model, fit = fit_step_model(kernels, terms, steps)
    assert fit["rmse_ms"] < 0.05
    assert model.kernel_scale == pytest.approx(0.7, abs=0.011)
    assert model.base_ms == pytest.approx(9.0, abs=0.2)
    assert model.group_ms == pytest.approx(1.5, abs=0.2)
    assert model.column_shard_ms == pytest.approx(0.3, abs=0.1)
