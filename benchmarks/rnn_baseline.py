"""The RNN baseline on a fair budget, on exact costs: RNN vs random vs the policy vs heuristics.

Run: .venv/bin/python benchmarks/rnn_baseline.py [--model RUN/model.pt] [--tasks 8]
         [--budgets 0,1,10] [--seeds 3] [--warm-start 1000 --costnet-steps 1000]
Without --model it trains one on cpu-50x4 with the simulated backend (`dreamshard train`
defaults unless told), in .dreamshard/rnn_baseline/model.

The RNN placer (`dreamshard.learn.rnn`) is trained against the model's cost network on the
model's suite, with the policy's budget times each of --budgets (1: as many updates of as many
episodes as the policy got; 0: untrained), --seeds seeds each. On held-out tasks of the suite,
on the simulated backend (every cost exact), it reports against the per-task best heuristic:
random (seed 0, and the mean over 10 seeds), the four heuristics, the policy's greedy
placement, the RNN's greedy placement (what `--method rnn` returns) and the mean of its
sampled episodes (what its training saw), plus the cost network's own view of the RNN's greedy
placements and the mean entropy of its choices. Ratios: geometric mean over tasks
[bootstrap 95% interval over tasks]; for RNN rows also over seeds. Writes
benchmarks/results/rnn_baseline.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from benchmarks.parts.models import given_or_trained
from benchmarks.parts.ratio_tables import interval_cell
from benchmarks.parts.report_files import host_note, write_report
from benchmarks.script_entry import run_script
from dreamshard.cli.train import config_from, training_options
from dreamshard.costs.backends import describe_costs
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.evaluation.evaluate import evaluate
from dreamshard.evaluation.rounds import geometric_mean
from dreamshard.learn.rnn import RnnPlacer, budget_note, rnn_place, train_rnn
from dreamshard.learn.rnn_config import RnnTrainConfig, fair_config, policy_budget
from dreamshard.placement.heuristics import random_place
from dreamshard.placement.registry import baseline_planners, method_names, named_planner
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import PlacementTask
from dreamshard.planners.dreamshard_planner import predicted_overall
from dreamshard.report import format_table
from dreamshard.state import state_dir

RESULTS = Path(__file__).parent / "results" / "rnn_baseline.md"
EPISODES = 10  # sampled episodes (and random seeds) averaged per task


def quiet(_line: str) -> None:
    """Training progress not shown: one line per trained RNN instead."""


def model_for(args: argparse.Namespace, log):
    out = str(state_dir() / "rnn_baseline" / "model")
    config = config_from(args, suite="cpu-50x4", backend="simulated", out=out)
    return given_or_trained(args.model, config, log)


@torch.no_grad()
def sampled_ratio(backend, task: PlacementTask, rollout, best: float) -> float:
    """Mean exact cost of a rollout's legal episodes, over the per-task best heuristic's."""
    legal = np.flatnonzero(rollout.legal)
    return (
        float(np.mean([backend.measure(task, rollout.placement(e, "")).overall for e in legal]))
        / best
    )


def train_placers(model, fair: RnnTrainConfig, args, log) -> dict[str, tuple[int, RnnPlacer]]:
    """RNNs by name 'rnn xB S' (budget multiple B, seed S): (updates, placer)."""
    placers = {}
    for multiple in [float(b) for b in args.budgets.split(",")]:
        for seed in range(args.seeds):
            updates = round(fair.updates * multiple)
            config = replace(fair, updates=updates, seed=args.seed + seed)
            placers[f"rnn x{multiple:g} {seed}"] = (updates, train_rnn(model, config, log=quiet))
            log(f"trained rnn x{multiple:g} {seed}: {updates} updates")
    return placers


def rnn_rows(model, backend, evaluation, placers, best: np.ndarray) -> tuple[list, list]:
    """Per budget: rows for its greedy and sampled placements, and a note on what it learned."""
    ratios = evaluation.ratios("per_task_best_heuristic")
    policy_column = evaluation.planners.index("policy greedy")
    generator = torch.Generator().manual_seed(0)
    rows, notes = [], []
    for updates in sorted({u for u, _ in placers.values()}):
        names = [n for n, (u, _) in placers.items() if u == updates]
        greedy, vs_policy, sampled, predicted, entropy = [], [], [], [], []
        for name in names:
            j = evaluation.planners.index(name)
            greedy += list(ratios[:, j])
            vs_policy += list(ratios[:, j] / ratios[:, policy_column])
            for t, task in enumerate(evaluation.tasks):
                with torch.no_grad():
                    rollout = placers[name][1].rollout(task, EPISODES, generator=generator)
                sampled.append(sampled_ratio(backend, task, rollout, best[t]))
                entropy.append(float(rollout.entropy.mean()))
                mine, policy = (evaluation.placements[t][k] for k in (j, policy_column))
                [a, b] = predicted_overall(model, task, [mine, policy])
                predicted.append(a / b)
        rows.append([f"rnn greedy, {updates} updates", interval_cell(greedy)])
        rows.append([f"rnn sampled, {updates} updates, mean of {EPISODES}", interval_cell(sampled)])
        notes.append(
            f"RNN with {updates} updates: its greedy placements cost "
            f"{geometric_mean(np.array(predicted)):.3f}x the policy's greedy ones by the cost "
            f"network, {geometric_mean(np.array(vs_policy)):.3f}x exactly; mean entropy of its "
            f"sampled choices {np.mean(entropy):.3f} nats (ln 4 = {np.log(4):.3f})."
        )
    return rows, notes


def baseline_rows(model, backend, evaluation, best: np.ndarray) -> list:
    """Random (seed 0 and a mean over seeds), the heuristics, the policy greedy and sampled."""
    ratios = evaluation.ratios("per_task_best_heuristic")
    column = {name: ratios[:, j] for j, name in enumerate(evaluation.planners)}
    tasks = evaluation.tasks
    random_mean = [
        np.mean([backend.measure(t, random_place(t, s)).overall for s in range(EPISODES)])
        for t in tasks
    ]
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        policy_sampled = [
            sampled_ratio(
                backend, t, model.policy.rollout(t, model.costnet, EPISODES, generator=generator), b
            )
            for t, b in zip(tasks, best)
        ]
    return [
        ["random (seed 0)", interval_cell(column["random"])],
        [f"random, mean of {EPISODES} seeds", interval_cell(np.array(random_mean) / best)],
        *([name, interval_cell(column[name])] for name in method_names("heuristic")),
        ["policy greedy", interval_cell(column["policy greedy"])],
        [f"policy sampled, mean of {EPISODES}", interval_cell(policy_sampled)],
    ]


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a trained model (default: train one on cpu-50x4)")
    parser.add_argument("--tasks", type=int, default=8, help="held-out tasks of the suite")
    parser.add_argument("--budgets", default="0,1,10", help="multiples of the policy's budget")
    parser.add_argument("--seeds", type=int, default=3, help="RNNs trained per budget")
    training_options(parser, ("seed", "warm_start", "costnet_steps"))  # a model trained here
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # small networks: faster on one thread here
    began = time.monotonic()
    say = lambda line: print(line, flush=True)  # noqa: E731
    model, model_note = model_for(args, say)
    fair = fair_config(RnnTrainConfig(seed=args.seed), model.metadata)
    say(f"fair budget: {budget_note(fair, policy_budget(model.metadata))}")
    placers = train_placers(model, fair, args, say)
    backend = SimulatedBackend()
    tasks = make_suite(parse_suite_name(fair.suite, 1, args.tasks)).test_tasks
    planners = baseline_planners() | {
        "policy greedy": named_planner("dreamshard", model, samples=0)
    }
    for name, (_, placer) in placers.items():
        planners[name] = lambda task, seed, placer=placer: rnn_place(task, placer, seed)
    evaluation = evaluate(tasks, planners, backend, rounds=1, seed=args.seed)
    best = evaluation.reference_costs("per_task_best_heuristic")[0]
    more_rows, notes = rnn_rows(model, backend, evaluation, placers, best)
    rows = baseline_rows(model, backend, evaluation, best) + more_rows
    report = "\n\n".join(
        [
            f"# The RNN baseline on a fair budget, exact costs ({time.strftime('%Y-%m-%d')})",
            f"{host_note()}. Costs: {describe_costs(backend.config())}; "
            f"one round (exact). Model: {model_note}. RNN: trained against that model's cost "
            f"network on {fair.suite} ({fair.train_tasks} training tasks); the fair budget is "
            f"{budget_note(fair, policy_budget(model.metadata))}; learning rate "
            f"{fair.learning_rate:g}, entropy weight {fair.entropy_weight:g}; budgets "
            f"x{args.budgets} of it, {args.seeds} seeds each. {args.tasks} held-out tasks of "
            f"{fair.suite}. Ratios to the per-task best heuristic: geometric mean over tasks "
            "(and seeds) [bootstrap 95% interval]; below 1 is better. Wall time "
            f"{(time.monotonic() - began) / 60:.1f} min. Command: "
            f"`benchmarks/rnn_baseline.py {' '.join(argv or [])}`.",
            "```\n" + format_table(["planner", "vs per-task best heuristic"], rows) + "\n```",
            "\n".join(f"- {note}" for note in notes),
        ]
    )
    print(report, flush=True)
    write_report(args.out, report)
    return report


if __name__ == "__main__":
    run_script(main, sys.argv[1:])
