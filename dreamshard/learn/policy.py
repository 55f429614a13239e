"""The placement policy and its episodes on the MDP estimated by the cost network.

Tables are placed one at a time in descending order of their predicted single-table cost.
The state is the set of tables on each device. Each device is scored by an MLP over
[sum of its tables' policy encodings ; encoding of its predicted per-device costs] (plus,
optionally, the encoding of the table being placed); a softmax over the devices that can take
the table (memory room, and room left for the big tables still to come) picks one. At the end
the reward is minus the cost network's predicted overall cost. No hardware is touched.

Without autograd (placing, not training) the same episodes run on NumPy copies of the weights,
recomputing per step only the device each episode just changed: torch's per-call overhead, not
arithmetic, is what costs at these sizes (856 tables on 128 devices: ~50x faster).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from dreamshard.costs.comm import Topology, device_transfer_ms, get_topology, host_widths
from dreamshard.learn.costnet import DEVICE_TERMS, CostNet, compose_overall, mlp, occupied
from dreamshard.placement.budget import Deadline
from dreamshard.placement.packing import CompletionGuard
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.tables.features import NUM_FEATURES, feature_matrix
from dreamshard.tables.shards import pooled_width
from dreamshard.tables.traces import table_batch_size


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


def episodes_overall(
    costnet: CostNet, task: PlacementTask, devices: np.ndarray, cost_sum: torch.Tensor
) -> torch.Tensor:
    """[E] scaled predicted overall costs of episodes from their device vectors [E, D, embed]."""
    comm = costnet.comm_ms(task, devices)
    if comm is not None:
        comm = torch.from_numpy(comm).float() / costnet.scale
    return compose_overall(costnet.device_costs(cost_sum), occupied(cost_sum), comm)


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


@torch.no_grad()
def single_table_costs(costnet: CostNet, tables) -> tuple[torch.Tensor, np.ndarray]:
    """(cost encodings, predicted cost of each table alone on a device, scaled) of `tables`:
    the order the policy places tables in, and the cost key splitting balances."""
    cost_encoded = costnet.encode_tables(tables)
    return cost_encoded, costnet.device_costs(cost_encoded).sum(-1).numpy()


def table_order(task: PlacementTask, costnet: CostNet):
    """(features, cost encodings, the placing order, its CompletionGuard) of a task's tables:
    descending predicted single-table cost, ties by index (pinned tables first and together
    groups in one run, where the task has constraints)."""
    features = torch.from_numpy(feature_matrix(task.tables))
    cost_encoded, single = single_table_costs(costnet, task.tables)
    order = sorted(range(len(task.tables)), key=lambda i: (-single[i], i))
    guard = CompletionGuard(task, order)  # its order puts the constrained tables first
    return features, cost_encoded, guard.order, guard


class Lookahead:
    """The cost network's one-step lookahead for episodes [E] of one task.

    For the table being placed, `regret` says per device how much higher the composed overall
    cost of the tables placed so far (scaled) would be with the table there than on the best
    device: what `costnet_greedy` minimises, as an input the policy weighs. `place` records the
    devices the episodes chose, with the costs `regret` was given (so nothing is recomputed).

    Where the heads' first layer and linear terms are all that reads a device's sum (every
    design but the hybrid, whose analytic part is not linear), each device's products with its
    sum (`first`, `linear`) are kept and the table's own added (`with_table`), so a step
    multiplies one vector, not every device's sum; the products follow the sums in `place`.
    """

    def __init__(self, task: PlacementTask, costnet: CostNet, episodes: int):
        d = task.num_devices
        self.costs = np.zeros((episodes, d, len(DEVICE_TERMS)), dtype=np.float32)
        self.busy = np.zeros((episodes, d), dtype=bool)
        self.widths = np.zeros((episodes, d))
        self.dims = np.array([pooled_width(t) for t in task.tables], dtype=np.float64)
        self.comm, self.d = costnet.comm, d
        self.weights = costnet.numpy_head_weights()
        self.first = None  # [E, D, hidden]: each device's sum times w1 (and [E, D, 3] linear)
        if self.weights[-1] is not None:  # the hybrid: the whole heads on the whole sums
            self.heads = costnet.numpy_heads()
        else:
            w1, linear = self.weights[0], self.weights[4]
            self.first = np.zeros((episodes, d, w1.shape[1]), dtype=np.float32)
            self.linear = None if linear is None else np.zeros((episodes, d, 3), np.float32)
        if costnet.comm is not None:
            self.batch = table_batch_size(task.tables, costnet.comm["batch"])
            self.topology = get_topology(costnet.comm["topology"])
            self.scale = float(costnet.scale)

    def with_table(self, sums: np.ndarray, vector: np.ndarray) -> np.ndarray:
        """[E, D, 3] scaled costs of every device with the table's cost encoding `vector`
        added to its sum (device vectors `sums` [E, D, embed], read only by the hybrid)."""
        if self.first is None:
            return self.heads(sums + vector)
        w1, b1, w2, b2, linear, width, _ = self.weights
        self.share = (vector[:width] @ w1, None if linear is None else vector[:width] @ linear)
        costs = np.maximum(self.first + (self.share[0] + b1), 0) @ w2 + b2
        if linear is not None:  # the linear terms (every design but the paper's)
            costs = costs + (self.linear + self.share[1])
        if not np.any(vector):  # an empty device stays empty, and costs nothing
            costs = costs * self.busy[..., None]
        return costs

    def place(self, table: int, devices: np.ndarray, placed: np.ndarray) -> None:
        rows = np.arange(len(devices))
        self.costs[rows, devices] = placed[rows, devices]
        self.busy[rows, devices] = True
        self.widths[rows, devices] += self.dims[table]
        if self.first is not None:
            self.first[rows, devices] += self.share[0]
            if self.linear is not None:
                self.linear[rows, devices] += self.share[1]

    def keep(self, episodes: int) -> None:
        """Drop every episode after the first `episodes`."""
        for name in ("costs", "busy", "widths", "first", "linear"):
            value = getattr(self, name, None)
            if value is not None:
                setattr(self, name, value[:episodes])

    def regret(self, table: int, placed: np.ndarray) -> np.ndarray:
        """[E, D] from the devices' scaled costs [E, D, 3] with the table added to each."""
        fwd, others = np.where(self.busy, self.costs[..., 0], -np.inf), None
        if self.comm is None:
            rest = np.where(self.busy, 2 * self.costs[..., 1] + self.costs[..., 2], -np.inf)
            new_rest = 2 * placed[..., 1] + placed[..., 2]
        else:  # a device's exchange: its own width, its host's and the total
            dim, bwd = self.dims[table], np.where(self.busy, self.costs[..., 2], 0.0)
            total = self.widths.sum(axis=1, keepdims=True) + dim
            host = host_widths(self.widths, self.topology)
            args = (total, self.d, self.batch, self.topology)
            now = device_transfer_ms(self.widths, *args, host) / self.scale
            wider = device_transfer_ms(self.widths + dim, *args, host + dim) / self.scale
            rest = 2 * now + bwd
            new_rest = 2 * wider + placed[..., 2]
            if self.topology.host_size(self.d) < self.d:  # the chosen host's peers change too
                peers = 2 * device_transfer_ms(self.widths, *args, host + dim) / self.scale + bwd
                others = np.maximum(
                    host_peers_max(peers, self.topology), other_hosts_max(rest, self.topology)
                )
        if others is None:  # on one host the other devices keep their exchange
            others = others_max(rest)
        overall = np.maximum(others_max(fwd), placed[..., 0])
        overall += np.maximum(others, new_rest)
        return (overall - overall.min(axis=1, keepdims=True)).astype(np.float32)


