"""The cost network: predicts a fused group's costs and a placement's overall cost.

A table encoder (21 -> 128 -> 32) maps each table's features to a vector; a device is the sum
of its tables' vectors, so any number of tables fits. Per-device heads read that sum and
predict fwd_comp, bwd_comm and bwd_comp (an empty device runs no kernel: zeros). The overall
cost is composed from them as a training step runs: the forward all-to-all waits for the
slowest forward, then every device exchanges and runs its backward, so

    overall = max_d fwd_comp + max_d (2 x bwd_comm + bwd_comp)

(the forward exchange moves the same bytes as the backward one). Any number of devices fits.

Where the backend models the all-to-all (`comm` set: its topology and batch size), the
network's bwd_comm head is not used for the overall: the all-to-all time comes from the same
topology model (`costs.comm`), which depends on every device's width and on the device count,
things a device's own vector cannot know. The network then predicts compute, which does not
change with the device count, and zero-shot tasks on more devices keep exact communication.
Where communication is measured (torchrun), `comm` is None and the head predicts it.
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

from dreamshard.costs.comm import exchange_many, get_topology
from dreamshard.costs.quantities import quantities_of
from dreamshard.costs.simulated import GROUP_FEATURES, SimulatedModel, features_of_sums
from dreamshard.learn.train_config import COSTNET_ENCODERS
from dreamshard.placement.tasks import Placement, PlacementTask, shard_view
from dreamshard.tables.features import NUM_FEATURES, feature_matrix, raw_features
from dreamshard.tables.traces import DEFAULT_BATCH, table_batch_size

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
    device_comm: torch.Tensor | None = None  # [devices] modeled all-to-all ms, when known
    table_batch: np.ndarray | None = None  # [tables] each table's batch size (None: the net's)


def make_batch(
    items: list[tuple[np.ndarray, np.ndarray, int]],
    device_comm: np.ndarray | None = None,
    batches: list[int | None] | None = None,
) -> PlacementBatch:
    """From (features [T, 21], device per table [T], number of devices) per placement, and
    optionally every device's modeled all-to-all time in ms (devices in the same order) and
    each placement's batch size (None: the network's own)."""
    features, table_device, device_placement, offset = [], [], [], 0
    for p, (feats, devices, num_devices) in enumerate(items):
        features.append(feats)
        table_device.append(np.asarray(devices) + offset)
        device_placement.append(np.full(num_devices, p))
        offset += num_devices
    table_batch = None
    if batches is not None and any(b is not None for b in batches):
        table_batch = np.concatenate(
            [np.full(len(f), np.nan if b is None else b) for f, b in zip(features, batches)]
        )
    return PlacementBatch(
        torch.from_numpy(np.concatenate(features)).float(),
        torch.from_numpy(np.concatenate(table_device)).long(),
        torch.from_numpy(np.concatenate(device_placement)).long(),
        len(items),
        None if device_comm is None else torch.as_tensor(device_comm, dtype=torch.float32),
        table_batch,
    )


def occupied(vectors: torch.Tensor) -> torch.Tensor:
    """[...] True for a device whose vector is not zero: it holds a table the encoder sees."""
    return vectors.abs().sum(dim=-1) > 0


def compose_overall(
    device_costs: torch.Tensor, occupied: torch.Tensor, comm: torch.Tensor | None = None
) -> torch.Tensor:
    """[...] overall costs from per-device costs [..., devices, 3] (fwd_comp, bwd_comm,
    bwd_comp); devices not `occupied` [..., devices] take no part in the maxima.

    With `comm` [..., devices] (the modeled all-to-all, same scale) in place of the bwd_comm
    head, every device takes part in the backward term: an empty device still exchanges.
    """
    skip = torch.where(occupied, 0.0, float("-inf"))
    forward = (device_costs[..., 0] + skip).max(dim=-1).values
    if comm is None:
        rest = 2 * device_costs[..., 1] + device_costs[..., 2] + skip
    else:
        rest = 2 * comm + device_costs[..., 2] * occupied
    return forward + rest.max(dim=-1).values


class Exp(nn.Module):
    """exp(x), kept finite: the table encoder's output layer in the "exp" design."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x.clamp(max=EXP_CLAMP))


EXP_CLAMP = 30.0


