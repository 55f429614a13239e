"""The paper's learned baseline: an RNN placer (after Mirhoseini et al., 2017).

An LSTM reads the tables largest first (by bytes), each step's input the table's features and
the device it chose for the previous table, and emits a device per table through a softmax
over a FIXED number of devices D. The memory mask is DreamShard's (`CompletionGuard`), applied
when sampling and in the update alike. It is trained with REINFORCE against the cost network of
a trained DreamShard model (reward minus the predicted overall cost, rewards normalised within
the episodes of a task, entropy bonus), so it is compared with the policy on equal terms.

Its output layer has D units, so a placer trained for D devices cannot place on any other
count: that is the limitation DreamShard's sum/max-reduced networks remove.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from torch import nn

from dreamshard.errors import DreamshardError, InfeasibleError
from dreamshard.learn.costnet import CostNet, make_batch, mlp
from dreamshard.learn.model_file import (
    DreamShardModel,
    check_features,
    read_torch_file,
    save_torch_atomic,
)
from dreamshard.learn.policy import Rollout, masked_choice, reinforce_loss
from dreamshard.learn.rnn_config import RnnTrainConfig
from dreamshard.learn.train import linear_lr
from dreamshard.placement.packing import CompletionGuard, check_capacity, largest_first
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.tables.features import (
    FEATURE_NAMES,
    FEATURE_TRANSFORM,
    NUM_FEATURES,
    feature_matrix,
)

RNN_FORMAT = "dreamshard-rnn"
RETRIES = 16  # sampled episodes tried when the greedy one runs out of memory room


class RnnPlacer(nn.Module):
    def __init__(self, num_devices: int, hidden: int = 64):
        super().__init__()
        self.config = {"num_devices": num_devices, "hidden": hidden}
        self.num_devices = num_devices
        self.encoder = mlp(NUM_FEATURES, hidden, last_relu=True)
        self.cell = nn.LSTMCell(hidden + num_devices, hidden)
        self.head = nn.Linear(hidden, num_devices)

    def check_devices(self, task: PlacementTask) -> None:
        if task.num_devices != self.num_devices:
            raise DreamshardError(
                f"this RNN placer was trained for {self.num_devices} devices and cannot place "
                f"on {task.num_devices}; train one for {task.num_devices} with dreamshard "
                "train-rnn (the dreamshard policy places on any device count)"
            )

    def rollout(
        self,
        task: PlacementTask,
        episodes: int,
        costnet: CostNet | None = None,
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> Rollout:
        """`episodes` placements of `task`; `predicted` (scaled) is NaN without a `costnet`."""
        self.check_devices(task)
        order = largest_first(task)
        guard = CompletionGuard(task, order)
        encoded = self.encoder(torch.from_numpy(feature_matrix(task.tables)[order]))
        sizes = task.table_bytes()
        e, d = episodes, self.num_devices
        state = (encoded.new_zeros(e, encoded.shape[1]), encoded.new_zeros(e, encoded.shape[1]))
        previous = encoded.new_zeros(e, d)
        used = np.zeros((e, d), dtype=np.int64)
        devices = np.full((e, len(order)), -1, dtype=np.int64)
        legal = np.ones(e, dtype=bool)
        log_probs, entropies = [], []
        for step, table in enumerate(order):
            state = self.cell(torch.cat([encoded[step].expand(e, -1), previous], -1), state)
            action, log_p, entropy, stuck = masked_choice(
                self.head(state[0]), guard.mask(step, used), greedy, generator
            )
            legal &= ~stuck
            log_probs.append(log_p)
            entropies.append(entropy)
            previous = nn.functional.one_hot(action, d).to(encoded.dtype)
            picked = action.numpy()
            used[np.arange(e), picked] += sizes[table]
            devices[:, table] = picked
        predicted = torch.full((e,), float("nan"))
        if costnet is not None:
            features = feature_matrix(task.tables)
            with torch.no_grad():
                _, predicted = costnet(make_batch([(features, row, d) for row in devices]))
        return Rollout(
            devices, torch.stack(log_probs).sum(0), torch.stack(entropies).mean(0), predicted, legal
        )


def train_rnn(model: DreamShardModel, config: RnnTrainConfig, log=print) -> RnnPlacer:
    """REINFORCE on the MDP of `model`'s cost network, tasks of the suite's training half."""
    spec = parse_suite_name(config.suite, num_train_tasks=config.train_tasks, num_test_tasks=1)
    tasks = make_suite(spec).train_tasks
    torch.manual_seed(config.seed)
    placer = RnnPlacer(spec.num_devices, config.hidden)
    optimizer = torch.optim.Adam(placer.parameters(), lr=config.learning_rate)
    generator = torch.Generator().manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    scale = float(model.costnet.scale)
    for update in range(config.updates):
        linear_lr(optimizer, config.learning_rate, update, config.updates)
        task = tasks[int(rng.integers(len(tasks)))]
        rollout = placer.rollout(task, config.episodes, model.costnet, generator=generator)
        loss, reward = reinforce_loss(rollout, config.entropy_weight)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (update + 1) % max(1, config.updates // 10) == 0:
            log(
                f"update {update + 1}/{config.updates}: mean predicted cost "
                f"{float(-reward.mean()) * scale:.2f} ms"
            )
    placer.eval()
    return placer


def save_rnn(placer: RnnPlacer, path: str | Path, config: RnnTrainConfig, source: str) -> None:
    save_torch_atomic(
        {
            "format": RNN_FORMAT,
            "feature_transform": FEATURE_TRANSFORM,
            "feature_names": list(FEATURE_NAMES),
            "config": placer.config,
            "state": placer.state_dict(),
            "metadata": {
                "train": asdict(config),
                "costnet_model": source,
                "trained": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
        },
        path,
    )


def load_rnn(path: str | Path) -> RnnPlacer:
    data = read_torch_file(path, "RNN placer file")
    if data.get("format") != RNN_FORMAT:
        raise DreamshardError(f"{path} is not an RNN placer file (dreamshard train-rnn writes one)")
    check_features(data, path, "dreamshard train-rnn")
    try:
        placer = RnnPlacer(**data["config"])
        placer.load_state_dict(data["state"])
    except (KeyError, TypeError, RuntimeError) as exc:
        raise DreamshardError(f"{path}: the saved RNN does not load: {exc}") from None
    placer.eval()
    return placer


def resolve_rnn(placer: RnnPlacer | str | None) -> RnnPlacer:
    if placer is None:
        raise DreamshardError(
            "method rnn needs a trained RNN placer: pass --model PATH (dreamshard train-rnn)"
        )
    return load_rnn(placer) if isinstance(placer, str) else placer


@torch.no_grad()
def rnn_place(task: PlacementTask, placer: RnnPlacer, seed: int = 0) -> Placement:
    """The LSTM's greedy placement; sampled ones only if the greedy one runs out of room."""
    placer.check_devices(task)
    check_capacity(task)
    rollout = placer.rollout(task, 1, greedy=True)
    if not rollout.legal[0]:
        generator = torch.Generator().manual_seed(seed)
        rollout = placer.rollout(task, RETRIES, generator=generator)
    legal = np.flatnonzero(rollout.legal)
    if legal.size:
        return rollout.placement(int(legal[0]), "rnn")
    raise InfeasibleError(
        "rnn: its greedy and sampled placements all ran out of memory room; use another method"
    )
