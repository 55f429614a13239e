"""The placement policy and its episodes on the MDP estimated by the cost network.

Tables are placed one at a time in descending order of their predicted single-table cost.
The state is the set of tables on each device. Each device is scored by an MLP over
[sum of its tables' policy encodings ; encoding of its predicted per-device costs] (plus,
optionally, the encoding of the table being placed); a softmax over the devices that can take
the table (memory room, and room left for the big tables still to come) picks one. At the end
the reward is minus the cost network's predicted overall cost. No hardware is touched.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from dreamshard.costnet import DEVICE_TERMS, CostNet, mlp
from dreamshard.features import NUM_FEATURES, feature_matrix
from dreamshard.packing import CompletionGuard
from dreamshard.tasks import Placement, PlacementTask


@dataclass
class Rollout:
    """Episodes of one task: devices [E, T] (table order of the task), and their statistics."""

    devices: np.ndarray
    log_prob: torch.Tensor  # [E] sum over steps (carries gradients when sampled with them)
    entropy: torch.Tensor  # [E] mean over steps
    predicted: torch.Tensor  # [E] scaled predicted overall cost (no gradient)
    legal: np.ndarray  # [E] False where an episode ran out of memory room

    def placement(self, episode: int, method: str) -> Placement:
        return Placement(tuple(int(d) for d in self.devices[episode]), method)


def masked_choice(
    logits: torch.Tensor, allowed: np.ndarray, greedy: bool, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, np.ndarray]:
    """One step of episodes [E]: a device per episode among the `allowed` ones [E, D].

    Returns (action, its log-probability, the entropy, stuck). The masked softmax gives the
    log-probabilities, so the mask applies in the update as in sampling. An episode with no
    allowed device (stuck) picks among all devices, to finish and be marked illegal.
    """
    stuck = ~allowed.any(axis=1)
    allowed = allowed.copy()
    allowed[stuck] = True
    log_p = torch.log_softmax(logits.masked_fill(torch.from_numpy(~allowed), float("-inf")), -1)
    probs = log_p.exp()
    if greedy:
        action = probs.argmax(dim=-1)
    else:
        action = torch.multinomial(probs.detach(), 1, generator=generator).squeeze(-1)
    entropy = -(probs * log_p.masked_fill(~torch.isfinite(log_p), 0)).sum(-1)
    return action, log_p[torch.arange(len(action)), action], entropy, stuck


def reinforce_loss(rollout: Rollout, entropy_weight: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, reward) of episodes of one task: reward minus the predicted overall cost,
    normalised within the episodes; an episode that ran out of room scores below every other."""
    reward = -rollout.predicted
    if not rollout.legal.all():
        legal = torch.from_numpy(rollout.legal)
        floor = reward[legal].min() if legal.any() else reward.min()
        reward = torch.where(legal, reward, floor - 1.0)
    advantage = (reward - reward.mean()) / (reward.std() + 1e-8)
    loss = -(advantage * rollout.log_prob).mean() - entropy_weight * rollout.entropy.mean()
    return loss, reward


class PlacementPolicy(nn.Module):
    def __init__(self, table_aware: bool = False, hidden: int = 128, embed: int = 32):
        super().__init__()
        self.config = {"table_aware": table_aware, "hidden": hidden, "embed": embed}
        self.table_aware = table_aware
        self.table_encoder = mlp(NUM_FEATURES, hidden, embed, last_relu=True)
        self.cost_encoder = mlp(len(DEVICE_TERMS), embed, last_relu=True)
        self.scorer = mlp(embed * (3 if table_aware else 2), 64, 1)

    def rollout(
        self,
        task: PlacementTask,
        costnet: CostNet,
        episodes: int,
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> Rollout:
        """Place every table of `task` in `episodes` parallel episodes."""
        features = torch.from_numpy(feature_matrix(task.tables))
        with torch.no_grad():
            cost_encoded = costnet.encoder(features)
            single = costnet.device_costs(cost_encoded).sum(-1).numpy()
        order = sorted(range(len(task.tables)), key=lambda i: (-single[i], i))
        guard = CompletionGuard(task, order)
        policy_encoded = self.table_encoder(features)
        sizes = task.table_bytes()
        e, d = episodes, task.num_devices
        policy_sum = policy_encoded.new_zeros(e, d, policy_encoded.shape[1])
        cost_sum = cost_encoded.new_zeros(e, d, cost_encoded.shape[1])
        used = np.zeros((e, d), dtype=np.int64)
        devices = np.full((e, len(order)), -1, dtype=np.int64)
        legal = np.ones(e, dtype=bool)
        log_probs, entropies = [], []
        for step, table in enumerate(order):
            with torch.no_grad():
                predicted_costs = costnet.device_costs(cost_sum)
            parts = [policy_sum, self.cost_encoder(predicted_costs)]
            if self.table_aware:
                parts.append(policy_encoded[table].expand(e, d, -1))
            logits = self.scorer(torch.cat(parts, dim=-1)).squeeze(-1)
            action, log_p, entropy, stuck = masked_choice(
                logits, guard.mask(step, used), greedy, generator
            )
            legal &= ~stuck
            log_probs.append(log_p)
            entropies.append(entropy)
            chosen = nn.functional.one_hot(action, d).to(policy_sum.dtype)[..., None]
            policy_sum = policy_sum + chosen * policy_encoded[table]
            cost_sum = cost_sum + chosen * cost_encoded[table]
            picked = action.numpy()
            used[np.arange(e), picked] += sizes[table]
            devices[:, table] = picked
        with torch.no_grad():
            predicted = costnet.overall_head(cost_sum.max(dim=1).values).squeeze(-1)
        return Rollout(
            devices,
            torch.stack(log_probs).sum(0),
            torch.stack(entropies).mean(0),
            predicted,
            legal,
        )