class HybridEncoder(nn.Module):
    """The "hybrid" design's table encoder: the "exp" encoding, followed by the table's additive
    share of the analytic model's group features (`costs.simulated.table_quantities`, at the
    training batch size), read back from its 21 features. A device's sum then holds both, and
    `CostNet.device_costs` turns the second part into the analytic model's prediction."""

    def __init__(self, hidden: int, embed: int, batch: int):
        super().__init__()
        self.learned = nn.Sequential(mlp(NUM_FEATURES, hidden, hidden, embed), Exp())
        self.batch = batch

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        quantities = torch.from_numpy(kernel_quantities(features, self.batch))
        return torch.cat([self.learned(features), quantities.to(features.dtype)], dim=-1)


def kernel_quantities(features: torch.Tensor, batch) -> np.ndarray:
    """[T, 6] float64: the tables' `quantities_of` at `batch` (a number, or [T] per table),
    read back from their features."""
    return quantities_of(*raw_features(features.detach().numpy()), batch)


QUANTITY_UNITS = (1.0, 8.0, 128.0, 32.0, 16.0, 16.0)  # x batch (but the first and last)


def quantity_units(batch: int) -> np.ndarray:
    """Units of `quantities_of`'s columns (count, lookups, lookup volume, touched row bytes / 4,
    output width, dim) that put a typical table's share near 1 at this batch size."""
    units = np.array(QUANTITY_UNITS) * batch
    units[0], units[-1] = QUANTITY_UNITS[0], QUANTITY_UNITS[-1]
    return units


class QuantityEncoder(nn.Module):
    """The "quantities" design's table encoder: the "exp" encoding of the table's 21 features
    and the logs of its kernel quantities, followed by the quantities themselves in fixed
    units (`quantity_units`), so a device's sum holds its lookups, lookup volume, touched rows
    and output width, and `CostNet.quantity_weight` can weigh them. Nothing of the analytic
    model's weights is in it: what a quantity costs is learned from the data."""

    def __init__(self, hidden: int, embed: int, batch: int, log_scale: float = 1.0):
        super().__init__()
        self.learned = nn.Sequential(mlp(NUM_FEATURES + 4, hidden, hidden, embed), Exp())
        self.batch = batch
        self.log_scale = log_scale  # the logs' weight at the input (wide: ranges x 10)

    def forward(self, features: torch.Tensor, batch=None) -> torch.Tensor:
        """Encodings of tables' `features` looked up `batch` bags a step (an int, or [T] per
        table, NaN where the network's own): the quantities are the tables' at that batch, in
        the units of the network's own batch, so one network serves tasks of any batch size
        (a pre-trained one has seen many; `learn/pretrain_data.py`)."""
        batch = self.batch if batch is None else np.asarray(batch, dtype=np.float64)
        batch = np.where(np.isnan(batch), self.batch, batch)
        shares = kernel_quantities(features, batch) / quantity_units(self.batch)
        shares = torch.from_numpy(shares).to(features.dtype)
        logs = torch.log(shares[:, 1:5].clamp(min=1e-6)) * self.log_scale
        return torch.cat([self.learned(torch.cat([features, logs], dim=-1)), shares], dim=-1)


