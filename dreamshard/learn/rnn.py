"""The paper's learned baseline: an RNN placer (after Mirhoseini et al., 2017).

An LSTM reads the tables largest first (by bytes), each step's input the table's features and
the device it chose for the previous table, and emits a device per table through a softmax
over a FIXED number of devices D. The memory mask is DreamShard's (`CompletionGuard`), applied
when sampling and in the update alike. It is trained with REINFORCE against the cost network of
a trained DreamShard model (reward minus the predicted overall cost, rewards normalised within
the episodes of a task, entropy bonus), on that model's suite, with as many updates of as many
episodes as the model's policy got (`fair_config`), so it is compared with the policy on equal
terms; the file records the budget and a fingerprint of the cost network.

Its output layer has D units, so a placer trained for D devices cannot place on any other
count: that is the limitation DreamShard's sum/max-reduced networks remove.
"""

from __future__ import annotations

import hashlib
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
from dreamshard.learn.rnn_config import (
    PolicyBudget,
    RnnTrainConfig,
    fair_config,
    policy_budget,
)
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
        self.metadata: dict = {}  # how it was trained (train_rnn), kept in its file

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
        guard = CompletionGuard(task, largest_first(task))
        order = guard.order  # largest first, the constrained tables before the rest
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
                self.head(state[0]), guard.mask(step, used, devices), greedy, generator
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


def costnet_fingerprint(costnet: CostNet) -> str:
    """A short hash of the cost network's weights: which network an RNN was trained against."""
    digest = hashlib.sha256()
    for name, tensor in sorted(costnet.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def budget_note(config: RnnTrainConfig, budget: PolicyBudget | None) -> str:
    """One line: the RNN's budget against its model's policy's."""
    mine = f"{config.updates} updates of {config.episodes} episodes"
    if budget is None:
        return f"{mine} (the model records no policy training)"
    theirs = (
        f"{budget.iterations} iterations x {budget.updates_per_iteration} updates of "
        f"{budget.episodes} episodes"
    )
    same = budget.updates == config.updates and budget.episodes == config.episodes
    started = f", started from {budget.started_from}" if budget.started_from else ""
    return f"{mine} ({'the same as' if same else 'not'} its policy's: {theirs}{started})"


def train_rnn(
    model: DreamShardModel, config: RnnTrainConfig, log=print, source: str = "the model"
) -> RnnPlacer:
    """REINFORCE on the MDP of `model`'s cost network, tasks of the suite's training half; what
    `config` leaves open comes from the model (`fair_config`). `source` names the model."""
    config = fair_config(config, model.metadata, source)
    spec = parse_suite_name(config.suite, num_train_tasks=config.train_tasks, num_test_tasks=1)
    tasks = make_suite(spec).train_tasks
    budget = policy_budget(model.metadata)
    note = budget_note(config, budget)
    log(f"RNN on {config.suite} against the cost network of {source}: {note}")
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
    placer.metadata = {
        "train": asdict(config),
        "budget": note,
        "policy_budget": asdict(budget) if budget else None,
        "costnet_model": source,
        "costnet": {
            "fingerprint": costnet_fingerprint(model.costnet),
            "suite": model.metadata.get("suite"),
            "backend": model.metadata.get("backend"),
            "trained": model.metadata.get("trained"),
        },
        "trained": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    return placer


def save_rnn(
    placer: RnnPlacer,
    path: str | Path,
    config: RnnTrainConfig | None = None,
    source: str | None = None,
) -> None:
    """Write the placer with what `train_rnn` recorded; `config` and `source` only fill in
    for a placer it did not train."""
    metadata = dict(placer.metadata)
    if "train" not in metadata and config is not None:
        metadata["train"] = asdict(config)
    if source is not None:
        metadata["costnet_model"] = source
    save_torch_atomic(
        {
            "format": RNN_FORMAT,
            "feature_transform": FEATURE_TRANSFORM,
            "feature_names": list(FEATURE_NAMES),
            "config": placer.config,
            "state": placer.state_dict(),
            "metadata": metadata,
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
    placer.metadata = data.get("metadata", {})
    placer.eval()
    return placer


def resolve_rnn(placer: RnnPlacer | str | None) -> RnnPlacer:
    if placer is None:
        raise DreamshardError(
            "method rnn needs a trained RNN placer: pass --model PATH (dreamshard train-rnn)"
        )
    return load_rnn(placer) if isinstance(placer, (str, Path)) else placer


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
