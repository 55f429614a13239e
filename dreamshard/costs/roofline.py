"""The GPU kernel model: a roofline of one fused TBE, priced with a hardware file's constants.

A device's fused embedding kernel (all its tables in one call) costs the per-call floor plus
the bytes it moves at the rate of the memory they come from:

    row      = max(dim x weight bytes, the file's fewest bytes a row read costs)
    unique   = rows the batch touches x row                  (first touch: from HBM)
    repeats  = (lookups - touched rows) x row                (a row read again)
    hit      = min(1, L2 size / unique)                      (the repeats the L2 still holds)
    hbm      = unique + (1 - hit) x repeats + indices (8 bytes a lookup) + output (4 x B x dims)
    fwd      = floor + hbm / (HBM spec x efficiency) + hit x repeats / L2 bandwidth
    bwd      = floor + backward/forward ratio x (fwd - floor)

The rows a batch touches come from each table's access histogram (`tables.traces.unique_rows`:
lookups over the mean access count), so a table whose lookups fall on a few hot rows reads
little from HBM; dims and pooling enter through the lookups and widths. A narrow row still
costs a whole memory transaction (`row_bytes_min`: a 32-byte sector at least; TorchRec's
estimator reads at least 32 dims a row and charges narrow rows a block penalty), so a dim-4
table with hundreds of lookups a sample is not nearly free. The L2 hit rate is a
group's, so it is the one term that does not add up table by table (like the CPU model's cache
overflow): fusing a cold table beside a hot one costs the hot one its L2. The floor is paid once
a fused call. Every number comes from a group's sums of `costs.simulated.table_quantities`, so
the same code prices a placement, thousands of search moves, and each device's terms.

What TorchRec's `EmbeddingPerfEstimator` prices differently (`torchrec-estimator` judge): no
per-call floor; every lookup read from HBM (no reuse, no L2); the spec bandwidth it is given,
with penalties for dims under 128; its backward multiplier times its whole forward; and each
table's cost summed on its rank (no fusion).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dreamshard.costs.hardware import Hardware
from dreamshard.costs.quantities import table_quantities
from dreamshard.tables.table import BYTES_PER_WEIGHT, Table

INDEX_BYTES = 8  # int64 indices (and their offsets' share is left out)
OUTPUT_BYTES = 4  # pooled embeddings written in fp32


@dataclass(frozen=True)
class RooflineModel:
    """The fused TBE's roofline under one hardware file (at its point: centre or a corner)."""

    hardware: Hardware

    def quantities(self, tables: Sequence[Table], batch_size: int, precision: str) -> np.ndarray:
        """[T, 6] each table's share of a group's sums (`table_quantities`), its lookup volume
        and touched rows counted in weights of at least `row_bytes_min` bytes a row: what
        `predict_sums` prices."""
        found = table_quantities(tables, batch_size)
        dims = found[:, 5]
        wide = np.maximum(dims, self.hardware.value("row_bytes_min") / BYTES_PER_WEIGHT[precision])
        scale = wide / np.maximum(dims, 1e-30)
        found[:, 2] *= scale
        found[:, 3] *= scale
        return found

    def byte_terms(self, sums: np.ndarray, precision: str) -> dict[str, np.ndarray]:
        """Each group's HBM and L2 bytes and whether it makes a call, from sums [N, 6] of
        `quantities`."""
        sums = np.atleast_2d(np.asarray(sums, dtype=np.float64))
        count, lookups, volume, touched, width = sums[:, :5].T
        weight = BYTES_PER_WEIGHT[precision]
        unique = weight * touched
        repeats = weight * np.maximum(volume - touched, 0.0)
        hit = np.minimum(1.0, self.hardware.value("l2_bytes") / np.maximum(unique, 1e-30))
        hbm = unique + (1.0 - hit) * repeats + INDEX_BYTES * lookups + OUTPUT_BYTES * width
        return {"calls": (count > 0).astype(np.float64), "hbm": hbm, "l2": hit * repeats}

    def forward_terms(self, sums: np.ndarray, precision: str) -> dict[str, np.ndarray]:
        """Each group's forward ms in three terms: the floor, HBM reads, L2 reads."""
        data = self.byte_terms(sums, precision)
        hw = self.hardware
        hbm_rate = hw.value("hbm_spec_gbps") * hw.value("hbm_efficiency") * 1e6  # bytes a ms
        return {
            "floor": data["calls"] * hw.value("call_floor_ms"),
            "hbm": data["hbm"] / hbm_rate,
            "l2": data["l2"] / (hw.value("l2_gbps") * 1e6),
        }

    def predict_sums(self, sums: np.ndarray, precision: str) -> tuple[np.ndarray, np.ndarray]:
        """(fwd ms, bwd ms) of each group, from its sums [N, 6] of `quantities`."""
        terms = self.forward_terms(sums, precision)
        stream = terms["hbm"] + terms["l2"]
        ratio = self.hardware.value("bwd_fwd_ratio")
        return terms["floor"] + stream, terms["floor"] + ratio * stream
