"""Readable summaries of tables and suites for the terminal."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from dreamshard.placement.tasks import GIB
from dreamshard.tables.table import Table


def _quantiles(values: np.ndarray, fmt: str) -> str:
    q = np.percentile(values, [0, 50, 90, 100])
    return "min {} / median {} / p90 {} / max {}".format(*(format(v, fmt) for v in q))


def tables_summary(tables: Sequence[Table], source: str = "") -> str:
    rows = np.array([t.rows for t in tables], dtype=np.float64)
    pooling = np.array([t.pooling_factor for t in tables])
    fp16 = sum(t.bytes("fp16") for t in tables) / GIB
    fp32 = sum(t.bytes("fp32") for t in tables) / GIB
    dims = Counter(t.dim for t in tables)
    hist = np.mean([t.histogram for t in tables], axis=0)
    traces = Counter(t.trace.kind if t.trace else "from statistics" for t in tables)
    lines = [
        f"{len(tables)} tables" + (f" from {source}" if source else ""),
        f"  memory      {fp16:.3f} GiB in fp16, {fp32:.3f} GiB in fp32",
        f"  rows        {_quantiles(rows, ',.0f')}",
        "  dims        " + ", ".join(f"{d}: {n}" for d, n in sorted(dims.items())),
        f"  pooling     mean {pooling.mean():.2f}; {_quantiles(pooling, '.2f')}",
        "  histogram   mean fraction of unique rows accessed once, 2, 3-4, 5-8, ... times:",
        "              " + " ".join(f"{h:.3f}" for h in hist[:11]) + " ...",
        "  traces      " + ", ".join(f"{k}: {n}" for k, n in traces.items()),
    ]
    return "\n".join(lines)


def suite_summary(suite) -> str:
    spec = suite.spec
    lines = [
        f"suite {spec.name}: {spec.num_tables} tables on {spec.num_devices} devices, "
        f"profile {spec.profile}, pool {spec.pool_size} (seed {spec.pool_seed}) split in halves"
    ]
    for label, tasks in (("train", suite.train_tasks), ("test", suite.test_tasks)):
        caps = np.array([t.memory_cap_bytes for t in tasks]) / GIB
        fill = np.array(
            [t.table_bytes().sum() / (t.memory_cap_bytes * t.num_devices) for t in tasks]
        )
        lines.append(
            f"  {label:5s} {len(tasks)} tasks; cap per device {_quantiles(caps, '.3f')} GiB; "
            f"tables fill {fill.min():.0%}..{fill.max():.0%} of total memory"
        )
    return "\n".join(lines)
