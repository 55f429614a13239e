"""The pre-trained model shipped in the package: `--method dreamshard` before any training.

`dreamshard pretrain` fits a "quantities" cost network on the broad, domain-randomised family
of `learn/pretrain_data.py` (thousands of tasks, each labelled by its own drawn analytic model)
and writes it, with an untrained policy, to a model file and a manifest beside it: the command,
seed and settings that made it, and its error on held-out tasks of the same family. The package
ships the file it wrote as `learn/shipped/model.pt` (`make shipped-model` remakes it, seeded).

What ships, plainly: the cost network is trained; the policy is not (its learned part starts
at zero, so its rollout is the cost network's one-step lookahead: the network's greedy). The
planner around it (heuristic candidates, the margin, the local search) does the rest.

`dreamshard place --method dreamshard` without `--model` plans with it, and `dreamshard train`
starts from it unless told `--init-model none` (fine-tuning: on real hardware the simulated
prior and then the measurements refine it; `learn/train.py`).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from dreamshard.files import write_json_atomic
from dreamshard.learn.costnet import CostNet
from dreamshard.learn.costnet_fit import (
    costnet_errors,
    example_batch,
    fit_costnet,
    spearman_within_tasks,
)
from dreamshard.learn.model_file import DreamShardModel, save_model
from dreamshard.learn.policy import PlacementPolicy
from dreamshard.learn.pretrain_data import FAMILY_RANGES, pretrain_examples
from dreamshard.learn.train_config import SHIPPED_DIR, PretrainConfig, TrainConfig
from dreamshard.placement.heuristics import HEURISTIC_KEYS
from dreamshard.progress import Progress
from dreamshard.tables.traces import DEFAULT_BATCH

MANIFEST = "manifest.json"
# the exchange the shipped network models until a planner tells it the real one (`on_topology`)
SHIPPED_COMM = {"topology": "cpu-gloo", "batch": DEFAULT_BATCH}
WEIGHT_LR_FACTOR = 10.0


@dataclass
class _FitState:  # what `fit_costnet` reads and writes of a training run's state
    costnet: CostNet
    costnet_optimizer: torch.optim.Optimizer
    rng: np.random.Generator
    iteration: int = 0


def pretrain_model(config: PretrainConfig, log=print) -> DreamShardModel:
    """Fit the shipped cost networks (`config.members` of them, seeds `config.seed`..: the
    first is the model's, the others its ensemble), calibrate the ensemble's confidence and
    measure the first on held-out tasks; the model with its manifest as metadata."""
    start = time.monotonic()
    progress = Progress(config.tasks + 2 * config.heldout, "pre-training data (tasks)")
    examples, heldout, calibration = (
        pretrain_examples(
            seed, count, config.placements, None, _step(progress), config.pool, randomise
        )
        for seed, count, randomise in (
            (config.seed, config.tasks, True),
            (config.seed + 1, config.heldout, True),
            (config.seed + 2, config.heldout, False),
        )
    )
    examples, heldout, calibration = list(examples), list(heldout), list(calibration)
    progress.close()
    log(
        f"{len(examples)} placements of {config.tasks} tasks; {config.heldout} tasks held out "
        f"for the errors, {config.heldout} more for the confidence"
    )
    members, losses = [], []
    for k in range(config.members):
        costnet, loss = fit_member(examples, config, config.seed + k, k)
        members.append(costnet)
        losses.append(loss)
    costnet = members[0]
    errors = costnet_errors(costnet, heldout)
    rho, ranked = spearman_within_tasks(costnet, heldout)
    confidence = calibrate_confidence(members, calibration) if len(members) > 1 else {}
    log(
        f"held out ({config.heldout} tasks of the family): overall MAPE "
        f"{errors['overall_mape']:.1%}, forward {errors['fwd_comp_mape']:.1%}, backward "
        f"{errors['bwd_comp_mape']:.1%}; Spearman within a task {rho:.3f} ({ranked} tasks)"
        + (
            f"; confidence: 90% of gains within {confidence['z90']:.2f} spreads"
            if confidence
            else ""
        )
    )
    metadata = {
        "ranges": FAMILY_RANGES,
        "confidence": confidence,
        "shipped": {
            "command": "dreamshard pretrain " + " ".join(_flags(config)),
            "settings": asdict(config),
            "placements": len(examples),
            "seconds": round(time.monotonic() - start, 1),
            "final_loss": losses,
            "heldout": {**errors, "spearman_within_task": rho, "tasks_ranked": ranked},
            "confidence": confidence,
            "policy": "untrained: its rollout is the cost network's one-step lookahead",
            "torch": str(torch.__version__),
            "python": sys.version.split()[0],
        },
    }
    return DreamShardModel(costnet, PlacementPolicy(lookahead=True), metadata, members[1:])


def fit_member(
    examples: list, config: PretrainConfig, seed: int, index: int
) -> tuple[CostNet, float]:
    """One wide "quantities" network fitted on `examples` from `seed` (its start and batches),
    and its mean loss over the last twentieth of the steps. `fit_costnet` runs the steps in
    twenty parts (its learning rate decays over all of them), for a progress line."""
    torch.manual_seed(seed)
    costnet = CostNet(comm=dict(SHIPPED_COMM), encoder="quantities", batch=DEFAULT_BATCH, wide=True)
    state = _FitState(costnet, shipped_optimizer(costnet, config), np.random.default_rng(seed))
    chunk = max(1, config.steps // 20)
    parts = config.steps // chunk
    fit = TrainConfig(
        iterations=parts,
        costnet_steps=chunk,
        costnet_batch=config.batch,
        learning_rate=config.learning_rate,
        costnet_loss=config.loss,
    )
    progress = Progress(parts, f"fitting cost network {index + 1}/{config.members}")
    loss = float("nan")
    for part in range(parts):
        state.iteration = part
        loss = float(np.mean(fit_costnet(state, fit, examples)))
        progress.step(f"loss {loss:.4f}")
    progress.close()
    return costnet, loss


def calibrate_confidence(members: list[CostNet], examples: list) -> dict:
    """How many ensemble spreads a predicted gain's 90% interval spans: on held-out tasks of the
    family labelled by the centre of the randomisation (the calibrated weights: labelled by
    their own drawn models, the spread of the draws swamps the networks' own and the interval
    came out 6.7 spreads wide, covering 100% of out-of-distribution gains), each placement's
    gain over the task's heuristic placement predicted cheapest, true against predicted (the
    members' mean), in units of the members' standard deviation; its 90% quantile. Only one
    scalar is fitted there; the networks never see those labels."""
    by_task: dict[str, list] = {}
    for example in examples:
        by_task.setdefault(example.task, []).append(example)
    scaled = []
    for group in by_task.values():
        predicted = np.stack([member_overall(c, group) for c in members])  # [K, P]
        true = np.array([e.overall for e in group])
        scaled += gain_misses(predicted, true, [e.method in HEURISTIC_KEYS for e in group])
    return {"z90": float(np.quantile(scaled, 0.9)), "pairs": len(scaled), "members": len(members)}


def gain_misses(predicted: np.ndarray, true: np.ndarray, heuristic: list[bool]) -> list[float]:
    """For each placement of one task but the reference (of those marked `heuristic`, the one
    the members predict cheapest on average), how far its true gain over the reference lies
    from the members' mean predicted gain, in the members' standard deviations (`predicted`
    [members, placements] overall ms, `true` [placements]); a nominal 90% interval covers the
    gain when this is at most z90. Placements on which the members agree exactly are left out;
    no reference, no misses."""
    marked = [i for i, h in enumerate(heuristic) if h]
    if not marked:
        return []
    ref = min(marked, key=lambda i: predicted[:, i].mean())
    gains = 1 - predicted / predicted[:, ref : ref + 1]
    true_gain = 1 - true / true[ref]
    spread = gains.std(axis=0, ddof=1)
    return [
        float(abs(true_gain[i] - gains[:, i].mean()) / spread[i])
        for i in range(len(true))
        if i != ref and spread[i] > 0
    ]


@torch.no_grad()
def member_overall(costnet: CostNet, examples: list) -> np.ndarray:
    """A network's predicted overall ms of examples."""
    _, overall = costnet(example_batch(costnet, examples))
    return (overall * costnet.scale).numpy()


def shipped_optimizer(costnet: CostNet, config: PretrainConfig) -> torch.optim.Optimizer:
    """Adam; the quantity weights' logs step `WEIGHT_LR_FACTOR` x faster (a log moves a
    weight by a ratio: they start orders of magnitude from where they end)."""
    logs = [costnet.quantity_weight.log_weight]
    rest = [p for p in costnet.parameters() if p is not logs[0]]
    fast = config.learning_rate * WEIGHT_LR_FACTOR
    return torch.optim.Adam(
        [
            {"params": rest, "base_lr": config.learning_rate},
            {"params": logs, "lr": fast, "base_lr": fast},
        ],
        lr=config.learning_rate,
    )


def _step(progress: Progress):
    return lambda done: progress.step(f"{done} tasks")


def _flags(config: PretrainConfig) -> list[str]:
    defaults = PretrainConfig()
    return [
        f"--{name.replace('_', '-')} {value}"
        for name, value in asdict(config).items()
        if value != getattr(defaults, name) or name in ("out", "seed")
    ]


def save_shipped(model: DreamShardModel, out: str | Path) -> Path:
    """The model file and, beside it, its manifest (with the file's sha256); both atomically."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_model(model, out)
    manifest = dict(model.metadata["shipped"])
    manifest["file"] = out.name
    manifest["sha256"] = hashlib.sha256(out.read_bytes()).hexdigest()
    manifest["bytes"] = out.stat().st_size
    write_json_atomic(out.with_name(MANIFEST), manifest)
    return out


def shipped_manifest() -> dict:
    path = SHIPPED_DIR / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else {}
