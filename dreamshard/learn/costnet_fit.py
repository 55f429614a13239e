"""Fitting the cost network, and measuring how well it predicts."""

from __future__ import annotations

import numpy as np
import torch
from scipy import stats

from dreamshard.learn.costnet import DEVICE_TERMS, CostNet, make_batch
from dreamshard.learn.costnet_data import Example
from dreamshard.learn.train_config import COSTNET_LOSSES, fitting_loss, quantities_fitted


def example_batch(costnet: CostNet, examples: list[Example]):
    """The examples as one batch; a network with modeled communication gets the measured
    placements' all-to-all times (the dataset's bwd_comm, which that same model produced)."""
    comm = None
    if costnet.comm is not None:
        comm = np.concatenate([e.device_targets[:, 1] for e in examples])
    return make_batch([e.as_input() for e in examples], comm, [e.batch for e in examples])


FLOOR = 0.02  # scaled costs (fractions of the median overall cost) below this count as this
TINY = 1e-6


def costnet_loss(kind: str, predicted: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """One head's loss on scaled costs (ms / the network's scale).

    "mse" (the paper's) weighs an error by its size in ms, so the cheap devices and placements
    hardly count; "relative" and "log" weigh it relative to the cost, as MAPE does. "log"
    compares log costs (the prediction made positive by a sharp softplus), so over- and
    under-prediction by the same factor cost the same. Both skip zero targets (empty devices).
    """
    if kind == "mse":
        return torch.nn.functional.mse_loss(predicted, target)
    keep = target > 0
    if not keep.any():
        return predicted.sum() * 0.0
    predicted, target = predicted[keep], target[keep]
    if kind == "relative":
        return ((predicted - target) / target.clamp(min=FLOOR)).pow(2).mean()
    if kind == "log":
        positive = torch.nn.functional.softplus(predicted, beta=20.0)
        return (torch.log(positive + FLOOR) - torch.log(target + FLOOR)).pow(2).mean()
    if kind == "log-ratio":  # no floor, so costs spanning orders of magnitude all count; below
        # a tenth of its target a prediction's log continues as a straight line, so one far
        # below zero still has a gradient (the pre-training's loss, learn/shipped.py)
        knee = target / 10
        logs = torch.where(
            predicted > knee,
            torch.log(predicted.clamp(min=TINY)),
            torch.log(knee) + (predicted - knee) / knee,
        )
        return (logs - torch.log(target)).pow(2).mean()
    raise ValueError(f"unknown cost-network loss {kind!r}; choose one of {COSTNET_LOSSES}")


def _targets(examples: list[Example]) -> tuple[torch.Tensor, torch.Tensor]:
    device = torch.from_numpy(np.concatenate([e.device_targets for e in examples]))
    overall = torch.tensor([e.overall for e in examples], dtype=torch.float32)
    return device, overall


def fitted_heads(costnet: CostNet) -> list[int]:
    """The device heads the loss fits: all three, but the bwd_comm head where the exchange is
    modeled (the overall reads the model's, and its labels depend on links the network is not
    told of: pre-training draws them)."""
    skip = DEVICE_TERMS.index("bwd_comm") if costnet.comm is not None else None
    return [k for k in range(len(DEVICE_TERMS)) if k != skip]


def fitted_parameters(costnet: CostNet, config) -> list[torch.nn.Parameter]:
    """The weights of `costnet` that measurements fit under `config`: its quantity weights
    alone (what a unit of each kernel quantity costs, per head) where `quantities_fitted` and
    it has them, so the structure it learned on a broad family stays; else all of them."""
    if quantities_fitted(config) and costnet.quantity_weight is not None:
        return list(costnet.quantity_weight.parameters())
    return list(costnet.parameters())


def measurement_optimizer(costnet: CostNet, config) -> torch.optim.Adam:
    """Adam over `fitted_parameters`, at the run's learning rate."""
    return torch.optim.Adam(fitted_parameters(costnet, config), lr=config.learning_rate)


def fit_costnet(
    state, config, examples: list[Example], replay: list[Example] | None = None
) -> list[float]:
    """`config.costnet_steps` Adam steps on random batches; the lr decays over the whole run.
    With `replay` (rehearsal: what the network was pre-trained on), `config.rehearsal_share`
    of every batch comes from it.

    The first fit fixes the network's target scale (the median overall cost seen), so later
    iterations keep refining the same function.
    """
    costnet: CostNet = state.costnet
    if not examples:
        return []
    if float(costnet.scale) == 1.0:
        costnet.scale.fill_(float(np.median([e.overall for e in examples])))
    total = config.iterations * config.costnet_steps
    heads = fitted_heads(costnet)
    kind = fitting_loss(config)
    losses = []
    costnet.train()
    for step in range(config.costnet_steps):
        global_step = state.iteration * config.costnet_steps + step
        for group in state.costnet_optimizer.param_groups:
            base = group.get("base_lr", config.learning_rate)  # a group's own, if it has one
            group["lr"] = base * max(0.0, 1.0 - global_step / total)
        size = min(config.costnet_batch, len(examples))
        replayed = round(size * config.rehearsal_share) if replay else 0
        picks = state.rng.integers(len(examples), size=size - replayed)
        batch_examples = [examples[i] for i in picks]
        if replayed:
            batch_examples += [replay[i] for i in state.rng.integers(len(replay), size=replayed)]
        batch = example_batch(costnet, batch_examples)
        device_target, overall_target = _targets(batch_examples)
        device_pred, overall_pred = costnet(batch)
        scale = costnet.scale
        loss = sum(
            costnet_loss(kind, device_pred[:, k], device_target[:, k] / scale) for k in heads
        ) + costnet_loss(kind, overall_pred, overall_target / scale)
        costnet.zero_grad(set_to_none=True)  # weights the optimizer leaves alone too
        loss.backward()
        state.costnet_optimizer.step()
        losses.append(float(loss.detach()))
    costnet.eval()
    return losses


@torch.no_grad()
def costnet_errors(costnet: CostNet, examples: list[Example]) -> dict[str, float]:
    """Per-head MAE (ms) and MAPE, and the overall cost's Spearman rank correlation.

    With modeled communication the network's bwd_comm is the modeled all-to-all, as in
    `CostNet.predict_ms`: its error is zero by construction, the compute heads' is not.
    """
    batch = example_batch(costnet, examples)
    device_pred, overall_pred = costnet(batch)
    device_pred, overall_pred = device_pred * costnet.scale, overall_pred * costnet.scale
    if batch.device_comm is not None:
        device_pred[:, 1] = batch.device_comm
    device_true, overall_true = _targets(examples)
    errors: dict[str, float] = {}
    for k, term in enumerate(DEVICE_TERMS):
        true, pred = device_true[:, k], device_pred[:, k]
        keep = true > 1e-6  # empty devices have no kernel time
        errors[f"{term}_mae_ms"] = float((pred - true).abs()[keep].mean())
        errors[f"{term}_mape"] = float(((pred - true).abs() / true)[keep].mean())
    errors["overall_mae_ms"] = float((overall_pred - overall_true).abs().mean())
    errors["overall_mape"] = float(((overall_pred - overall_true).abs() / overall_true).mean())
    # the mean signed relative error: negative when the network predicts too low
    errors["overall_bias"] = float(((overall_pred - overall_true) / overall_true).mean())
    if len(examples) > 2:
        errors["overall_spearman"] = float(stats.spearmanr(overall_pred, overall_true).statistic)
    return errors


@torch.no_grad()
def spearman_within_tasks(
    costnet: CostNet, examples: list[Example], min_placements: int = 3
) -> tuple[float, int]:
    """(mean over tasks of the overall cost's Spearman correlation across that task's
    placements, tasks counted): the ranking a planner relies on when it picks among the
    placements of one task. Tasks with fewer than `min_placements` placements, or with one
    cost for all of them, do not count; NaN when none is left. A task whose predictions are
    all equal ranks nothing: 0.
    """
    by_task: dict[str, list[Example]] = {}
    for example in examples:
        by_task.setdefault(example.task, []).append(example)
    rhos = []
    for group in by_task.values():
        if len(group) < min_placements:
            continue
        true = [e.overall for e in group]
        if np.ptp(true) == 0:
            continue  # nothing to rank
        _, predicted = costnet(example_batch(costnet, group))
        if np.ptp(predicted.numpy()) == 0:
            rhos.append(0.0)
            continue
        rhos.append(float(stats.spearmanr(predicted.numpy(), true).statistic))
    return (float(np.mean(rhos)) if rhos else float("nan")), len(rhos)
