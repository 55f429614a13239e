"""Settings of an RNN placer's training (kept free of torch so the CLI starts fast).

A fair baseline trains the RNN on the same MDP as the DreamShard policy it is compared with:
the cost network of that model, the tasks of its suite, and as many REINFORCE updates of as
many episodes as the policy got. Settings left open (None, "") are read from the model's
metadata by `fair_config`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dreamshard.errors import DreamshardError


@dataclass
class RnnTrainConfig:
    suite: str = ""  # "": the model's; its device count is the only one the placer will serve
    updates: int | None = None  # None: as many as the model's policy got
    episodes: int | None = None  # None: the model's policy's episodes per update
    # The policy's 5e-4 barely moves the LSTM in 100 updates; 1e-2 did best on the cost
    # network's predictions of training tasks in a sweep (docs/references.md).
    learning_rate: float = 1e-2
    entropy_weight: float = 1e-3
    train_tasks: int | None = None  # None: the model's
    hidden: int = 64
    seed: int = 0


@dataclass
class PolicyBudget:
    """How the DreamShard policy of a model was trained, from the model's metadata."""

    updates: int  # REINFORCE updates: iterations run x policy updates per iteration
    episodes: int  # episodes per update
    iterations: int
    updates_per_iteration: int
    started_from: str  # the model the policy started from ("": from scratch; not counted)


def policy_budget(metadata: dict) -> PolicyBudget | None:
    """The policy's training budget, or None where the model records none (a cost network
    fitted alone, `dreamshard train-costnet`, has an untrained policy)."""
    config, history = metadata.get("config"), metadata.get("history")
    if not isinstance(config, dict) or not history:
        return None
    try:
        per_iteration, episodes = int(config["policy_updates"]), int(config["episodes"])
    except (KeyError, TypeError, ValueError):
        return None
    return PolicyBudget(
        len(history) * per_iteration,
        episodes,
        len(history),
        per_iteration,
        str(config.get("init_model") or ""),
    )


def fair_config(
    config: RnnTrainConfig, metadata: dict, source: str = "the model"
) -> RnnTrainConfig:
    """`config` with what it leaves open taken from the model: its suite, its number of
    training tasks, and its policy's updates and episodes per update."""
    budget = policy_budget(metadata)
    model_config = metadata.get("config") if isinstance(metadata.get("config"), dict) else {}
    if budget is None and (config.updates is None or config.episodes is None):
        raise DreamshardError(
            f"{source} records no policy training (a cost network fitted alone?), so the "
            "RNN's budget cannot match it: pass --updates and --episodes"
        )
    suite = config.suite or str(metadata.get("suite") or "")
    if not suite:
        raise DreamshardError(f"{source} does not record its suite: pass --suite")
    return replace(
        config,
        suite=suite,
        updates=config.updates if config.updates is not None else budget.updates,
        episodes=config.episodes if config.episodes is not None else budget.episodes,
        train_tasks=config.train_tasks or int(model_config.get("train_tasks", 50)),
    )
