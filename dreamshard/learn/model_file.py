"""Model files: cost network, policy, feature transform and training metadata, together.

Saved with `torch.save` as plain dictionaries of tensors and primitive values and loaded with
`weights_only=True`, so loading a file never runs code from it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import torch

from dreamshard.errors import DreamshardError
from dreamshard.files import atomic_path
from dreamshard.lazy import load_object
from dreamshard.learn.costnet import CostNet
from dreamshard.learn.policy import PlacementPolicy
from dreamshard.learn.train_config import SHIPPED, SHIPPED_MODEL
from dreamshard.tables.features import FEATURE_NAMES, FEATURE_TRANSFORM

MODEL_FORMAT = "dreamshard-model"


@dataclass
class DreamShardModel:
    costnet: CostNet
    policy: PlacementPolicy
    metadata: dict = field(default_factory=dict)
    # further cost networks fitted like `costnet` from other seeds (the shipped model's): their
    # spread is the planner's confidence in a predicted gain (planners/dreamshard_planner.py)
    ensemble: list[CostNet] = field(default_factory=list)


def model_state(model: DreamShardModel) -> dict:
    return {
        "format": MODEL_FORMAT,
        "version": 1,
        "feature_transform": FEATURE_TRANSFORM,
        "feature_names": list(FEATURE_NAMES),
        "costnet": {"config": model.costnet.config, "state": model.costnet.state_dict()},
        "policy": {"config": model.policy.config, "state": model.policy.state_dict()},
        "metadata": model.metadata,
        "ensemble": [{"config": c.config, "state": c.state_dict()} for c in model.ensemble],
    }


def model_fingerprint(model: DreamShardModel) -> str:
    """A short hash of the model's weights (cost network, policy, ensemble members; not its
    metadata): two models with the same fingerprint plan alike."""
    digest = hashlib.sha256()
    networks = [model.costnet, model.policy, *model.ensemble]
    for network in networks:
        for name, tensor in sorted(network.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def save_torch_atomic(data: dict, path: str | Path) -> None:
    """torch.save to a temporary file beside `path`, then rename it into place."""
    with atomic_path(path) as tmp:
        torch.save(data, tmp)


def save_model(model: DreamShardModel, path: str | Path) -> None:
    save_torch_atomic(model_state(model), path)


def read_torch_file(path: str | Path, what: str) -> dict:
    path = Path(path)
    if not path.is_file():
        raise DreamshardError(f"{what} {path} does not exist")
    try:
        data = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001  (garbage makes torch's unpickler fail any way)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DreamshardError(f"{path} is not a readable {what} (corrupt?): {first}") from None
    if not isinstance(data, dict):
        raise DreamshardError(f"{path} is not a {what}")
    return data


def check_features(data: dict, path: str | Path, retrain: str = "dreamshard train") -> None:
    """Refuse a saved network trained on other features than this version computes."""
    if data.get("feature_transform") != FEATURE_TRANSFORM or data.get("feature_names") != list(
        FEATURE_NAMES
    ):
        raise DreamshardError(
            f"{path} was trained on features {data.get('feature_transform')!r} "
            f"({len(data.get('feature_names') or [])} features); this version uses "
            f"{FEATURE_TRANSFORM!r} ({len(FEATURE_NAMES)}): retrain it with {retrain}"
        )


def model_from_state(data: dict, path: str | Path = "model") -> DreamShardModel:
    if data.get("format") != MODEL_FORMAT:
        raise DreamshardError(f"{path} is not a dreamshard model file")
    check_features(data, path)
    try:
        costnet = CostNet(**data["costnet"]["config"])
        state = data["costnet"]["state"]  # files from 0.1 also hold the paper's overall head
        costnet.load_state_dict({k: v for k, v in state.items() if not k.startswith("overall_")})
        policy = PlacementPolicy(**data["policy"]["config"])
        policy.load_state_dict(data["policy"]["state"])
        ensemble = []
        for member in data.get("ensemble") or []:
            ensemble.append(CostNet(**member["config"]))
            ensemble[-1].load_state_dict(member["state"])
            ensemble[-1].eval()
    except (KeyError, TypeError, RuntimeError) as exc:
        raise DreamshardError(f"{path}: the saved networks do not load: {exc}") from None
    costnet.eval()
    policy.eval()
    return DreamShardModel(costnet, policy, data.get("metadata", {}), ensemble)


def load_model(path: str | Path) -> DreamShardModel:
    return model_from_state(read_torch_file(path, "model file"), path)


MODEL_FILE = "model.pt"  # what `dreamshard train --out DIR` writes in DIR
# MLflow takes seconds to import and sits above this stage: named, loaded only for a URI
REGISTERED_MODEL_LOADER = "dreamshard.tracking:load_registered_model"


def shipped_model() -> DreamShardModel:
    """The pre-trained model the package ships (`learn/shipped.py` made it); DreamshardError
    if this install lacks it."""
    if not SHIPPED_MODEL.is_file():
        raise DreamshardError(
            f"this install has no shipped model ({SHIPPED_MODEL}); make one with "
            "`make shipped-model`, or pass --model"
        )
    return load_model(SHIPPED_MODEL)


def resolve_model(model: DreamShardModel | str | Path | None) -> DreamShardModel:
    """A model object as is; a model file; a `train --out` folder; an MLflow model URI
    (`models:/name@alias`, `runs:/id/policy`); or, None or "shipped", the pre-trained model
    the package ships (`learn/shipped.py`)."""
    if model is None or str(model) == SHIPPED:  # the pre-trained model in the package
        return shipped_model()
    if isinstance(model, DreamShardModel):
        return model
    text = str(model)
    if text.startswith(("models:/", "runs:/")):
        return load_object(REGISTERED_MODEL_LOADER)(text)
    path = Path(text)
    if path.is_dir():
        if not (path / MODEL_FILE).is_file():
            raise DreamshardError(
                f"{path} is a folder without {MODEL_FILE}: pass the folder `dreamshard train"
                " --out` wrote, or a model file"
            )
        path = path / MODEL_FILE
    return load_model(path)
