"""TorchRec's own judge: our plans rated by TorchRec's EmbeddingPerfEstimator as its planner
rates its own."""

from __future__ import annotations

import pytest

pytest.importorskip("torchrec")

from dreamshard.errors import DreamshardError  # noqa: E402
from dreamshard.integrations.plan_reading import placement_from_sharding  # noqa: E402
from dreamshard.integrations.torchrec_judge import (  # noqa: E402
    torchrec_judge,
    torchrec_rank_perfs,
)
from dreamshard.integrations.torchrec_planner import (  # noqa: E402
    quiet_torchrec,
    torchrec_place,
    torchrec_request,
)
from dreamshard.placement.tasks import GIB, Placement, PlacementTask, is_legal  # noqa: E402
from dreamshard.tables.shards import Split  # noqa: E402
from dreamshard.tables.synthetic import generate_tables  # noqa: E402
from dreamshard.tables.table import Table  # noqa: E402

TASK = PlacementTask(tuple(generate_tables("dlrm", 24, 3)), 4, 8 * GIB)
# with one table hot enough that TorchRec's planner, kept from row-wise, cuts it column-wise
HOT_TASK = PlacementTask((*TASK.tables, Table("hot", 100_000, 128, 200.0)), 4, 8 * GIB)


def planner_plan(
    task: PlacementTask,
    split: str,
    topology: str | None,
    row_wise: bool = True,
    hardware=None,
    forced: dict | None = None,
):
    """TorchRec's planner's plan for the task (no reservation) as our placement, and the per-rank
    perf its planner computed for it (its best plan's shards' `Perf.total` summed per rank).
    `hardware`: a GPU hardware file for its `Topology`; `forced`: {table: sharding type}."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner
    from torchrec.distributed.planner.storage_reservations import (
        FixedPercentageStorageReservation,
    )

    request = torchrec_request(task, False, split, topology, hardware)
    for name, kind in (forced or {}).items():
        assert kind in request.constraints[name].sharding_types
        request.constraints[name].sharding_types = [kind]
    if not row_wise:
        for constraint in request.constraints.values():
            constraint.sharding_types = [k for k in constraint.sharding_types if k != "row_wise"]
    with quiet_torchrec():
        planner = EmbeddingShardingPlanner(
            topology=request.topology,
            batch_size=request.batch_size,
            constraints=request.constraints,
            storage_reservation=FixedPercentageStorageReservation(0.0),
            debug=False,
        )
        plan = planner.plan(request.module, [EmbeddingBagCollectionSharder()])
    perfs = [0.0] * task.num_devices
    for option in planner._best_plan:
        for shard in option.shards:
            perfs[shard.rank] += shard.perf.total
    return placement_from_sharding(task, plan.plan[""]), perfs


@pytest.mark.parametrize(
    "task, split, row_wise, topology, kinds",
    [
        (TASK, "none", True, None, set()),
        (TASK, "none", True, "network", set()),
        (TASK, "auto", True, None, {"row"}),
        (HOT_TASK, "auto", False, None, {"column", "replica"}),  # 2 small tables data-parallel
    ],
    ids=["table-wise", "table-wise-on-hosts", "row-wise", "column-wise-and-data-parallel"],
)
def test_torchrec_own_plans_are_rated_as_its_planner_rates_them(
    task, split, row_wise, topology, kinds
):
    placement, theirs = planner_plan(task, split, topology, row_wise)
    assert {s.kind for s in placement.splits} == kinds
    ours = torchrec_rank_perfs(task, placement, topology)
    assert ours == pytest.approx(theirs, rel=1e-6)
    assert torchrec_judge(task, placement, topology) == pytest.approx(max(theirs), rel=1e-6)
    if split == "none":  # the planner method gives the same plan
        assert torchrec_place(task, reserve=False, topology=topology) == placement


def test_the_estimator_judge_reports_what_torchrecs_planner_reported_on_8_hosts():
    """20 tables on 64 GPUs in 8 hosts of the h100-sxm file, two of them forced table-row-wise:
    `measure --backend torchrec-estimator`'s backend gives each rank the perf TorchRec's planner
    itself computed for its plan (its best plan's shards), each term in its place."""
    from dreamshard.costs.backends import make_backend
    from dreamshard.costs.hardware import load_hardware

    hardware = load_hardware("h100-sxm")
    tables = generate_tables("dlrm", 18, 5)
    tall = (Table("tall_a", 800_000, 64, 30.0), Table("tall_b", 4_000_000, 128, 12.0))
    task = PlacementTask((*tables, *tall), 64, int(hardware.value("memory_bytes")))
    forced = {"tall_a": "table_row_wise", "tall_b": "table_row_wise"}
    placement, theirs = planner_plan(task, "auto", None, True, hardware, forced)
    assert {s.kind for s in placement.splits} >= {"table_row"}
    judge = make_backend("torchrec-estimator", hardware="h100-sxm")
    cost = judge.measure(task, placement)
    assert [d.total for d in cost.devices] == pytest.approx(theirs, rel=1e-6)
    assert cost.overall == pytest.approx(max(theirs), rel=1e-6)
    assert cost.info["topology"] == hardware.topology_name()
    # the file's constants reached TorchRec: twice the backward multiplier, twice the backward
    doubled = make_backend("torchrec-estimator", hardware=hardware.at({"bwd_fwd_ratio": 6.0}))
    again = doubled.measure(task, placement)
    busy = [d for d, dev in enumerate(cost.devices) if dev.bwd_comp > 0]
    assert busy and all(
        again.devices[d].bwd_comp == pytest.approx(2 * cost.devices[d].bwd_comp) for d in busy
    )
    assert [d.fwd_comp for d in again.devices] == pytest.approx([d.fwd_comp for d in cost.devices])


def test_moving_the_heaviest_table_onto_the_slowest_rank_costs_more():
    placement = torchrec_place(TASK, reserve=False)
    perfs = torchrec_rank_perfs(TASK, placement)
    slowest = perfs.index(max(perfs))
    elsewhere = [i for i, d in enumerate(placement.devices) if d != slowest]
    heaviest = max(elsewhere, key=lambda i: TASK.tables[i].pooling_factor * TASK.tables[i].dim)
    source = placement.devices[heaviest]
    devices = list(placement.devices)
    devices[heaviest] = slowest
    moved = Placement(tuple(devices))
    assert is_legal(TASK, moved)
    after = torchrec_rank_perfs(TASK, moved)
    assert torchrec_judge(TASK, moved) > 1.05 * torchrec_judge(TASK, placement)
    assert after[source] < perfs[source]
    untouched = [d for d in range(TASK.num_devices) if d not in (source, slowest)]
    assert [after[d] for d in untouched] == pytest.approx([perfs[d] for d in untouched])


def test_a_larger_batch_costs_more():
    placement = torchrec_place(TASK, reserve=False)
    request = torchrec_request(TASK, reserve=False)
    assert torchrec_judge(TASK, placement) == torchrec_judge(
        TASK, placement, batch_size=request.batch_size
    )
    doubled = torchrec_judge(TASK, placement, batch_size=2 * request.batch_size)
    assert doubled > 1.5 * torchrec_judge(TASK, placement)


# "wide" in 2 column shards (fewer than the 4 our shard model allows on 4 devices), "tall"
# row-wise one shard a rank in rank order, "small" whole.
SPLIT_TASK = PlacementTask(
    (Table("wide", 3000, 64, 20.0), Table("tall", 8000, 16, 5.0), Table("small", 500, 8, 1.0)),
    4,
    GIB,
)
SPLITS = (Split("wide", "column", 2), Split("tall", "row", 4))


def test_a_split_plan_is_rated_on_every_rank_holding_a_shard():
    # wide[c0:32] wide[c32:64] tall[r0:2000] .. tall[r6000:8000] small
    placement = Placement((0, 2, 0, 1, 2, 3, 1), splits=SPLITS)
    assert is_legal(SPLIT_TASK, placement)
    perfs = torchrec_rank_perfs(SPLIT_TASK, placement)
    assert len(perfs) == 4 and all(p > 0 for p in perfs)
    # the half of "wide" moved from rank 2 to rank 3 moves its perf with it
    moved = torchrec_rank_perfs(SPLIT_TASK, Placement((0, 3, 0, 1, 2, 3, 1), splits=SPLITS))
    assert moved[2] < perfs[2] and moved[3] > perfs[3]
    assert moved[2] + moved[3] == pytest.approx(perfs[2] + perfs[3])
    assert moved[:2] == pytest.approx(perfs[:2])


@pytest.mark.parametrize(
    "splits, devices",
    [
        ((Split("tall", "row", 3),), (0, 1, 2, 3, 1)),  # three row shards on four ranks
        ((Split("tall", "row", 4),), (0, 1, 3, 2, 3, 1)),  # four, out of rank order
    ],
)
def test_a_row_layout_torchrec_cannot_express_is_refused(splits, devices):
    placement = Placement(devices, splits=splits)
    assert is_legal(SPLIT_TASK, placement)
    with pytest.raises(DreamshardError, match="table tall: its") as caught:
        torchrec_judge(SPLIT_TASK, placement)
    assert "\n" not in str(caught.value)
    assert "row-wise" in str(caught.value)
