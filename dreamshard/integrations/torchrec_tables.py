"""A TorchRec model's embedding tables as ours: shapes from its `EmbeddingBagCollection`s, access
statistics from sample batches (`KeyedJaggedTensor`s) or documented defaults.

Every `EmbeddingBagCollection` in the module counts, wherever it sits (`named_modules`). A table's
rows, dim and weight type come from its `EmbeddingBagConfig`; its pooling factor and 17-bin access
histogram from the batches' ids of its features:
- pooling factor: the table's lookups per sample, the mean bag length summed over its features
  (a table read by two features does both lookups in its kernel);
- histogram: of the unique ids of all its features in one batch, averaged over the batches.

Without batches a table gets `DEFAULT_POOLING_FACTOR` (TorchRec's own planner assumes the same)
and `DEFAULT_HISTOGRAM` (the public data set's locality statistics, `docs/tables.md`).
TorchRec is imported only when called (`make torchrec`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dreamshard.errors import DreamshardError
from dreamshard.integrations.torchrec_planner import require_torchrec
from dreamshard.tables.sources import save_tables
from dreamshard.tables.table import DEFAULT_HISTOGRAM, Table, access_histogram

DEFAULT_POOLING_FACTOR = 1.0  # torchrec.distributed.planner.constants.POOLING_FACTOR
PRECISIONS = {"FP32": "fp32", "FP16": "fp16"}  # TorchRec DataType -> the weight bytes we count


@dataclass(frozen=True)
class ModelTable:
    """One table of the model: ours, where it sits, and what TorchRec calls it."""

    table: Table  # its name is unique over the model (see `model_tables`)
    module_path: str  # the EmbeddingBagCollection's path in the model ("" for the model itself)
    config_name: str  # the table's name in that collection
    precision: str  # "fp32" or "fp16", from the config's data_type
    feature_pooling: tuple[float, ...]  # mean bag length of each of its features


def embedding_bag_collections(module) -> list[tuple[str, object]]:
    """(path, collection) of every EmbeddingBagCollection in `module`, in `named_modules` order."""
    require_torchrec()
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    return [
        (path, m) for path, m in module.named_modules() if isinstance(m, EmbeddingBagCollection)
    ]


def model_tables(module, batches=None) -> list[ModelTable]:
    """Every embedding table of `module` with its statistics (see the module's docstring).

    Table names are the configs' names when they are unique over the model; when two collections
    share one, every table is named `<module path>.<name>`. `batches` is a KeyedJaggedTensor or an
    iterable of them; None gives the defaults. DreamshardError for a model without tables, a
    weight type we do not count, or batches that carry none of a table's features.
    """
    collections = embedding_bag_collections(module)
    configs = [(path, c) for path, ebc in collections for c in ebc.embedding_bag_configs()]
    if not configs:
        kind = type(module).__name__
        raise DreamshardError(
            f"the model ({kind}) has no EmbeddingBagCollection with tables: nothing to place"
        )
    names = [c.name for _, c in configs]
    qualify = len(set(names)) < len(names)
    samples = feature_samples(batches)
    found = []
    for path, config in configs:
        name = f"{path}.{config.name}" if qualify else config.name
        precision = PRECISIONS.get(config.data_type.name)
        if precision is None:
            raise DreamshardError(
                f"table {name}: weight type {config.data_type.name} is not counted here; "
                f"use one of {', '.join(PRECISIONS)}"
            )
        pooling, histogram = table_statistics(name, config.feature_names, samples)
        table = Table(name, config.num_embeddings, config.embedding_dim, sum(pooling), histogram)
        found.append(ModelTable(table, path, config.name, precision, pooling))
    return found


def feature_samples(batches) -> list[dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Per batch, {feature name: (its bag lengths, its ids)}; [] without batches."""
    if batches is None:
        return []
    require_torchrec()
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    if isinstance(batches, KeyedJaggedTensor):
        batches = [batches]
    samples = []
    for n, batch in enumerate(batches):
        if not isinstance(batch, KeyedJaggedTensor):
            raise DreamshardError(
                f"sample batch {n} is a {type(batch).__name__}, not a KeyedJaggedTensor"
            )
        samples.append(
            {
                key: (jt.lengths().detach().cpu().numpy(), jt.values().detach().cpu().numpy())
                for key, jt in batch.to_dict().items()
            }
        )
    if not samples:
        raise DreamshardError("no sample batches were given (pass None for the defaults)")
    return samples


def table_statistics(
    name: str, features: list[str], samples: list[dict]
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(mean bag length per feature, access histogram) of one table; the defaults without
    samples."""
    if not samples:
        share = DEFAULT_POOLING_FACTOR / len(features)
        return tuple(share for _ in features), DEFAULT_HISTOGRAM
    missing = [f for f in features if not any(f in batch for batch in samples)]
    if missing:
        raise DreamshardError(
            f"table {name}: the sample batches carry no feature {missing[0]!r} "
            f"(its features: {', '.join(features)})"
        )
    pooling = tuple(
        float(np.concatenate([batch[f][0] for batch in samples if f in batch]).mean())
        for f in features
    )
    batch_ids = [np.concatenate([batch[f][1] for f in features if f in batch]) for batch in samples]
    histograms = [access_histogram(ids) for ids in batch_ids if ids.size]
    if not histograms:  # a batch without lookups says nothing about access counts
        raise DreamshardError(f"table {name}: the sample batches hold no lookups of its features")
    return pooling, tuple(float(x) for x in np.mean(histograms, axis=0))


def table_spec_from_torchrec(module, batches=None) -> list[Table]:
    """The model's embedding tables as ours (rows, dim, pooling factor, histogram)."""
    return [t.table for t in model_tables(module, batches)]


def write_table_spec(module, path: str | Path, batches=None) -> list[Table]:
    """Write the model's tables as a table file (JSON, or a CSV spec by the suffix) that
    `dreamshard place --tables`, the flows and the dashboard read; returns them."""
    found = model_tables(module, batches)
    source = {
        "kind": "torchrec",
        "model": type(module).__name__,
        "statistics": "sample batches" if batches is not None else "defaults",
        "tables": {t.table.name: f"{t.module_path}:{t.config_name}" for t in found},
    }
    tables = [t.table for t in found]
    save_tables(tables, path, source)
    return tables
