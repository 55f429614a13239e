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

from dreamshard.errors import DreamshardError
from dreamshard.files import write_json_atomic
from dreamshard.learn.costnet import CostNet
from dreamshard.learn.costnet_fit import costnet_errors, fit_costnet, spearman_within_tasks
from dreamshard.learn.model_file import DreamShardModel, load_model, save_model
from dreamshard.learn.policy import PlacementPolicy
from dreamshard.learn.pretrain_data import FAMILY_RANGES, pretrain_examples
from dreamshard.learn.train_config import SHIPPED_DIR, SHIPPED_MODEL, PretrainConfig
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


@dataclass
class _FitConfig:  # the fields of TrainConfig that `fit_costnet` reads
    iterations: int
    costnet_steps: int
    costnet_batch: int
    learning_rate: float
    costnet_loss: str


def pretrain_model(config: PretrainConfig, log=print) -> DreamShardModel:
    """Fit the shipped cost network (`config`), measure it on held-out tasks, return the model
    with its manifest as metadata."""
    torch.manual_seed(config.seed)
    start = time.monotonic()
    progress = Progress(config.tasks + config.heldout, "pre-training data (tasks)")
    examples = pretrain_examples(
        config.seed, config.tasks, config.placements, None, _step(progress)
    )
    heldout = pretrain_examples(
        config.seed + 1, config.heldout, config.placements, None, _step(progress), config.pool
    )
    progress.close()
    log(f"{len(examples)} placements of {config.tasks} tasks, {len(heldout)} held out")
    costnet = CostNet(comm=dict(SHIPPED_COMM), encoder="quantities", batch=DEFAULT_BATCH, wide=True)
    state = _FitState(
        costnet, shipped_optimizer(costnet, config), np.random.default_rng(config.seed)
    )
    fit = _FitConfig(1, config.steps, config.batch, config.learning_rate, config.loss)
    chunk = max(1, config.steps // 20)
    progress = Progress(config.steps // chunk, "fitting the cost network")
    losses: list[float] = []
    for part in range(config.steps // chunk):
        state.iteration = part
        losses += fit_costnet(state, _chunk(fit, chunk, config.steps), examples)
        progress.step(f"loss {np.mean(losses[-chunk:]):.4f}")
    progress.close()
    errors = costnet_errors(costnet, heldout)
    rho, ranked = spearman_within_tasks(costnet, heldout)
    log(
        f"held out ({config.heldout} tasks of the family): overall MAPE "
        f"{errors['overall_mape']:.1%}, forward {errors['fwd_comp_mape']:.1%}, backward "
        f"{errors['bwd_comp_mape']:.1%}; Spearman within a task {rho:.3f} ({ranked} tasks)"
    )
    metadata = {
        "ranges": FAMILY_RANGES,
        "shipped": {
            "command": "dreamshard pretrain " + " ".join(_flags(config)),
            "settings": asdict(config),
            "placements": len(examples),
            "seconds": round(time.monotonic() - start, 1),
            "final_loss": float(np.mean(losses[-chunk:])),
            "heldout": {**errors, "spearman_within_task": rho, "tasks_ranked": ranked},
            "policy": "untrained: its rollout is the cost network's one-step lookahead",
            "torch": str(torch.__version__),
            "python": sys.version.split()[0],
        },
    }
    return DreamShardModel(costnet, PlacementPolicy(lookahead=True), metadata)


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


def _chunk(fit: _FitConfig, steps: int, total: int) -> _FitConfig:
    """`steps` of a run of `total`: the learning rate decays over the whole run."""
    return _FitConfig(total // steps, steps, fit.costnet_batch, fit.learning_rate, fit.costnet_loss)


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


def shipped_model() -> DreamShardModel:
    """The pre-trained model the package ships (DreamshardError if this install lacks it)."""
    if not SHIPPED_MODEL.is_file():
        raise DreamshardError(
            f"this install has no shipped model ({SHIPPED_MODEL}); make one with "
            "`make shipped-model`, or pass --model"
        )
    return load_model(SHIPPED_MODEL)


def shipped_manifest() -> dict:
    path = SHIPPED_DIR / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else {}
