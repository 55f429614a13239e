"""The cost network's loss and design: the paper's MSE on scaled costs against relative and
log-space losses, and the paper's ReLU table encoder against the "exp" design (costnet.py), on
the same data and seeds.

Run: .venv/bin/python benchmarks/costnet_loss.py [--dataset PATH] [--seeds 3] [--steps 1000]
        [--losses mse,relative,log] [--encoders relu,exp] [--priors 0,2000]

The data are feature_ablation.py's: by default a simulated cost dataset made here (heuristic
and random placements of the suite's training tasks; held out: placements of its test tasks),
or with `--dataset PATH` a stored one (e.g. fbgemm measurements; held out: its test tasks, else
every fifth task). Per design, loss and seed, a fresh network fitted with `fit_costnet`; on
held-out placements: MAPE per head, the overall cost's bias (mean signed relative error;
negative: predicts too low) and its Spearman correlation within a task. With a stored
real-hardware dataset, `--priors 0,2000` also compares fitting the simulated prior first
(learn/pretrain.py: that many simulated placements of the suite's training tasks, scaled to
the host by the fitted measurements, `--prior-steps` steps). Prints a table; with
`--out`, writes it as markdown.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
import torch

from benchmarks.feature_ablation import log, study_data
from benchmarks.parts.costnet_study import HEADS, fitted_scores, learned_heads, study_config
from benchmarks.script_entry import run_script
from dreamshard.costs.backends import describe_costs
from dreamshard.costs.dataset import CostDataset
from dreamshard.files import write_text_atomic
from dreamshard.learn.pretrain import measured_rows, pretrain_costnet
from dreamshard.learn.train_config import COSTNET_ENCODERS, COSTNET_LOSSES, TrainConfig
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.report import format_table, markdown_table


def fit_and_score(
    data, loss: str, seed: int, steps: int, encoder: str = "relu", prior=None
) -> dict:
    """Held-out errors of a fresh network fitted on `data.train`; `prior` (suite, rows,
    placements, steps): first fitted on that simulated prior."""
    config = replace(study_config(data, seed, steps, loss), costnet_encoder=encoder)
    before = None
    if prior is not None:
        suite, rows, placements, prior_steps = prior
        prior_config = replace(config, pretrain=placements, pretrain_steps=prior_steps)

        def before(state):
            pretrain_costnet(state, prior_config, suite, rows, log=lambda *_: None)

    return fitted_scores(config, data.train, data.held_out, before)


def prior_for(args, data, size: int):
    """(suite, fitted measurements, size, steps) for `fit_and_score`: the dataset's suite, and
    its rows of the fitted (not held-out) tasks for the host factor."""
    fitted = {e.task for e in data.train}
    rows = [r for r in measured_rows(CostDataset(args.dataset), data.config) if r["task"] in fitted]
    suite_name = next(iter(fitted)).split("/")[0]
    return make_suite(parse_suite_name(suite_name)), rows, size, args.prior_steps


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
    parser.add_argument(
        "--priors", default="0", help="simulated prior sizes with --dataset, e.g. 0,2000"
    )
    parser.add_argument("--prior-steps", type=int, default=TrainConfig.pretrain_steps)
    parser.add_argument("--out", help="also write the table to this markdown file")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # small networks: faster on one thread here
    began = time.monotonic()
    data = study_data(args)
    heads = [h for h in learned_heads(data) if h in HEADS]
    log(data.source)
    priors = [int(p) for p in args.priors.split(",")]
    if any(priors) and not args.dataset:
        parser.error("--priors needs --dataset: on simulated data the prior is the answer")
    header = ["design", "loss", "prior"]
    header += [*(f"{h} MAPE" for h in heads), "overall bias", "Spearman in task"]
    rows = []
    for encoder in args.encoders.split(","):
        if encoder not in COSTNET_ENCODERS:
            parser.error(f"unknown design {encoder!r}; choose from {', '.join(COSTNET_ENCODERS)}")
        for loss in args.losses.split(","):
            for size in priors:
                prior = prior_for(args, data, size) if size else None
                runs = [
                    fit_and_score(data, loss, seed, args.steps, encoder, prior)
                    for seed in range(args.seeds)
                ]
                keys = [*(f"{h}_mape" for h in heads), "overall_bias", "spearman"]
                rows.append([encoder, loss, size, *(spread(runs, key) for key in keys)])
                log(f"{encoder} {loss} prior {size}: done")
    note = (
        f"Costs: {describe_costs(data.config)}. Data: {data.source}. {args.seeds} seeds x "
        f"{args.steps} steps per design, loss and prior (the prior's own: {args.prior_steps}); "
        "mean (min..max over seeds); "
        f"{(time.monotonic() - began) / 60:.1f} min."
    )
    print(note + "\n\n" + format_table(header, rows))
    if args.out:
        write_text_atomic(args.out, f"{note}\n\n{markdown_table(header, rows)}\n")
    return rows


if __name__ == "__main__":
    run_script(main)
