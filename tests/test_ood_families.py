"""The out-of-distribution families at cpu scale: the same draws, small enough to time here."""

import numpy as np

from benchmarks.parts.ood_families import FAMILIES, ood_tasks
from dreamshard.costs.fbgemm import host_bytes_needed
from dreamshard.tables.traces import DEFAULT_BATCH

GIB = 2**30


def test_cpu_scale_keeps_each_family_draw_and_fits_a_small_host():
    full, small = ood_tasks(seeds=range(3)), ood_tasks(seeds=range(3), scale="cpu")
    assert [t.name.removeprefix("cpu-") for t in small] == [t.name for t in full]
    for big, cpu in zip(full, small):
        assert cpu.precision == "fp32" and cpu.num_devices == big.num_devices
        for a, b in zip(big.tables, cpu.tables):  # the same table, fewer rows
            assert (a.dim, a.pooling_factor) == (b.dim, b.pooling_factor)
            assert b.rows <= a.rows
        rows = np.array([[a.rows, b.rows] for a, b in zip(big.tables, cpu.tables)])
        by_full = rows[np.argsort(rows[:, 0], kind="stable")]
        assert (np.diff(by_full[:, 1]) >= 0).all()  # larger at full scale, never smaller here
        # what fbgemm holds to measure a placement: a few GiB here, tens at full scale
        assert host_bytes_needed(cpu, DEFAULT_BATCH) < 4 * GIB
        assert cpu.memory_cap_bytes * cpu.num_devices >= sum(cpu.table_bytes())
    assert {t.name.split("/")[0] for t in small} == {f"cpu-{f}" for f in FAMILIES}
    assert max(host_bytes_needed(t, DEFAULT_BATCH) for t in full) > 16 * GIB
