"""Training examples for the cost network, read from the cost dataset."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from dreamshard.costs.dataset import CostDataset, record_costs, record_task
from dreamshard.learn.costnet import DEVICE_TERMS
from dreamshard.tables.features import FEATURE_NAMES, feature_matrix


@dataclass
class Example:
    """One measured placement as the cost network sees it."""

    features: np.ndarray  # [T, 21]
    devices: np.ndarray  # [T] device of each table
    num_devices: int
    device_targets: np.ndarray  # [D, 3] ms: fwd_comp, bwd_comm, bwd_comp
    overall: float  # ms
    task: str = ""
    method: str = ""

    def as_input(self) -> tuple[np.ndarray, np.ndarray, int]:
        return self.features, self.devices, self.num_devices


def load_examples(dataset: CostDataset, config: dict | None = None) -> list[Example]:
    """Every successful measurement (taken with backend settings `config`, when given)."""
    wanted = json.dumps(config, sort_keys=True) if config is not None else None
    examples = []
    for row in dataset.rows(status="ok"):
        if wanted is not None and row["config"] != wanted:
            continue
        task, placement = record_task(row)
        costs = record_costs(row)
        targets = np.array([[c[t] for t in DEVICE_TERMS] for c in costs], dtype=np.float32)
        examples.append(
            Example(
                feature_matrix(task.tables),
                np.array(placement.devices),
                task.num_devices,
                targets,
                float(row["overall"]),
                task.name,
                placement.method,
            )
        )
    return examples


def mask_features(examples: list[Example], removed: Sequence[str]) -> list[Example]:
    """The examples with the named feature columns (`FEATURE_NAMES`) zeroed: the feature study.

    A column that is zero in training and evaluation alike is a constant the encoder's first
    bias absorbs, so the network learns exactly as if the feature had been dropped.
    """
    unknown = sorted(set(removed) - set(FEATURE_NAMES))
    if unknown:
        raise ValueError(f"unknown feature {unknown[0]!r}; features: {', '.join(FEATURE_NAMES)}")
    keep = np.array([name not in removed for name in FEATURE_NAMES], dtype=np.float32)
    return [replace(e, features=e.features * keep) for e in examples]
