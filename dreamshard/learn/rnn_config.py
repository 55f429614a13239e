"""Settings of an RNN placer's training (kept free of torch so the CLI starts fast)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RnnTrainConfig:
    suite: str = "cpu-50x4"  # its device count is the only one the placer will serve
    updates: int = 200
    episodes: int = 10
    learning_rate: float = 5e-4
    entropy_weight: float = 1e-3
    train_tasks: int = 50
    hidden: int = 64
    seed: int = 0
