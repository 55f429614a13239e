"""The models a benchmark run evaluates: trained for the run when none is given (a DreamShard
model, an RNN placer against its cost network), and the sentence its report says about each."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

from dreamshard.cli.train import TRAIN_OPTIONS
from dreamshard.errors import DreamshardError
from dreamshard.learn.model_file import DreamShardModel, resolve_model
from dreamshard.learn.pretrain import wants_rehearsal
from dreamshard.learn.rnn import RnnPlacer, load_rnn, save_rnn, train_rnn
from dreamshard.learn.rnn_config import RnnTrainConfig
from dreamshard.learn.train import train
from dreamshard.learn.train_config import TrainConfig, fitting_loss, quantities_fitted
from dreamshard.state import state_dir

TRAINED_BY_RUN = "trained by this run on "  # how a report's note on such a model begins


def trained_on(model: DreamShardModel) -> str:
    """What a model's file says it was trained on: its suite, backend and (where recorded)
    topology, as "trained on cpu-50x4, simulated backend, cpu-gloo topology"."""
    meta = model.metadata
    if "shipped" in meta:  # the package's pre-trained model
        return f"pre-trained, shipped in the package (made by `{meta['shipped']['command']}`)"
    backend = re.search(r"'backend': '(\w+)'", str(meta.get("backend", "")))
    topology = re.search(r"'topology': '([\w-]+)'", str(meta.get("backend", "")))
    return (
        f"trained on {meta.get('suite', '?')}, {backend.group(1) if backend else '?'} backend"
        + (f", {topology.group(1)} topology" if topology else "")
    )


def train_command(model: DreamShardModel) -> str:
    """The `dreamshard train` command that makes `model` again from a fresh clone, rendered from
    the full config its file records (every option spelled out, so a later change of a default
    cannot change what it makes), or the shipped model's own command. "?" when that cannot be
    said: no config recorded, or one recorded before an option existed (today's default would
    stand in for whatever that version did) or with a setting no option takes."""
    meta = model.metadata
    if "shipped" in meta:
        return meta["shipped"]["command"]
    recorded = meta.get("config")
    if not isinstance(recorded, dict) or set(recorded) != {f.name for f in fields(TrainConfig)}:
        return "?"
    words = ["dreamshard", "train"]
    for name, value in recorded.items():
        option = TRAIN_OPTIONS.get(name)
        if option is None:
            if value != getattr(TrainConfig(), name):
                return "?"
            continue
        flag = option.get("flag", f"--{name.replace('_', '-')}")
        if option.get("action") == "store_true":
            words += [flag] if value else []
        elif option.get("action") == "store_false":
            words += [] if value else [flag]
        elif value in (None, "", [], ()):  # no word says "none": only the default may be
            if list(getattr(TrainConfig(), name) or []):
                return "?"
        else:
            shown = ",".join(map(str, value)) if isinstance(value, list | tuple) else value
            words += [flag, str(shown)]
    if "history" not in meta:  # the cost network alone, fitted on a stored dataset
        words.append("--costnet-only")
    return " ".join(words)


def training_note(config: TrainConfig) -> str:
    """The settings a model is trained with, in words."""
    devices = ",".join(map(str, config.warm_start_devices))
    topology = "" if config.topology == "auto" else f" ({config.topology} topology)"
    return (
        f"{config.suite}, {config.backend} backend{topology}: "
        f"{config.iterations} iterations of {config.placements_per_iteration} placements, warm "
        f"start {config.warm_start} heuristic and random placements"
        + (f" on {devices} devices" if devices else "")
        + (f" and {config.warm_start_split} of split tables" if config.warm_start_split else "")
        + (
            f", a simulated prior of {config.pretrain} placements ({config.pretrain_split} of "
            "split tables)"
            if config.pretrain and config.backend != "simulated"
            else ""
        )
        + (
            f", {config.rehearsal} tasks of the pre-training family rehearsed "
            f"({config.rehearsal_share:.0%} of each batch)"
            if wants_rehearsal(config)
            else ""
        )
        + (
            ", the measurements fitting the cost network's quantity weights only"
            if quantities_fitted(config)
            else ""
        )
        + f", {config.costnet_steps} cost-net steps per iteration, {config.policy_updates} "
        f"policy updates of {config.episodes} episodes, {fitting_loss(config)} loss, "
        f"{config.costnet_encoder} cost-network design, "
        f"{'a policy with' if config.lookahead else 'no'} one-step lookahead, seed {config.seed}"
    )


CHAMPION_URI = "models:/dreamshard-policy@champion"


def champion_or_none() -> DreamShardModel | None:
    """The registered champion when the tracking store (the state folder's, or
    $MLFLOW_TRACKING_URI) has one, else None."""
    if not (state_dir() / "mlflow.db").exists() and not os.environ.get("MLFLOW_TRACKING_URI"):
        return None
    try:
        return resolve_model(CHAMPION_URI)
    except DreamshardError:
        return None


def given_or_trained(
    given: str | None, config: TrainConfig, log: Callable[[str], None], fresh: bool = True
) -> tuple[DreamShardModel, str]:
    """The model `given` names (a model file, a `train --out` folder or an MLflow URI) and
    what it was trained on; without one, a model trained by this run (`train_for_run`)."""
    if given:
        model = resolve_model(given)
        return model, f"{given} ({trained_on(model)})"
    return train_for_run(config, log, fresh)


def train_for_run(
    config: TrainConfig, log: Callable[[str], None], fresh: bool = True
) -> tuple[DreamShardModel, str]:
    """A model trained by this run in `config.out`, and the report's sentence about it.

    `fresh`: an older run's checkpoints there are removed first (else training resumes them).
    """
    if fresh:
        shutil.rmtree(config.out, ignore_errors=True)
    start = time.monotonic()
    model = train(config, log=log)
    minutes = (time.monotonic() - start) / 60
    return model, (
        f"{TRAINED_BY_RUN}{training_note(config)}; {minutes:.1f} min, saved in "
        f"{Path(config.out) / 'model.pt'}"
    )


def rnn_for_run(
    model: DreamShardModel,
    config: RnnTrainConfig,
    path: Path,
    resume: bool,
    log: Callable[[str], None],
) -> tuple[RnnPlacer, str]:
    """An RNN placer trained by this run against `model`'s cost network and saved at `path`
    (with `resume`, the one an earlier session of the run saved there), and its sentence."""
    session = "an earlier session of this run"
    if resume and path.is_file():
        log(f"--resume: the RNN {session} trained, {path}")
        placer = load_rnn(path)
    else:
        log(f"training an RNN on {config.suite} against the model's cost network")
        placer = train_rnn(model, config, log=log)
        save_rnn(placer, path, config)
        session = "this run"
    return placer, (
        f"trained by {session} on {placer.metadata['train']['suite']} against the model's cost "
        f"network, {placer.metadata['budget']} ({path})"
    )
