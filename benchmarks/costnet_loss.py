"""The cost network's loss and design: the paper's MSE on scaled costs against relative and
log-space losses, and the paper's ReLU table encoder against the "exp" design (costnet.py), on
the same data and seeds.

Run: .venv/bin/python benchmarks/costnet_loss.py [--dataset PATH] [--seeds 3] [--steps 1000]
        [--losses mse,relative,log] [--encoders relu,exp]

The data are feature_ablation.py's: by default a simulated cost dataset made here (heuristic
and random placements of the suite's training tasks; held out: placements of its test tasks),
or with `--dataset PATH` a stored one (e.g. fbgemm measurements; held out: its test tasks, else
every fifth task). Per design, loss and seed, a fresh network fitted with `fit_costnet`; on
held-out placements: MAPE per head, the overall cost's bias (mean signed relative error;
negative: predicts too low) and its Spearman correlation within a task. Prints a table; with
`--out`, writes it as markdown.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

import numpy as np
import torch
from feature_ablation import (
    HEADS,
    dataset_data,
    learned_heads,
    log,
    simulated_data,
    train_config,
)

from dreamshard.costs.backends import describe_costs
from dreamshard.files import write_text_atomic
from dreamshard.learn.costnet_fit import costnet_errors, fit_costnet, spearman_within_tasks
from dreamshard.learn.train import fresh_state
from dreamshard.learn.train_config import COSTNET_ENCODERS, COSTNET_LOSSES
from dreamshard.report import format_table, markdown_table


def fit_and_score(data, loss: str, seed: int, steps: int, encoder: str = "relu") -> dict:
    config = replace(train_config(data, seed, steps, loss), costnet_encoder=encoder)
    state = fresh_state(config)
    fit_costnet(state, config, data.train)
    errors = costnet_errors(state.costnet, data.held_out)
    spearman, _ = spearman_within_tasks(state.costnet, data.held_out)
    return {**errors, "spearman": spearman}


def spread(runs: list[dict], key: str) -> str:
    """Mean over seeds, with the range."""
    values = np.array([r[key] for r in runs])
    return f"{values.mean():+.3f} ({values.min():+.3f}..{values.max():+.3f})"


def main(argv: list[str] | None = None) -> list[list[object]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", help="a stored cost dataset (default: simulated, made here)")
    parser.add_argument("--suite", default="cpu-50x4")
    parser.add_argument("--placements", type=int, default=1000)
    parser.add_argument("--held-out", type=int, default=200)
    parser.add_argument("--held-out-tasks", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--losses", default=",".join(COSTNET_LOSSES))
    parser.add_argument("--encoders", default="relu", help="designs, e.g. relu,exp")
    parser.add_argument("--out", help="also write the table to this markdown file")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # small networks: faster on one thread here
    began = time.monotonic()
    if args.dataset:
        data = dataset_data(args.dataset)
    else:
        data = simulated_data(args.suite, args.placements, args.held_out, args.held_out_tasks)
    heads = [h for h in learned_heads(data) if h in HEADS]
    log(data.source)
    header = ["design", "loss", *(f"{h} MAPE" for h in heads), "overall bias", "Spearman in task"]
    rows = []
    for encoder in args.encoders.split(","):
        if encoder not in COSTNET_ENCODERS:
            parser.error(f"unknown design {encoder!r}; choose from {', '.join(COSTNET_ENCODERS)}")
        for loss in args.losses.split(","):
            runs = [
                fit_and_score(data, loss, seed, args.steps, encoder) for seed in range(args.seeds)
            ]
            keys = [*(f"{h}_mape" for h in heads), "overall_bias", "spearman"]
            rows.append([encoder, loss, *(spread(runs, key) for key in keys)])
            log(f"{encoder} {loss}: done")
    note = (
        f"Costs: {describe_costs(data.config)}. Data: {data.source}. {args.seeds} seeds x "
        f"{args.steps} steps per design and loss; mean (min..max over seeds); "
        f"{(time.monotonic() - began) / 60:.1f} min."
    )
    print(note + "\n\n" + format_table(header, rows))
    if args.out:
        write_text_atomic(args.out, f"{note}\n\n{markdown_table(header, rows)}\n")
    return rows


if __name__ == "__main__":
    sys.exit(main() and 0)