def others_max(values: np.ndarray) -> np.ndarray:
    """[E, D]: for each device, the max of `values` [E, D] over the other devices."""
    if values.shape[1] == 1:
        return np.full_like(values, -np.inf)
    rows = np.arange(len(values))
    top = values.argmax(axis=1)  # the first of equal maxima
    first = values[rows, top][:, None]
    rest = values.copy()
    rest[rows, top] = -np.inf
    second = rest.max(axis=1, keepdims=True)
    return np.where(np.arange(values.shape[1]) == top[:, None], second, first)


def _by_host(values: np.ndarray, topology: Topology) -> np.ndarray:
    """[E, H, L] of device values [E, D] (device i on host i // L)."""
    e, d = values.shape
    return values.reshape(e, -1, topology.host_size(d))


def host_peers_max(values: np.ndarray, topology: Topology) -> np.ndarray:
    """[E, D]: for each device, the max of `values` [E, D] over the other devices of its host."""
    hosts = _by_host(values, topology)
    return others_max(hosts.reshape(-1, hosts.shape[-1])).reshape(values.shape)


def other_hosts_max(values: np.ndarray, topology: Topology) -> np.ndarray:
    """[E, D]: for each device, the max of `values` [E, D] over the devices of other hosts."""
    per_host = _by_host(values, topology).max(axis=2)  # [E, H]
    return others_max(per_host)[:, topology.hosts_of(values.shape[1])]


