"""Split placements on the real fbgemm kernels: each device's fused kernel gets its shards'
shapes and sliced traces, row-wise partial sums travel at full width and say so, and the
records (and the calibration that reads them) keep the shards."""

import numpy as np

from dreamshard.costs.calibrate import measured_groups
from dreamshard.costs.comm import get_topology, transfer_ms
from dreamshard.costs.dataset import CostDataset, record_task
from dreamshard.costs.fbgemm import FbgemmBackend, device_groups
from dreamshard.costs.simulated import group_features
from dreamshard.costs.tbe import TimingConfig
from dreamshard.placement.tasks import Placement, PlacementTask, placement_task
from dreamshard.tables.shards import Split
from dreamshard.tables.synthetic import generate_tables
from dreamshard.tables.traces import trace_for

FAST = TimingConfig(warmup=1, iterations=5)
GIB = 2**30
BATCH = 2048  # the cpu profile's batch: the tables' traces are read, not synthesized

# Small traced tables of the cpu profile: t0006 (38915 x 64, 31 lookups a sample) is the one
# split; t0002 (x32), t0005 (x64) and t0001 (x16) stay whole.
TABLES = {t.name: t for t in generate_tables("cpu", 7, 3)}
TASK = PlacementTask(
    tuple(TABLES[n] for n in ("t0006", "t0002", "t0005", "t0001")), 2, GIB, "fp32", "shards"
)
# shards of t0006 first, then t0002, t0005, t0001: half of t0006 with t0002 on device 0, the
# other half with t0005 and t0001 on device 1
COLUMN = Placement((0, 1, 0, 1, 1), "test", splits=(Split("t0006", "column", 2),))
ROW = Placement((0, 1, 0, 1, 1), "test", splits=(Split("t0006", "row", 2),))
WHOLE = Placement((0, 0, 1, 1), "test")  # t0006 and t0002 on device 0


def segments(group):
    """Per table of a kernel's input: its (indices, bag lengths)."""
    bags = len(group.offsets) - 1
    batch = bags // len(group.rows)
    out = []
    for k in range(len(group.rows)):
        offsets = group.offsets[k * batch : (k + 1) * batch + 1]
        out.append((group.indices[offsets[0] : offsets[-1]], np.diff(offsets)))
    return out


def test_column_shards_are_kernel_tables_of_their_width_reading_all_their_tables_lookups():
    groups = device_groups(TASK, COLUMN, BATCH)
    assert [g.dims for g in groups] == [[32, 32], [32, 64, 16]]
    assert [g.rows for g in groups] == [[38915, 9065], [38915, 7936, 6450]]
    whole_indices, whole_offsets = trace_for(TABLES["t0006"], BATCH)
    for group in groups:
        indices, lengths = segments(group)[0]  # the shard of t0006
        np.testing.assert_array_equal(indices, whole_indices)
        np.testing.assert_array_equal(lengths, np.diff(whole_offsets))


def test_row_shards_partition_their_tables_lookups_bag_by_bag():
    shards = [t for t in placement_task(TASK, ROW).tables if t.shard is not None]
    groups = device_groups(TASK, ROW, BATCH)
    assert [g.dims[0] for g in groups] == [64, 64]  # a row shard keeps its table's width
    assert [g.rows[0] for g in groups] == [s.rows for s in shards] and sum(
        s.rows for s in shards
    ) == TABLES["t0006"].rows
    whole_indices, whole_offsets = trace_for(TABLES["t0006"], BATCH)
    parts = [segments(g)[0] for g in groups]
    for (indices, _), shard in zip(parts, shards):
        assert indices.size > 0 and indices.min() >= 0 and indices.max() < shard.rows
    # every lookup lands in exactly one shard, in the same bag, at its row less the shard's start
    restored = np.concatenate([idx + s.shard.start for (idx, _), s in zip(parts, shards)])
    np.testing.assert_array_equal(np.sort(restored), np.sort(whole_indices))
    np.testing.assert_array_equal(parts[0][1] + parts[1][1], np.diff(whole_offsets))