class PositiveLinear(nn.Module):
    """A linear map without bias whose weights are positive, learned as their logs: what a
    unit of a kernel quantity costs, found by steps of a fixed ratio however small or large it
    is (a wide design's quantities span orders of magnitude). `weight` reads like nn.Linear's."""

    def __init__(self, inputs: int, outputs: int, start: float):
        super().__init__()
        self.log_weight = nn.Parameter(torch.full((outputs, inputs), float(np.log(start))))

    @property
    def weight(self) -> torch.Tensor:
        return torch.exp(self.log_weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.T


WIDE_LOG_SCALE = 0.1  # a wide network's log quantities at its input: spans of tens of nats
WIDE_WEIGHT_START = 1e-4  # a wide network's quantity weights before fitting (scaled ms per unit)


class CostNet(nn.Module):
    """The cost network. Four designs, chosen by `encoder` (a model file records which):

    - "relu" (the paper's, and every model saved before it had a choice): the encoder
      21 -> hidden -> embed ends in a ReLU, and each device head is an MLP of the device sum.
    - "exp": the encoder 21 -> hidden -> hidden -> embed ends in exp, so a table's encoding is
      positive and spans orders of magnitude as kernel costs do (its inputs are log features),
      and each head adds a linear term of the device sum to its MLP (`skip`), so a device's
      cost can be exactly a sum of per-table costs and stays right when a device holds more
      tables than any it was trained on. On exact costs this halves the per-device error on
      held-out tables (docs/learning.md).
    - "hybrid": "exp" learning a residual on top of the calibrated analytic model (`analytic`:
      its forward and backward weights and the batch size). A device's compute is the analytic
      prediction times a learned per-term gain (`gain`, log scale, set to this host's
      measured / analytic ratio before fitting) plus the "exp" heads, which start at zero.
      For real hardware only: on the simulated backend the analytic model is the answer.
    - "quantities": "exp" whose table encoding also carries the table's kernel quantities
      (`QuantityEncoder`: lookups, lookup volume, touched rows, output width at the training
      batch size `batch`); a device's compute adds a learned linear weighing of their sums
      (`quantity_weight`, starting at zero) to the "exp" heads. None of the analytic model's
      weights are given: what a quantity costs is learned from the labels. `wide` (the
      shipped network's, `learn/shipped.py`): the logs enter scaled down and the quantity
      weights are positive and learned as logs (`PositiveLinear`), so one network fits
      tables and batches whose quantities span many orders of magnitude.
    """

    def __init__(
        self,
        hidden: int = 128,
        embed: int = 32,
        head_hidden: int = 64,
        comm: dict | None = None,
        encoder: str = "relu",
        analytic: dict | None = None,
        batch: int | None = None,
        wide: bool = False,
    ):
        super().__init__()
        if encoder not in COSTNET_ENCODERS:
            raise ValueError(
                f"unknown cost-network encoder {encoder!r}; choose one of {COSTNET_ENCODERS}"
            )
        self.config = {
            "hidden": hidden,
            "embed": embed,
            "head_hidden": head_hidden,
            "comm": comm,
            "encoder": encoder,
        }
        self.comm = comm  # {"topology": name, "batch": default batch size} or None
        self.analytic = None
        if encoder == "hybrid":
            if analytic is None:  # this host's calibration (else the shipped one), cpu batch
                model = SimulatedModel.load()
                analytic = {"fwd": model.fwd, "bwd": model.bwd, "batch": DEFAULT_BATCH}
            self.config["analytic"] = analytic
            self.analytic = np.zeros((len(GROUP_FEATURES), len(DEVICE_TERMS)))
            self.analytic[:, DEVICE_TERMS.index("fwd_comp")] = analytic["fwd"]
            self.analytic[:, DEVICE_TERMS.index("bwd_comp")] = analytic["bwd"]
            self.encoder = HybridEncoder(hidden, embed, analytic["batch"])
            with torch.no_grad():
                self.encoder.learned[0][-1].bias.fill_(-3.0)
        elif encoder == "quantities":
            batch = int(batch or DEFAULT_BATCH)
            self.config["batch"] = batch
            if wide:
                self.config["wide"] = True
            log_scale = WIDE_LOG_SCALE if wide else 1.0
            self.encoder = QuantityEncoder(hidden, embed, batch, log_scale)
            with torch.no_grad():
                self.encoder.learned[0][-1].bias.fill_(-3.0)
        elif encoder == "exp":
            self.encoder = nn.Sequential(mlp(NUM_FEATURES, hidden, hidden, embed), Exp())
            with torch.no_grad():  # start with small encodings: device sums stay near 1
                self.encoder[0][-1].bias.fill_(-3.0)
        else:
            self.encoder = mlp(NUM_FEATURES, hidden, embed, last_relu=True)
        self.device_heads = nn.ModuleList(mlp(embed, head_hidden, 1) for _ in DEVICE_TERMS)
        # the heads' linear terms in the device sum, one column per head ("exp" design)
        residual = encoder in ("exp", "hybrid", "quantities")
        self.skip = nn.Linear(embed, len(DEVICE_TERMS), bias=False) if residual else None
        self.embed = embed
        self.gain = None
        # the "quantities" design: what a device's kernel quantities cost, per head (from zero)
        self.quantity_weight = None
        if encoder == "quantities" and wide:  # the quantities' linear costs first: the
            # learned residual starts at zero
            shape = (len(QUANTITY_UNITS), len(DEVICE_TERMS))
            self.quantity_weight = PositiveLinear(*shape, WIDE_WEIGHT_START)
            with torch.no_grad():
                self.skip.weight.zero_()
                for head in self.device_heads:
                    head[-1].weight.zero_()
                    head[-1].bias.zero_()
        elif encoder == "quantities":
            self.quantity_weight = nn.Linear(len(QUANTITY_UNITS), len(DEVICE_TERMS), bias=False)
            with torch.no_grad():
                self.quantity_weight.weight.zero_()
        if self.analytic is not None:  # the residual starts at zero: the analytic model alone
            self.gain = nn.Parameter(torch.zeros(len(DEVICE_TERMS)))
            with torch.no_grad():
                self.skip.weight.zero_()
                for head in self.device_heads:
                    head[-1].weight.zero_()
                    head[-1].bias.zero_()
        self.register_buffer("scale", torch.tensor(1.0))

    def analytic_ms(self, vectors: np.ndarray) -> np.ndarray:
        """[..., 3] the analytic model's per-device costs in ms (bwd_comm zero) from device
        vectors [..., embed + 6] of the hybrid design; float32."""
        sums = np.asarray(vectors, dtype=np.float64)[..., self.embed :]
        features = features_of_sums(sums.reshape(-1, sums.shape[-1]))
        return (features @ self.analytic).reshape(*sums.shape[:-1], -1).astype(np.float32)

    def task_batch(self, tables) -> int:
        """The batch size of tables' traces; tables known by statistics alone take the
        network's own (its training suite's), else the modeled exchange's, else the default."""
        default = self.config.get("batch") or (self.comm or {}).get("batch") or DEFAULT_BATCH
        return table_batch_size(tables, int(default))

    def encode(self, features: torch.Tensor, batch=None) -> torch.Tensor:
        """The tables' encodings [T, embed (+ 6)]; `batch` (an int, or [T]) reaches only the
        "quantities" design, the one whose encodings read the batch size."""
        if isinstance(self.encoder, QuantityEncoder):
            return self.encoder(features, batch)
        return self.encoder(features)

    def encode_tables(self, tables) -> torch.Tensor:
        """`encode` of tables, at the batch size of their traces (`task_batch`)."""
        features = torch.from_numpy(feature_matrix(tables))
        return self.encode(features, self.task_batch(tables))

    def device_vectors(self, batch: PlacementBatch) -> torch.Tensor:
        """[devices, embed] (hybrid: embed + 6): the sum of each device's table encodings (zeros
        when empty)."""
        encoded = self.encode(batch.features, batch.table_batch)
        out = encoded.new_zeros(len(batch.device_placement), encoded.shape[1])
        return out.index_add(0, batch.table_device, encoded)

    def device_costs(self, vectors: torch.Tensor) -> torch.Tensor:
        """[..., 3] scaled per-device costs from device vectors [..., embed]; zeros for a device
        whose vector is zero (no tables, or only tables the encoder maps to nothing)."""
        learned = vectors[..., : self.embed]
        costs = torch.cat([head(learned) for head in self.device_heads], dim=-1)
        if self.skip is not None:
            costs = costs + self.skip(learned)
        if self.analytic is not None:
            base = torch.from_numpy(self.analytic_ms(vectors.detach().numpy()))
            costs = costs + base * torch.exp(self.gain) / self.scale
        if self.quantity_weight is not None:
            costs = costs + self.quantity_weight(vectors[..., self.embed :])
        return costs * occupied(vectors)[..., None]

    def overall(
        self,
        vectors: torch.Tensor,
        device_placement: torch.Tensor,
        n: int,
        device_comm: torch.Tensor | None = None,
    ):
        """[n] scaled overall costs of n placements from their device vectors [devices, embed]
        (and, for a network with modeled communication, the devices' all-to-all ms)."""
        costs = self.device_costs(vectors)
        busy = occupied(vectors)
        skip = torch.where(busy, 0.0, float("-inf"))
        if self.comm is not None and device_comm is not None:
            rest = 2 * device_comm / self.scale + costs[:, 2] * busy
        else:
            rest = 2 * costs[:, 1] + costs[:, 2] + skip
        terms = torch.stack([costs[:, 0] + skip, rest], dim=1)
        pooled = terms.new_full((n, 2), float("-inf"))
        index = device_placement[:, None].expand_as(terms)
        return pooled.scatter_reduce(0, index, terms, reduce="amax").sum(dim=1)

    def forward(self, batch: PlacementBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Scaled (per-device costs [devices, 3], overall [placements])."""
        vectors = self.device_vectors(batch)
        overall = self.overall(
            vectors, batch.device_placement, batch.num_placements, batch.device_comm
        )
        return self.device_costs(vectors), overall

    def numpy_head_weights(self):
        """The device heads' weights as NumPy float32 arrays (w1, b1, w2, b2, linear, width,
        base): scaled costs of device vectors v are `max(v[:width] @ w1 + b1, 0) @ w2 + b2 +
        v[:width] @ linear` (+ base(v), the hybrid's analytic part, None for other designs;
        linear None for the paper's design), zero for a zero vector."""
        layers = [
            [layer for layer in head if isinstance(layer, nn.Linear)] for head in self.device_heads
        ]
        w1 = np.concatenate([h[0].weight.detach().numpy().T for h in layers], axis=1)
        b1 = np.concatenate([h[0].bias.detach().numpy() for h in layers])
        hidden = layers[0][0].out_features
        w2 = np.zeros((len(layers) * hidden, len(layers)), dtype=np.float32)
        for i, h in enumerate(layers):  # block diagonal: head i reads its own hidden units
            w2[i * hidden : (i + 1) * hidden, i] = h[1].weight.detach().numpy()[0]
        b2 = np.array([h[1].bias.item() for h in layers], dtype=np.float32)
        linear = None if self.skip is None else self.skip.weight.detach().numpy().T  # [embed, 3]
        width, base = self.embed, self.numpy_base()
        if self.quantity_weight is not None:  # whole vectors (contiguous): the quantities' rows
            extra = len(QUANTITY_UNITS)  # read nothing in the first layer, and are weighed
            w1 = np.concatenate([w1, np.zeros((extra, w1.shape[1]), np.float32)])
            linear = np.concatenate([linear, self.quantity_weight.weight.detach().numpy().T])
            width, base = width + extra, None
        return w1, b1, w2, b2, linear, width, base

    def numpy_heads(self):
        """The device heads as one NumPy function of device vectors [..., embed] -> scaled
        costs [..., 3], float32, zeros for a zero vector (as `device_costs`): the three heads
        run as one product, for the thousands of small evaluations placing makes."""
        w1, b1, w2, b2, linear, width, base = self.numpy_head_weights()

        def heads(vectors: np.ndarray) -> np.ndarray:
            learned = vectors if vectors.shape[-1] == width else vectors[..., :width]
            costs = np.maximum(learned @ w1 + b1, 0) @ w2 + b2
            if linear is not None:
                costs = costs + learned @ linear
            if base is not None:
                costs = costs + base(vectors)
            return costs * (np.abs(vectors).sum(axis=-1, keepdims=True) > 0)

        return heads

    def numpy_base(self):
        """The part of the hybrid or quantities design that reads the device's quantities, as a
        NumPy function of device vectors [..., embed + 6] -> scaled costs [..., 3] (the
        hybrid's gains applied), or None for other designs."""
        if self.quantity_weight is not None:
            weight = self.quantity_weight.weight.detach().numpy().T.astype(np.float32)
            return lambda vectors: vectors[..., self.embed :] @ weight
        if self.analytic is None:
            return None
        gain = (torch.exp(self.gain) / self.scale).detach().numpy()
        return lambda vectors: self.analytic_ms(vectors) * gain

    def comm_ms(self, task: PlacementTask, devices: np.ndarray) -> np.ndarray | None:
        """[..., D] the modeled all-to-all ms of placements `devices` [..., T] of `task`, or
        None when this network predicts communication itself. With data-parallel tables it
        holds half their all-reduce too: the overall counts the exchange twice (forward and
        backward) and only the backward all-reduces, so the overall is exact."""
        if self.comm is None:
            return None
        devices = np.asarray(devices, dtype=np.int64)
        d, batch = task.num_devices, table_batch_size(task.tables, self.comm["batch"])
        topology = get_topology(self.comm["topology"])
        flat = devices.reshape(-1, devices.shape[-1])
        transfer = exchange_many(task.tables, flat, batch, topology, d)
        return transfer.reshape(*devices.shape[:-1], d)

    @torch.no_grad()
    def predict_ms(self, task: PlacementTask, placement: Placement) -> tuple[np.ndarray, float]:
        """(per-device [fwd_comp, bwd_comm, bwd_comp] in ms, overall ms) for one placement;
        bwd_comm is the modeled all-to-all where the network has one."""
        task, placement = shard_view(task, placement)
        comm = self.comm_ms(task, np.array(placement.devices))
        batch = make_batch(
            [(feature_matrix(task.tables), np.array(placement.devices), task.num_devices)],
            comm,
            [self.task_batch(task.tables)],
        )
        devices, overall = self(batch)
        devices = (devices * self.scale).numpy()
        if comm is not None:
            devices[:, 1] = comm
        return devices, float(overall[0] * self.scale)
