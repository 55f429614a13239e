"""Out-of-distribution table families: what the shipped cost network is judged on, never fitted.

Generator code of its own, separate from the pre-training family (`learn/pretrain_data.py`,
independent ranges drawn independently) and from the data set's (`tables/synthetic.py`): these
families change the *shape* of the distribution, not only its range.

    correlated   rows and dims rise together: large tables are wide, small ones narrow
    bimodal      pooling either one-hot-like (1-2) or heavy (80-400), little between
    heavy-skew   access skew past the pre-training range (alpha 1.3-1.7): a few rows take
                 almost every lookup
    giants       a few enormous wide tables (2e7-1e8 rows) among many tiny ones (1e2-1e4)

Tasks (`ood_tasks`) are fixed by (family, seed): 50-400 tables on 4-32 devices, fp16, memory
capped as the suites' tasks are (`suites.capped_task`), tables known by statistics (the
simulated judge's batch size). The families and the seeds were fixed before the first run.

`scale="cpu"` makes the same draws small enough for fbgemm to time them on a CPU host (issue
28's real-kernel half): rows divided by CPU_ROW_SCALE (at least 100, at most the cpu profile's
1.25 M), fp32 weights as the cpu suites hold them, histograms at the same 2,048-bag batch. The
cpu profile divides its rows by 32, but its tables have 6,000 rows at the median; these
families' reach 1e8, and at 1/32 a 50-table task of `correlated` held 7.4 GiB of fp32 weights
and took 15 s a measurement here (the cpu suites: 2-8.5 s). At 1/256 each row is looked up
about 8 times as often per batch as at full scale: the families keep their shapes (correlated,
bimodal, skewed, giants among dwarfs), not their full-scale cache behaviour.
"""

from __future__ import annotations

import numpy as np

from dreamshard.errors import DreamshardError
from dreamshard.placement.suites import capped_task
from dreamshard.placement.tasks import PlacementTask
from dreamshard.tables.synthetic import expected_histogram, get_profile
from dreamshard.tables.table import Table
from dreamshard.tables.traces import DEFAULT_BATCH

# (tables, devices) of a family's tasks, cycled through by seed
SHAPES = ((50, 4), (100, 8), (200, 16), (400, 32), (120, 4), (300, 16), (80, 8))


def _correlated(rng: np.random.Generator) -> tuple[int, int, float, float]:
    level = rng.uniform(0.0, 1.0)  # one draw sets both: rows 1e3-5e7, dims 8-256
    rows = int(10 ** (3 + 4.7 * level + rng.normal(0, 0.2)))
    dim = int(2 ** np.clip(np.rint(3 + 5 * level + rng.normal(0, 0.5)), 3, 8))
    return rows, dim, float(np.exp(rng.uniform(0, np.log(60)))), float(rng.uniform(0.6, 1.1))


def _bimodal(rng: np.random.Generator) -> tuple[int, int, float, float]:
    rows = int(np.exp(rng.uniform(np.log(1e3), np.log(2e7))))
    dim = int(rng.choice((16, 32, 64, 128)))
    pooling = rng.uniform(1, 2) if rng.random() < 0.6 else rng.uniform(80, 400)
    return rows, dim, float(pooling), float(rng.uniform(0.5, 1.0))


def _heavy_skew(rng: np.random.Generator) -> tuple[int, int, float, float]:
    rows = int(np.exp(rng.uniform(np.log(1e5), np.log(5e7))))
    dim = int(rng.choice((8, 16, 32, 64, 128)))
    return rows, dim, float(np.exp(rng.uniform(np.log(5), np.log(100)))), rng.uniform(1.3, 1.7)


def _giants(rng: np.random.Generator) -> tuple[int, int, float, float]:
    if rng.random() < 0.05:
        rows, dim = int(np.exp(rng.uniform(np.log(2e7), np.log(1e8)))), int(rng.choice((128, 256)))
    else:
        rows, dim = int(np.exp(rng.uniform(np.log(1e2), np.log(1e4)))), int(rng.choice((8, 16, 32)))
    return rows, dim, float(np.exp(rng.uniform(0, np.log(50)))), float(rng.uniform(0.5, 1.1))


DRAWS = {
    "correlated": _correlated,
    "bimodal": _bimodal,
    "heavy-skew": _heavy_skew,
    "giants": _giants,
}
FAMILIES = tuple(DRAWS)  # in this order: a family's index seeds its tables


SCALES = ("dlrm", "cpu")  # the tables as drawn, or small enough to time on a CPU
CPU_ROW_SCALE = 256
PRECISION = {"dlrm": "fp16", "cpu": "fp32"}


def family_tables(
    family: str, count: int, seed: int, batch: int = DEFAULT_BATCH, scale: str = "dlrm"
) -> list[Table]:
    """`count` tables of `family` (histograms expected at `batch`); the same seed, the same.
    At `scale="cpu"` the same draws with rows scaled as the cpu profile scales them."""
    if family not in DRAWS:
        raise DreamshardError(f"unknown family {family!r}; choose one of {', '.join(FAMILIES)}")
    if scale not in SCALES:
        raise DreamshardError(f"unknown scale {scale!r}; choose one of {', '.join(SCALES)}")
    profile = get_profile("cpu")
    rng = np.random.default_rng([seed, FAMILIES.index(family), 28])
    tables = []
    for index in range(count):
        rows, dim, pooling, alpha = DRAWS[family](rng)
        if scale == "cpu":
            rows = min(rows // CPU_ROW_SCALE, profile.max_rows)
        rows = max(rows, 100)
        histogram = expected_histogram(rows, float(alpha), batch * pooling)[0]
        tables.append(Table(f"{family}-{index:04d}", rows, dim, pooling, histogram))
    return tables


def ood_task(family: str, seed: int, scale: str = "dlrm") -> PlacementTask:
    """Task `seed` of `family`: its shape from `SHAPES`, memory as the suites cap it."""
    count, devices = SHAPES[seed % len(SHAPES)]
    tables = family_tables(family, count, seed, scale=scale)
    name = f"{'cpu-' if scale == 'cpu' else ''}{family}/{count}x{devices}/seed {seed}"
    return capped_task(tables, devices, name, PRECISION[scale])


def ood_tasks(families=FAMILIES, seeds=range(12), scale: str = "dlrm") -> list[PlacementTask]:
    """The study's tasks: every family's seeds, in that order."""
    return [ood_task(family, seed, scale) for family in families for seed in seeds]