def test_split_placements_measure_with_row_partials_at_full_width_and_labelled(tmp_path):
    backend = FbgemmBackend(timing=FAST)
    costs = {name: backend.measure(TASK, p) for name, p in (("column", COLUMN), ("row", ROW))}
    whole = backend.measure(TASK, WHOLE)
    for cost in (*costs.values(), whole):
        assert cost.comm == "modeled" and len(cost.devices) == 2
        assert all(term > 0 for d in cost.devices for term in d.terms())
    # the exchange is modeled: deterministic. Column-wise: widths 64 | 112, as whole t0006 and
    # t0002 on device 0 and the rest on 1 would give 96 | 80: each shard sends its own width.
    topology, batch = get_topology("cpu-gloo"), costs["column"].info["batch"]
    column_comm = [d.bwd_comm for d in costs["column"].devices]
    np.testing.assert_allclose(column_comm, transfer_ms(np.array([64, 112]), batch, topology))
    assert "row_partials" not in costs["column"].info and "row_partials" not in whole.info
    # row-wise: each shard's partial sums travel at the table's full width, 96 | 144 in all
    # (the reduce-scatter's volume), more than the whole table sends from one device
    row_comm = [d.bwd_comm for d in costs["row"].devices]
    np.testing.assert_allclose(row_comm, transfer_ms(np.array([96, 144]), batch, topology))
    assert sum(row_comm) > sum(d.bwd_comm for d in whole.devices)
    assert costs["row"].info["row_partials"].startswith("row-wise partial sums: reduce-scatter")
    assert "modeled" in costs["row"].info["row_partials"]

    # the records keep the shards, and the calibration reads their groups as any other
    dataset = CostDataset(tmp_path / "costs.sqlite")
    for name, placement in (("column", COLUMN), ("row", ROW)):
        dataset.append(name, TASK, placement, costs[name], backend.config())
    features, fwd, bwd, ids, with_shards = measured_groups(dataset)
    assert len(features) == 4 and (fwd > 0).all() and (bwd > 0).all() and with_shards.all()
    for row, placement in zip(dataset.rows(), (COLUMN, ROW)):
        task, stored = record_task(row)
        assert task.tables == placement_task(TASK, placement).tables
        assert stored.devices == placement.devices and not stored.splits
        assert [t.name for t in task.tables if t.shard] == [
            t.name for t in placement_task(TASK, placement).tables if t.shard
        ]
    shards = placement_task(TASK, ROW).tables
    on_device_0 = [shards[i] for i, d in enumerate(ROW.devices) if d == 0]
    np.testing.assert_allclose(features[2], group_features(on_device_0, BATCH))


def test_torchrun_ranks_run_the_shards_kernels():
    # t0006 row-wise and t0005 column-wise: [t0006[r..], t0006[r..], t0002, t0005[c..] x2, t0001]
    splits = (Split("t0006", "row", 2), Split("t0005", "column", 2))
    placement = Placement((0, 1, 0, 0, 1, 1), "test", splits=splits)
    cost = FbgemmBackend(timing=FAST, launcher="torchrun").measure(TASK, placement)
    assert cost.comm == "measured" and cost.info["process_group"] == "gloo"
    groups = device_groups(TASK, placement, BATCH)
    assert [g.dims for g in groups] == [[64, 32, 32], [64, 32, 16]]
    kernels = cost.info["kernels"]  # what each rank's program built from the job's records
    assert [k["dims"] for k in kernels] == [g.dims for g in groups]
    assert [k["rows"] for k in kernels] == [g.rows for g in groups]
    assert [k["lookups"] for k in kernels] == [len(g.indices) for g in groups]
    assert all(d.fwd_comp > 0 and d.bwd_comm > 0 for d in cost.devices)
    assert "timed as the all-to-all" in cost.info["row_partials"]
