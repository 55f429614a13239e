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
(benchmarks/parts/milp_simulated.py, `--milp-seconds`), the best of them. The MILP bound is a
floor no legal placement goes under: where it meets the reference, the reference is optimal.
Ratios: geometric mean over tasks, with a bootstrap 95% interval over tasks. Also: the cost
network's Spearman correlation with the exact cost over the placements the default planner
chooses among, per task, and which candidate won.
Writes benchmarks/results/learning_headroom.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy import stats

from benchmarks.parts.best_known import search_reference
from benchmarks.parts.milp import MilpResult
from benchmarks.parts.models import given_or_trained
from benchmarks.parts.ratio_tables import interval_cell, reference_rows
from benchmarks.parts.report_files import fenced_table, host_note, write_report
from benchmarks.script_entry import run_script
from dreamshard.cli.train import config_from, training_options
from dreamshard.costs.backends import describe_costs
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.evaluation.evaluate import evaluate
from dreamshard.evaluation.results import Evaluation
from dreamshard.evaluation.rounds import geometric_mean
from dreamshard.learn.model_file import DreamShardModel
from dreamshard.learn.policy import fast_rollout
from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place
from dreamshard.placement.registry import baseline_planners, named_planner, place
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import PlacementTask
from dreamshard.planners.dreamshard_planner import costnet_greedy, predicted_overall
from dreamshard.report import format_table
from dreamshard.state import state_dir

# what a model trained here may set (`dreamshard train`'s options)
TRAINING = ("seed", "warm_start", "costnet_steps", "costnet_loss", "costnet_encoder")
TRAINING += ("warm_start_devices", "lookahead")
RESULTS = Path(__file__).parent / "results" / "learning_headroom.md"
SUITES = "cpu-50x4,cpu-100x4,cpu-100x8,cpu-200x8"
COLUMNS = ("policy greedy", "dreamshard", "dreamshard_search", "search_analytic")
HEADLINE = " | ".join(["suite", *COLUMNS, "dreamshard vs reference", "floor", "Spearman"])


def model_for(args: argparse.Namespace, log) -> tuple[DreamShardModel, str]:
    out = str(state_dir() / "learning_headroom" / "model")
    config = config_from(args, suite="cpu-50x4", backend="simulated", out=out)
    return given_or_trained(args.model, config, log)


def planners_for(
    model: DreamShardModel,
    backend: SimulatedBackend,
    reference_seconds: float,
    milp_seconds: float,
    milps: dict[str, MilpResult],
):
    planners = baseline_planners()
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


def suite_rows(
    evaluation: Evaluation, rhos: list[float], milps: dict[str, MilpResult]
) -> tuple[list[list], dict]:
    references = ("per_task_best_heuristic", "search_reference")
    ratios = [evaluation.ratios(reference) for reference in references]
    rows = reference_rows(evaluation, references, COLUMNS)
    j = evaluation.planners.index("search_reference")
    rows.append(["search_reference", interval_cell(ratios[0][:, j]), "1"])
    figures = {
        name: tuple(geometric_mean(r[:, evaluation.planners.index(name)]) for r in ratios)
        for name in COLUMNS
    }
    figures["floor"] = None
    bounds = np.array(
        [milps[t.name].bound if t.name in milps else np.nan for t in evaluation.tasks]
    )
    if not np.isnan(bounds).any():
        floors = [bounds / evaluation.reference_costs(r)[0] for r in references]
        figures["floor"] = geometric_mean(floors[0])
        rows.append(["floor (MILP's proven bound)", *map(interval_cell, floors)])
    figures["spearman"] = float(np.mean(rhos))
    figures["picked"] = evaluation.picked(evaluation.planners.index("dreamshard"))
    return rows, figures


def parse_args(argv: list[str] | None) -> argparse.Namespace:
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
    training = parser.add_argument_group("the model trained when no --model (`dreamshard train`)")
    training_options(training, TRAINING)
    parser.add_argument("--out", default=str(RESULTS))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> str:
    args = parse_args(argv)
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
            f"{host_note()}. Costs: {describe_costs(backend.config())}; "
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
            "reference\n\n" + fenced_table(HEADLINE, headline),
            *sections,
        ]
    )
    write_report(args.out, report)
    return report


if __name__ == "__main__":
    run_script(main, sys.argv[1:])
