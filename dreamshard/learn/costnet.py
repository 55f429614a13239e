"""The cost network: predicts a fused group's costs and a placement's overall cost.

A table encoder (21 -> 128 -> 32) maps each table's features to a vector; a device is the sum
of its tables' vectors, so any number of tables fits. Per-device heads read that sum and
predict fwd_comp, bwd_comm and bwd_comp (an empty device runs no kernel: zeros). The overall
cost is composed from them as a training step runs: the forward all-to-all waits for the
slowest forward, then every device exchanges and runs its backward, so

    overall = max_d fwd_comp + max_d (2 x bwd_comm + bwd_comp)

(the forward exchange moves the same bytes as the backward one). Any number of devices fits.
The paper reads the overall cost from a separate head over the element-wise max of the device
vectors; on exact costs that head ranked the placements the planner chooses among far worse
(Spearman 0.38-0.55 against 0.70-0.85 composed, docs/learning.md), so it is gone. Targets are
divided by `scale` (the median overall cost of the training data) so that one set of
hyperparameters works on any hardware; predictions come back in ms.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.tables.features import NUM_FEATURES, feature_matrix

DEVICE_TERMS = ("fwd_comp", "bwd_comm", "bwd_comp")  # fwd_comm depends on the other devices


def mlp(*sizes: int, last_relu: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


@dataclass
class PlacementBatch:
    """Several placements flattened: tables -> devices -> placements, by index."""

    features: torch.Tensor  # [tables, 21]
    table_device: torch.Tensor  # [tables] global device index
    device_placement: torch.Tensor  # [devices] placement index
    num_placements: int


def make_batch(items: list[tuple[np.ndarray, np.ndarray, int]]) -> PlacementBatch:
    """From (features [T, 21], device per table [T], number of devices) per placement."""
    features, table_device, device_placement, offset = [], [], [], 0
    for p, (feats, devices, num_devices) in enumerate(items):
        features.append(feats)
        table_device.append(np.asarray(devices) + offset)
        device_placement.append(np.full(num_devices, p))
        offset += num_devices
    return PlacementBatch(
        torch.from_numpy(np.concatenate(features)).float(),
        torch.from_numpy(np.concatenate(table_device)).long(),
        torch.from_numpy(np.concatenate(device_placement)).long(),
        len(items),
    )


def occupied(vectors: torch.Tensor) -> torch.Tensor:
    """[...] True for a device whose vector is not zero: it holds a table the encoder sees."""
    return vectors.abs().sum(dim=-1) > 0


def compose_overall(device_costs: torch.Tensor, occupied: torch.Tensor) -> torch.Tensor:
    """[...] overall costs from per-device costs [..., devices, 3] (fwd_comp, bwd_comm,
    bwd_comp); devices not `occupied` [..., devices] take no part in the maxima."""
    skip = torch.where(occupied, 0.0, float("-inf"))
    forward = (device_costs[..., 0] + skip).max(dim=-1).values
    rest = (2 * device_costs[..., 1] + device_costs[..., 2] + skip).max(dim=-1).values
    return forward + rest


class CostNet(nn.Module):
    def __init__(self, hidden: int = 128, embed: int = 32, head_hidden: int = 64):
        super().__init__()
        self.config = {"hidden": hidden, "embed": embed, "head_hidden": head_hidden}
        self.encoder = mlp(NUM_FEATURES, hidden, embed, last_relu=True)
        self.device_heads = nn.ModuleList(mlp(embed, head_hidden, 1) for _ in DEVICE_TERMS)
        self.register_buffer("scale", torch.tensor(1.0))

    def device_vectors(self, batch: PlacementBatch) -> torch.Tensor:
        """[devices, embed]: the sum of each device's table encodings (zeros when empty)."""
        encoded = self.encoder(batch.features)
        out = encoded.new_zeros(len(batch.device_placement), encoded.shape[1])
        return out.index_add(0, batch.table_device, encoded)

    def device_costs(self, vectors: torch.Tensor) -> torch.Tensor:
        """[..., 3] scaled per-device costs from device vectors [..., embed]; zeros for a device
        whose vector is zero (no tables, or only tables the encoder maps to nothing)."""
        costs = torch.cat([head(vectors) for head in self.device_heads], dim=-1)
        return costs * occupied(vectors)[..., None]

    def overall(self, vectors: torch.Tensor, device_placement: torch.Tensor, n: int):
        """[n] scaled overall costs of n placements from their device vectors [devices, embed]."""
        costs = self.device_costs(vectors)
        skip = torch.where(occupied(vectors), 0.0, float("-inf"))
        terms = torch.stack([costs[:, 0] + skip, 2 * costs[:, 1] + costs[:, 2] + skip], dim=1)
        pooled = terms.new_full((n, 2), float("-inf"))
        index = device_placement[:, None].expand_as(terms)
        return pooled.scatter_reduce(0, index, terms, reduce="amax").sum(dim=1)

    def forward(self, batch: PlacementBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Scaled (per-device costs [devices, 3], overall [placements])."""
        vectors = self.device_vectors(batch)
        overall = self.overall(vectors, batch.device_placement, batch.num_placements)
        return self.device_costs(vectors), overall

    @torch.no_grad()
    def predict_ms(self, task: PlacementTask, placement: Placement) -> tuple[np.ndarray, float]:
        """(per-device [fwd_comp, bwd_comm, bwd_comp] in ms, overall ms) for one placement."""
        batch = make_batch(
            [(feature_matrix(task.tables), np.array(placement.devices), task.num_devices)]
        )
        devices, overall = self(batch)
        return (devices * self.scale).numpy(), float(overall[0] * self.scale)