LOOKAHEAD_INIT = 300.0  # the lookahead's starting weight: logits apart by 3 per 0.01 x scale


class PlacementPolicy(nn.Module):
    def __init__(
        self,
        table_aware: bool = False,
        hidden: int = 128,
        embed: int = 32,
        lookahead: bool = False,
    ):
        super().__init__()
        self.config = {
            "table_aware": table_aware,
            "hidden": hidden,
            "embed": embed,
            "lookahead": lookahead,
        }
        self.table_aware = table_aware
        self.table_encoder = mlp(NUM_FEATURES, hidden, embed, last_relu=True)
        self.cost_encoder = mlp(len(DEVICE_TERMS), embed, last_relu=True)
        self.scorer = mlp(embed * (3 if table_aware else 2), 64, 1)
        # one-step lookahead: minus this weight times how much more the predicted overall
        # cost would be with the table on a device than on the best device (`Lookahead`)
        self.lookahead = nn.Parameter(torch.tensor(LOOKAHEAD_INIT)) if lookahead else None

    def rollout(
        self,
        task: PlacementTask,
        costnet: CostNet,
        episodes: int,
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> Rollout:
        """Place every table of `task` in `episodes` parallel episodes.

        With autograd off this runs `fast_rollout`: the same devices (and, for a given
        generator state, the same samples; floating-point rounding aside), no gradients.
        """
        if not torch.is_grad_enabled():
            split = (episodes, 0) if greedy else (0, episodes)
            return fast_rollout(self, task, costnet, *split, generator)
        features, cost_encoded, order, guard = table_order(task, costnet)
        policy_encoded = self.table_encoder(features)
        sizes = task.table_bytes()
        e, d = episodes, task.num_devices
        policy_sum = policy_encoded.new_zeros(e, d, policy_encoded.shape[1])
        cost_sum = cost_encoded.new_zeros(e, d, cost_encoded.shape[1])
        used = np.zeros((e, d), dtype=np.int64)
        devices = np.full((e, len(order)), -1, dtype=np.int64)
        legal = np.ones(e, dtype=bool)
        log_probs, entropies = [], []
        ahead = Lookahead(task, costnet, e) if self.lookahead is not None else None
        for step, table in enumerate(order):
            with torch.no_grad():
                predicted_costs = costnet.device_costs(cost_sum)
            parts = [policy_sum, self.cost_encoder(predicted_costs)]
            if self.table_aware:
                parts.append(policy_encoded[table].expand(e, d, -1))
            logits = self.scorer(torch.cat(parts, dim=-1)).squeeze(-1)
            if ahead is not None:
                placed = ahead.with_table(cost_sum.numpy(), cost_encoded[table].numpy())
                logits = logits - self.lookahead * torch.from_numpy(ahead.regret(table, placed))
            action, log_p, entropy, stuck = masked_choice(
                logits, guard.mask(step, used, devices), greedy, generator
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
            if ahead is not None:
                ahead.place(table, picked, placed)
        with torch.no_grad():
            predicted = episodes_overall(costnet, task, devices, cost_sum)
        return Rollout(
            devices,
            torch.stack(log_probs).sum(0),
            torch.stack(entropies).mean(0),
            predicted,
            legal,
        )


def linear_weights(net: nn.Sequential) -> list[tuple[np.ndarray, np.ndarray]]:
    """(weight transposed, bias) of each Linear of an `mlp`, as float32 NumPy arrays."""
    return [
        (layer.weight.detach().numpy().T.copy(), layer.bias.detach().numpy().copy())
        for layer in net
        if isinstance(layer, nn.Linear)
    ]


class DeviceScorer:
    """The policy's device score as NumPy, arranged so a device costs work only when it changes.

    A device's state is [policy sum ; cost sum]. The three per-device cost heads run as one
    product; their output layer and the policy's cost encoder (linear, no activation between)
    are folded into one (an empty device's costs are zero, as in `CostNet.device_costs`).
    The scorer's first layer is linear in [policy sum ; cost encoding ;
    table encoding], so a device's share is cached and, for a table-aware policy, the table's
    share is added per step; otherwise whole logits are cached.
    """

    def __init__(self, policy: PlacementPolicy, costnet: CostNet):
        heads = [linear_weights(head) for head in costnet.device_heads]
        self.embed = policy.config["embed"]
        self.head_in = np.concatenate([h[0][0] for h in heads], axis=1)  # [cost embed, 3 x hid]
        self.head_in_bias = np.concatenate([h[0][1] for h in heads])
        head_out = np.zeros((self.head_in.shape[1], len(heads)), dtype=np.float32)
        for i, h in enumerate(heads):  # block diagonal: head i reads its own hidden units
            rows = len(h[1][0])
            head_out[i * rows : (i + 1) * rows, i] = h[1][0][:, 0]
        head_out_bias = np.concatenate([h[1][1] for h in heads])
        ((cost_w, cost_b),) = linear_weights(policy.cost_encoder)
        # the heads' output, zero for an empty device (CostNet.device_costs), then the encoder
        self.cost_w, self.cost_head_b, self.cost_b = (
            head_out @ cost_w,
            head_out_bias @ cost_w,
            cost_b,
        )
        # the heads' linear terms in the device sum (CostNet.skip), through the same encoder
        self.skip_w = None
        if costnet.skip is not None:
            self.skip_w = costnet.skip.weight.detach().numpy().T @ cost_w
        # the hybrid design's analytic costs, through the encoder's weights alone
        self.base, self.base_w, self.cost_embed = costnet.numpy_base(), cost_w, costnet.embed
        (w1, self.b1), (w2, b2) = linear_weights(policy.scorer)
        self.w1_policy = w1[: self.embed]
        self.w1_cost = w1[self.embed : 2 * self.embed]
        self.w1_table = w1[2 * self.embed :]
        self.w2, self.b2 = w2[:, 0], b2[0]

    def device_part(self, state: np.ndarray) -> np.ndarray:
        """[n, hidden] first-layer pre-activation of device states [n, embed + cost embed]
        without the table's share."""
        policy_sum, cost_sum = state[:, : self.embed], state[:, self.embed :]
        learned = cost_sum[:, : self.cost_embed]
        hidden = np.maximum(learned @ self.head_in + self.head_in_bias, 0)
        occupied = np.abs(cost_sum).sum(axis=-1, keepdims=True) > 0
        head_costs = hidden @ self.cost_w + self.cost_head_b
        if self.skip_w is not None:
            head_costs = head_costs + learned @ self.skip_w
        if self.base is not None:
            head_costs = head_costs + self.base(cost_sum) @ self.base_w
        encoded_costs = np.maximum(occupied * head_costs + self.cost_b, 0)
        return policy_sum @ self.w1_policy + encoded_costs @ self.w1_cost + self.b1

    def logits(self, device_part: np.ndarray, table_encoded: np.ndarray | None) -> np.ndarray:
        """Scores [...] from device parts [..., hidden] (and the placed table's encoding)."""
        if table_encoded is not None:
            device_part = device_part + table_encoded @ self.w1_table
        return np.maximum(device_part, 0) @ self.w2 + self.b2


def fast_choice(
    logits: np.ndarray, allowed: np.ndarray, greedy: int, generator: torch.Generator | None
) -> np.ndarray:
    """`masked_choice`'s devices in NumPy: the first `greedy` episodes take the best allowed
    device, the others sample. `allowed` [E, D] must have a device in every row.

    Sampling draws what torch.multinomial draws for one sample of each sampled row (q ~ Exp(1)
    of their shape from `generator`, then argmax of p / q), so a seed gives the same samples.
    """
    masked = np.where(allowed, logits, -np.inf)
    action = masked.argmax(axis=1)
    if greedy < len(masked):
        shifted = masked[greedy:]
        probs = np.exp(shifted - shifted.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        q = torch.empty(probs.shape).exponential_(generator=generator).numpy()
        action[greedy:] = (probs / q).argmax(axis=1)
    return action


def step_statistics(
    logits: np.ndarray, allowed: np.ndarray, action: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(log-probability of the action, entropy) per episode of one step, from its logits and
    allowed devices [E, D] and actions [E]: the masked softmax the reference samples from."""
    masked = np.where(allowed, logits, -np.inf)
    shifted = masked - masked.max(axis=-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    entropy = -(np.exp(log_p) * np.where(allowed, log_p, 0)).sum(axis=-1)
    return log_p[np.arange(len(action)), action], entropy


# How often (in tables placed) a rollout with a deadline checks its pace (after its first table,
# and then every PACE_CHECK); whether the deadline has passed it checks at every table, since a
# step can take most of a second where memory binds (the completion guard's packing checks).
PACE_CHECK = 32


@torch.no_grad()
def fast_rollout(
    policy: PlacementPolicy,
    task: PlacementTask,
    costnet: CostNet,
    greedy: int,
    sampled: int,
    generator: torch.Generator | None = None,
    deadline: Deadline | None = None,
) -> Rollout | None:
    """`greedy` argmax episodes, then `sampled` ones, as `PlacementPolicy.rollout` would run
    them but without gradients: per step only the devices just chosen are re-scored. The sums
    add the same float32 numbers in the same order as the reference.

    With a `deadline`, after its first table and every `PACE_CHECK` tables the rollout projects
    when it would end: past the deadline, it drops the sampled episodes (the greedy ones are the
    same without them); once the deadline has passed (checked at every table), it gives up and
    returns None."""
    features, cost_encoded, order, guard = table_order(task, costnet)
    policy_encoded = policy.table_encoder(features).numpy()
    encoded = np.concatenate([policy_encoded, cost_encoded.numpy()], axis=1)
    scorer = DeviceScorer(policy, costnet)
    sizes = task.table_bytes()
    e, d, t = greedy + sampled, task.num_devices, len(order)
    state = np.zeros((e, d, encoded.shape[1]), dtype=np.float32)  # [policy sum ; cost sum]
    empty = scorer.device_part(state[0, :1])
    # a table-aware policy adds the table's share per step; otherwise whole scores are cached
    cached = np.repeat(empty if policy.table_aware else scorer.logits(empty, None), e * d, axis=0)
    cached = cached.reshape(e, d, *cached.shape[1:])
    used = np.zeros((e, d), dtype=np.int64)
    actions = np.empty((t, e), dtype=np.int64)
    table_device = np.full((e, t), -1, dtype=np.int64)  # for the constraints' mask
    log_prob, entropy = np.zeros(e, dtype=np.float32), np.zeros(e, dtype=np.float32)
    legal, rows = np.ones(e, dtype=bool), np.arange(e)
    ahead = Lookahead(task, costnet, e) if policy.lookahead is not None else None
    embed = policy_encoded.shape[1]
    began = time.perf_counter()
    for step, table in enumerate(order):
        if deadline is not None and step and deadline.passed():
            return None
        if deadline is not None and (step == 1 or (step and step % PACE_CHECK == 0)):
            projected = began + (time.perf_counter() - began) * t / step
            if projected > deadline.at and e > greedy:  # the samples would not finish
                e, rows = greedy, rows[:greedy]
                state, cached, used, actions = state[:e], cached[:e], used[:e], actions[:, :e]
                table_device = table_device[:e]
                log_prob, entropy, legal = log_prob[:e], entropy[:e], legal[:e]
                if ahead is not None:
                    ahead.keep(e)
        if policy.table_aware:
            logits = scorer.logits(cached, policy_encoded[table])
        else:
            logits = cached
        if ahead is not None:
            placed = ahead.with_table(state[:, :, embed:], encoded[table, embed:])
            weight = np.float32(policy.lookahead.item())  # float32 as in the reference
            logits = logits - weight * ahead.regret(table, placed)
        allowed = guard.mask(step, used, table_device)
        stuck = ~allowed.any(axis=1)
        if stuck.any():  # picks among all devices, to finish and be marked illegal
            legal &= ~stuck
            allowed[stuck] = True
        action = actions[step] = fast_choice(logits, allowed, greedy, generator)
        taken, spread = step_statistics(logits, allowed, action)
        log_prob += taken
        entropy += spread
        changed = state[rows, action] + encoded[table]
        state[rows, action] = changed
        part = scorer.device_part(changed)
        cached[rows, action] = part if policy.table_aware else scorer.logits(part, None)
        used[rows, action] += sizes[table]
        table_device[:, table] = action
        if ahead is not None:
            ahead.place(table, action, placed)
    devices = np.empty((e, t), dtype=np.int64)
    devices[:, order] = actions.T
    cost_sum = torch.from_numpy(state[:, :, policy_encoded.shape[1] :])
    predicted = episodes_overall(costnet, task, devices, cost_sum)
    entropy /= max(t, 1)
    return Rollout(devices, torch.from_numpy(log_prob), torch.from_numpy(entropy), predicted, legal)
