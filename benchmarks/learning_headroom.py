"""Where the learned planner stands where costs are exact: the simulated backend, held-out tasks.

Run: .venv/bin/python benchmarks/learning_headroom.py [--model RUN/model.pt] [--tasks 4]
         [--suites cpu-50x4,cpu-100x4,cpu-100x8,cpu-200x8] [--reference-seconds 20]
Without --model it trains one on cpu-50x4 with the simulated backend and the paper's defaults
(about 20 s here; `--warm-start 1000 --costnet-steps 1000` about a minute), so every suite but
cpu-50x4 is zero-shot.

On the simulated backend a cost is exact and cheap, so this shows how much room there is and
how much of it the learned planner takes, without measurement noise. Per held-out task:
random, the four heuristics, the pure greedy policy (`dreamshard`, samples 0), the default
`dreamshard` planner (best of 8 episodes and the heuristics, by the cost network),
`dreamshard_search` (that placement refined by local search on the cost network, 5 s),
`search_analytic` (local search on the analytic model, 5 s), and the search reference: local
search scored by the backend itself from every heuristic's placement and the default planner's,
`--reference-seconds` each, and the placement of a MILP of the backend's own cost model
(planners/milp_simulated.py, `--milp-seconds`), the best of them. The MILP's proven bound is a
floor no legal placement goes under: where it meets the reference, the reference is optimal.
Ratios: geometric mean over tasks, with a bootstrap 95% interval over tasks. Also: the cost
network's Spearman correlation with the exact cost over the placements the default planner
chooses among, per task, and which candidate won.
Writes benchmarks/results/learning_headroom.md.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from scipy import stats

from dreamshard.costs.backends import describe_costs
from dreamshard.costs.dataset import hardware, versions
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.evaluation.evaluate import evaluate
from dreamshard.evaluation.results import Evaluation
from dreamshard.evaluation.rounds import bootstrap_interval, geometric_mean
from dreamshard.files import write_text_atomic
from dreamshard.learn.model_file import DreamShardModel, load_model
from dreamshard.learn.policy import fast_rollout
from dreamshard.learn.train import train
from dreamshard.learn.train_config import COSTNET_ENCODERS, COSTNET_LOSSES, TrainConfig
from dreamshard.methods import named_planner, place
from dreamshard.placement.heuristics import HEURISTIC_KEYS, PLANNERS, greedy_place
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.planners.dreamshard_planner import costnet_greedy, predicted_overall
from dreamshard.planners.milp import MilpResult
from dreamshard.planners.milp_simulated import solve_simulated_milp
from dreamshard.planners.search import analytic_scorer, local_search
from dreamshard.report import format_table
from dreamshard.state import state_dir

RESULTS = Path(__file__).parent / "results" / "learning_headroom.md"
SUITES = "cpu-50x4,cpu-100x4,cpu-100x8,cpu-200x8"
COLUMNS = ("policy greedy", "dreamshard", "dreamshard_search", "search_analytic")


def model_for(args: argparse.Namespace, log) -> tuple[DreamShardModel, str]:
    if args.model:
        model = load_model(args.model)
        return model, f"{args.model} (trained on {model.metadata.get('suite', '?')})"
    out = state_dir() / "learning_headroom" / "model"
    shutil.rmtree(out, ignore_errors=True)  # trained by this run, not resumed from an older one
    start = time.monotonic()
    config = TrainConfig(
        suite="cpu-50x4",
        backend="simulated",
        out=str(out),
        seed=args.seed,
        warm_start=args.warm_start,
        costnet_steps=args.costnet_steps,
        costnet_loss=args.costnet_loss,
        costnet_encoder=args.costnet_encoder,
        lookahead=args.lookahead,
        warm_start_devices=tuple(int(d) for d in args.warm_start_devices.split(",") if d),
    )
    model = train(config, log=log)
    devices = ",".join(map(str, config.warm_start_devices)) or "the suite's"
    return model, (
        f"trained by this run on cpu-50x4, simulated backend ({config.iterations} iterations "
        f"of {config.placements_per_iteration} placements, warm start {config.warm_start} "
        f"heuristic and random placements, {config.costnet_steps} cost-net steps per "
        f"iteration, {config.costnet_loss} loss, {config.costnet_encoder} encoder, "
        f"{'a policy with' if config.lookahead else 'no'} one-step lookahead, "
        f"warm start on {devices} devices, seed {config.seed}; "
        f"{time.monotonic() - start:.0f} s)"
    )


def search_reference(
    backend: SimulatedBackend,
    model: DreamShardModel,
    seconds: float,
    milp_seconds: float,
    milps: dict[str, MilpResult],
):
    """Local search scored by the backend from several starts, and the MILP's placement (its
    result kept in `milps` by task); the best of them."""

    def plan(task: PlacementTask, seed: int) -> Placement:
        score = analytic_scorer(task, backend)
        starts = [greedy_place(task, key) for key in HEURISTIC_KEYS]
        starts.append(place(task, "dreamshard", seed, model=model, split="none"))
        found = [local_search(task, s, score, seconds, seed=seed) for s in starts]
        best = min(found, key=lambda r: r.cost)
        placement, cost = best.placement, best.cost
        if milp_seconds > 0:
            milps[task.name] = exact = solve_simulated_milp(task, backend, milp_seconds)
            if exact.placement is not None and exact.objective < cost:
                placement = exact.placement
        return Placement(placement.devices, "search_reference")

    return plan


def planners_for(
    model: DreamShardModel,
    backend: SimulatedBackend,
    reference_seconds: float,
    milp_seconds: float,
    milps: dict[str, MilpResult],
):
    planners = dict(PLANNERS)
    planners["policy greedy"] = named_planner("dreamshard", model, samples=0)
    planners["dreamshard"] = named_planner("dreamshard", model)
    planners["dreamshard_search"] = named_planner("dreamshard_search", model)
    planners["search_analytic"] = named_planner("search_analytic")
    planners["search_reference"] = search_reference(
        backend, model, reference_seconds, milp_seconds, milps
    )
    return planners


@torch.no_grad()
def ranking(model: DreamShardModel, backend: SimulatedBackend, task: PlacementTask) -> float:
    """Spearman of predicted vs exact cost over what the default planner chooses among."""
    episodes = fast_rollout(model.policy, task, model.costnet, 1, 8, torch.Generator())
    candidates = [episodes.placement(e, "") for e in range(9) if episodes.legal[e]]
    candidates += [greedy_place(task, key) for key in HEURISTIC_KEYS]
    own_greedy = costnet_greedy(task, model.costnet)
    candidates += [own_greedy] if own_greedy is not None else []
    candidates.append(place(task, "search_analytic", split="none"))
    unique = list({c.devices: c for c in candidates}.values())
    exact = backend.overall_many(task, unique)
    return float(stats.spearmanr(predicted_overall(model, task, unique), exact).statistic)


def cell(ratios: np.ndarray) -> str:
    low, high = bootstrap_interval(ratios)
    return f"{geometric_mean(ratios):.3f} [{low:.3f}, {high:.3f}]"


def suite_rows(
    evaluation: Evaluation, rhos: list[float], milps: dict[str, MilpResult]
) -> tuple[list[list], dict]:
    vs_best = evaluation.ratios("per_task_best_heuristic")
    vs_reference = evaluation.ratios("search_reference")
    rows, figures = [], {}
    for name in COLUMNS:
        j = evaluation.planners.index(name)
        figures[name] = (geometric_mean(vs_best[:, j]), geometric_mean(vs_reference[:, j]))
        rows.append([name, cell(vs_best[:, j]), cell(vs_reference[:, j])])
    j = evaluation.planners.index("search_reference")
    rows.append(["search_reference", cell(vs_best[:, j]), "1"])
    figures["floor"] = None
    bounds = np.array(
        [milps[t.name].bound if t.name in milps else np.nan for t in evaluation.tasks]
    )
    if not np.isnan(bounds).any():
        best = evaluation.reference_costs("per_task_best_heuristic")[0]
        reference = evaluation.reference_costs("search_reference")[0]
        figures["floor"] = geometric_mean(bounds / best)
        rows.append(["floor (MILP's proven bound)", cell(bounds / best), cell(bounds / reference)])
    picked = evaluation.picked(evaluation.planners.index("dreamshard"))
    figures["spearman"] = float(np.mean(rhos))
    figures["picked"] = picked
    return rows, figures


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a trained model (default: train one on cpu-50x4)")
    parser.add_argument("--suites", default=SUITES)
    parser.add_argument("--tasks", type=int, default=4, help="held-out tasks per suite")
    parser.add_argument("--reference-seconds", type=float, default=20.0)
    parser.add_argument(
        "--milp-seconds",
        type=float,
        default=20.0,
        help="time limit of the simulated cost model's MILP per task, whose placement joins "
        "the search reference and whose proven bound is the floor (0: none)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--warm-start",
        type=int,
        default=TrainConfig.warm_start,
        help="placements measured before training when no --model (simulated data is free)",
    )
    parser.add_argument("--costnet-steps", type=int, default=TrainConfig.costnet_steps)
    parser.add_argument(
        "--costnet-loss",
        choices=COSTNET_LOSSES,
        default=TrainConfig.costnet_loss,
        help=f"the cost network's loss when no --model (default {TrainConfig.costnet_loss})",
    )
    parser.add_argument(
        "--costnet-encoder",
        choices=COSTNET_ENCODERS,
        default=TrainConfig.costnet_encoder,
        help=f"the cost network's design when no --model (default {TrainConfig.costnet_encoder})",
    )
    parser.add_argument(
        "--warm-start-devices",
        default="",
        help="device counts the warm start cycles the training tasks through, e.g. 2,4,8",
    )
    parser.add_argument(
        "--no-lookahead",
        dest="lookahead",
        action="store_false",
        help="train the paper's policy, without the one-step lookahead (when no --model)",
    )
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # small networks: faster on one thread here
    began = time.monotonic()
    model, model_note = model_for(args, log=lambda line: print(line, flush=True))
    backend = SimulatedBackend()
    milps: dict[str, MilpResult] = {}
    planners = planners_for(model, backend, args.reference_seconds, args.milp_seconds, milps)
    sections, headline = [], []
    for name in args.suites.split(","):
        tasks = make_suite(parse_suite_name(name, 1, args.tasks)).test_tasks
        evaluation = evaluate(tasks, planners, backend, rounds=1, seed=args.seed)
        rhos = [ranking(model, backend, task) for task in tasks]
        rows, figures = suite_rows(evaluation, rhos, milps)
        trained = " (trained)" if name == model.metadata.get("suite") else " (zero-shot)"
        sections.append(
            f"## {name}{trained}: {len(tasks)} held-out tasks\n\n```\n"
            + format_table(["planner", "vs per-task best heuristic", "vs search reference"], rows)
            + f"\n```\n\nThe default planner picked: {figures['picked']}. Cost network's "
            f"Spearman over its candidates, mean over tasks: {figures['spearman']:.3f} "
            f"(per task: {', '.join(f'{r:.2f}' for r in rhos)})."
        )
        headline.append(
            [
                name + trained,
                *(f"{figures[c][0]:.3f}" for c in COLUMNS),
                f"{figures['dreamshard'][1]:.3f}",
                "-" if figures["floor"] is None else f"{figures['floor']:.3f}",
                f"{figures['spearman']:.2f}",
            ]
        )
        print(sections[-1], flush=True)
    report = "\n\n".join(
        [
            f"# Learning headroom on exact costs ({time.strftime('%Y-%m-%d')})",
            f"Host: {hardware()}; {versions()}. Costs: {describe_costs(backend.config())}; "
            f"one round (exact). Model: {model_note}. {args.tasks} held-out tasks per suite; "
            f"search reference: local search scored by the backend from the 4 heuristics' and "
            f"the default planner's placements, {args.reference_seconds:g} s each, and the "
            f"placement of a MILP of the backend's cost model ({args.milp_seconds:g} s limit), "
            "the best of them. Floor: the MILP's proven lower bound (its model drops only the "
            "cache overflow, which never lowers a cost): no legal placement costs less. Ratios: "
            "geometric mean over tasks [bootstrap 95% interval over tasks]; below 1 is better. "
            f"Wall time {(time.monotonic() - began) / 60:.1f} min. Command: "
            f"`benchmarks/learning_headroom.py {' '.join(argv or [])}`.",
            "## Headline: vs the per-task best heuristic, and the default planner vs the search "
            "reference\n\n```\n"
            + format_table(
                [
                    "suite",
                    "policy greedy",
                    "dreamshard",
                    "dreamshard_search",
                    "search_analytic",
                    "dreamshard vs reference",
                    "floor",
                    "Spearman",
                ],
                headline,
            )
            + "\n```",
            *sections,
        ]
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, report + "\n")
    print(f"wrote {out}")
    return report


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
