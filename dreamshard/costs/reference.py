"""The reference group: a fixed fused kernel timed inside every fbgemm measurement.

Costs on a shared CPU drift 10-15% between runs (other processes, clock speed), so a raw
label from Monday and one from Tuesday are not comparable. The fbgemm backend therefore times
this group in the same round-robin as the placement's groups and records its time in the
measurement's info. A *normalised* cost is the raw one scaled by how much faster or slower the
reference ran than its nominal time: what the measurement would have been on a machine in the
reference's nominal state. How much closer two runs agree: docs/measurement.md (measured by
the retired measurement study; its script and report are in git history at commit ea3bb69).
"""

from __future__ import annotations

from dataclasses import replace

from dreamshard.costs.types import DeviceCost, PlacementCost
from dreamshard.errors import DreamshardError
from dreamshard.tables.synthetic import generate_tables
from dreamshard.tables.table import Table

# Twelve synthetic cpu-profile tables (seed 10), a typical device group of the cpu suites:
# 470-114,028 rows, dims 4-128, 50 MB of fp32 weights (beyond this CPU's 32 MiB last-level
# cache, as the groups are) and 290k lookups a batch. A smaller group that fits the cache
# (seed 1, 8 tables, 33 MB) slowed more than the groups under another process's memory
# traffic and over-corrected them by 5-10% (the retired measurement study); this one sits in
# the middle of the groups. It adds about 12 ms per timed iteration.
REFERENCE_SEED = 10
REFERENCE_TABLES = 12
# Bumped whenever the definition above changes, so records say which reference they used.
REFERENCE_VERSION = 1
# The reference's forward + backward milliseconds (median of the timed iterations) on this
# 2-core AMD EPYC host, fp32, EXACT_SGD, one thread: the median over many quiet measurements
# (the retired measurement study printed it). Normalised costs are in these milliseconds. Per
# device kind; a kind without one records the reference's time but has no normalised cost.
NOMINAL_MS = {"cpu": 12.0}
# The forward's share of the reference's time, for normalising each term by its own reference
# term ("per-term" labels): the median over 264 measurements on a 2-core Intel Xeon (0.37-0.38
# between the 10th and 90th percentile). Under another process's memory traffic the forward and
# backward slow by different amounts, which one factor cannot follow (the retired measurement
# study).
NOMINAL_FWD_SHARE = 0.37


def reference_tables() -> list[Table]:
    """The reference group's tables: the same every run, traces regenerated from the seed."""
    return generate_tables("cpu", REFERENCE_TABLES, seed=REFERENCE_SEED)


def reference_info(
    measured_ms: float,
    cv: float,
    kernel_ms: float,
    device_kind: str,
    terms_ms: tuple[float, float] | None = None,
) -> dict:
    """What a measurement records about its reference (goes into `PlacementCost.info`);
    `terms_ms`: its forward and backward medians apart, recorded for a per-term normalisation
    (docs/learning.md: one factor leaves the two terms' drift apart uncorrected)."""
    terms = (
        {} if terms_ms is None else dict(zip(("reference_fwd_ms", "reference_bwd_ms"), terms_ms))
    )
    return {
        **terms,
        "reference_ms": measured_ms,
        "reference_cv": cv,
        "reference_kernel_ms": kernel_ms,  # all its timed iterations: what it cost
        "reference_nominal_ms": NOMINAL_MS.get(device_kind),
        "reference_version": REFERENCE_VERSION,
    }


def normalisation_factor(info: dict) -> float | None:
    """nominal / measured reference time of a measurement, or None when it has none."""
    measured, nominal = info.get("reference_ms"), info.get("reference_nominal_ms")
    if not measured or not nominal:
        return None
    return nominal / measured


def term_factors(info: dict) -> tuple[float, float] | None:
    """(forward, backward) nominal / measured reference term, or None when a measurement did
    not record its reference's terms apart (records before 2026-12-02)."""
    nominal = info.get("reference_nominal_ms")
    fwd, bwd = info.get("reference_fwd_ms"), info.get("reference_bwd_ms")
    if not nominal or not fwd or not bwd:
        return None
    return nominal * NOMINAL_FWD_SHARE / fwd, nominal * (1 - NOMINAL_FWD_SHARE) / bwd


def normalised(cost: PlacementCost, per_term: bool = False) -> PlacementCost:
    """The cost as if the reference had run at its nominal time; `per_term`: the forward as if
    the reference's forward had, and the backward as if its backward had.

    Compute terms scale by the factor; a modeled all-to-all keeps its transfer time and scales
    only the wait for the slowest forward (fwd_comm - bwd_comm), which is compute. Measured
    communication has no reference (torchrun), so it cannot be normalised.
    """
    if per_term:
        factors = term_factors(cost.info)
    else:
        factor = normalisation_factor(cost.info)
        factors = None if factor is None else (factor, factor)
    if factors is None or cost.comm == "measured":
        raise DreamshardError(
            "this measurement has no reference time to normalise by (fbgemm in process records "
            "one, and its forward and backward apart since 2026-12-02; torchrun, the simulated "
            "backend and older records do not)"
        )
    fwd, bwd = factors
    devices = tuple(
        DeviceCost(
            d.fwd_comp * fwd,
            d.bwd_comm + (d.fwd_comm - d.bwd_comm) * fwd,
            d.bwd_comm,
            d.bwd_comp * bwd,
            d.cv,
        )
        for d in cost.devices
    )
    return replace(cost, devices=devices)
