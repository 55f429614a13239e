"""The public DLRM lookup data set (`fbgemm_t856_bs65536.pt[.gz]`): tables and their traces.

The file holds a tuple (indices, offsets, lengths): lengths is [T, B]; offsets is table-major
with T*B + 1 global positions into indices. A `.pt.gz` is read through gzip as a stream, never
unpacked to disk; a plain `.pt` is memory-mapped so a subset of tables touches only its part.
"""

from __future__ import annotations

import functools
import gzip
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from dreamshard.errors import DreamshardError
from dreamshard.tables.synthetic import DIMS
from dreamshard.tables.table import Table, TraceRef, table_from_trace


def _load(path: Path) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The file's tensors; kept for the last file read, so reading one table's trace after
    another does not decompress a multi-GB `.pt.gz` again each time."""
    path = path.resolve()
    return _load_cached(path, path.stat().st_mtime_ns if path.exists() else 0)


@functools.lru_cache(maxsize=1)
def _load_cached(path: Path, _mtime: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                data = torch.load(f, weights_only=True)
        else:
            data = torch.load(path, weights_only=True, mmap=True)
    except (OSError, RuntimeError, EOFError, ValueError) as exc:
        raise DreamshardError(f"cannot read data-set file {path}: {exc}") from None
    if not (isinstance(data, (tuple, list)) and len(data) == 3):
        raise DreamshardError(
            f"{path} is not a DLRM data-set file: expected (indices, offsets, lengths)"
        )
    indices, offsets, lengths = data
    if lengths.dim() != 2 or offsets.numel() != lengths.numel() + 1:
        raise DreamshardError(f"{path}: offsets and lengths disagree in shape")
    return indices, offsets, lengths


def _table_trace(indices, offsets, batch_size: int, t: int) -> tuple[np.ndarray, np.ndarray]:
    bag_offsets = offsets[t * batch_size : (t + 1) * batch_size + 1].numpy().astype(np.int64)
    table_indices = indices[int(bag_offsets[0]) : int(bag_offsets[-1])].numpy().astype(np.int64)
    return table_indices, bag_offsets - bag_offsets[0]


def load_dataset_tables(
    path: str | Path,
    table_ids: Sequence[int] | None = None,
    dim: int | None = 16,
    seed: int = 0,
) -> list[Table]:
    """Tables (named `d<id>`) with statistics computed from their lookups in the file.

    `dim=None` draws dims from {4, ..., 128} with `seed`; the file itself gives no dims.
    """
    path = Path(path)
    indices, offsets, lengths = _load(path)
    num_tables, batch_size = lengths.shape
    ids = list(range(num_tables)) if table_ids is None else list(table_ids)
    bad = [i for i in ids if not 0 <= i < num_tables]
    if bad:
        raise DreamshardError(f"table id {bad[0]} is outside 0..{num_tables - 1} in {path}")
    pick = random.Random(seed)
    tables = []
    for t in ids:
        table_indices, bag_offsets = _table_trace(indices, offsets, batch_size, t)
        table_dim = dim if dim is not None else pick.choice(DIMS)
        ref = TraceRef("dlrm", t, batch_size, path=str(path.resolve()))
        tables.append(
            table_from_trace(f"d{t:04d}", table_indices, bag_offsets, table_dim, trace=ref)
        )
    return tables


def read_dataset_trace(ref: TraceRef) -> tuple[np.ndarray, np.ndarray]:
    """A data-set table's (indices, offsets) for one batch, offsets starting at 0."""
    indices, offsets, lengths = _load(Path(ref.path))
    return _table_trace(indices, offsets, lengths.shape[1], ref.index)
