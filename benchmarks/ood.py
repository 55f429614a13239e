"""The out-of-distribution study: the default planner with a model, zero-shot, on table families
nobody trained on, judged on exact costs.

Tasks, fixed before the first run: the four families of `benchmarks/parts/ood_families.py`
(correlated, bimodal, heavy-skew, giants), seeds K..K+N-1 each (default 0..11: 48 tasks of
50-400 tables on 4-32 devices; a run on fresh tasks takes `--first-seed` past the seeds earlier
runs used). Arms: the four greedy heuristics (whole tables; the per-task best is the reference)
and `dreamshard` (whole tables, seed 0, 8 samples) with `--model` (default the shipped model).
Judge: the calibrated simulated backend (cpu-gloo exchange, modeled), exact, one round. Per
task also the model's accuracy: per-device compute MAPE, within-task Spearman over at least 8
placements, and how often its 90% gain intervals cover the true gain.
"""

from __future__ import annotations

import argparse

from benchmarks.parts.ood_accuracy import accuracy, coverage
from benchmarks.parts.ood_families import FAMILIES, SHAPES, ood_tasks
from benchmarks.record import model_option, studied_model
from benchmarks.study import (
    NO_FIGURE,
    Arm,
    Figure,
    Judge,
    Study,
    Target,
    mean_figure,
    ratio_figure,
    worst_figure,
)
from dreamshard.cli.args import positive
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place
from dreamshard.placement.registry import named_planner
from dreamshard.report import format_table

JUDGE, OURS = "simulated", "dreamshard"
COVERAGE = (0.85, 0.95)  # the share of pairs nominal 90% intervals should cover
TARGETS = (
    Target("all: dreamshard vs best heuristic", at_most=0.93),
    Target("all: worst task", at_most=1.01),
    Target("all: device MAPE", at_most=0.08),
    Target("all: within-task Spearman", at_least=0.9),
    Target("all: 90% gain intervals covering", at_least=COVERAGE[0], at_most=COVERAGE[1]),
)


class OodStudy(Study):
    def options(self, parser: argparse.ArgumentParser) -> None:
        model_option(parser)
        parser.add_argument("--seeds", type=positive(int), default=12, help="seeds per family")
        parser.add_argument(
            "--first-seed",
            type=int,
            default=0,
            help="each family's first seed (fresh tasks: past the seeds earlier runs used)",
        )

    def prepare(self, args: argparse.Namespace) -> None:
        self.model, provenance = studied_model(args.model)
        self.models = {"planner": provenance}
        self.judge = SimulatedBackend()
        self.z90 = (self.model.metadata.get("confidence") or {}).get("z90")
        self.about = (
            f"Families: {', '.join(FAMILIES)}; seeds {args.first_seed}-"
            f"{args.first_seed + args.seeds - 1} each; shapes (tables, devices) cycled: "
            f"{list(SHAPES)}; fp16. Judge: the calibrated simulated backend (exchange modeled, "
            "cpu-gloo). Ratio: dreamshard's overall over the best whole-table heuristic's, per "
            "task; geometric mean [bootstrap 95% interval over tasks]."
        )

    def tasks(self, args: argparse.Namespace):
        return ood_tasks(seeds=range(args.first_seed, args.first_seed + args.seeds))

    def arms(self, args: argparse.Namespace) -> list[Arm]:
        planner = named_planner("dreamshard", model=self.model)
        heuristics = [
            Arm(key, lambda task, key=key: greedy_place(task, key)) for key in HEURISTIC_KEYS
        ]
        return [*heuristics, Arm(OURS, lambda task: planner(task, 0))]

    def judges(self, args: argparse.Namespace) -> list[Judge]:
        return [Judge(JUDGE, lambda task, placement: self.judge.measure(task, placement).overall)]

    def task_extra(self, task, plans: dict) -> dict:
        if len(plans) < len(HEURISTIC_KEYS) + 1:
            return {}  # some arm declined: nothing to judge the model over
        return accuracy(task, plans, self.model, self.judge) | {"z90": self.z90}

    def figures(self, rows: list[dict]) -> dict[str, Figure]:
        out = {}
        families = sorted({row["task"].split("/")[0] for row in rows})
        for name in ["all", *families]:
            subset = [r for r in rows if name == "all" or r["task"].startswith(name + "/")]
            judged = [r for r in subset if "device_mape" in r]
            z90 = next((r["z90"] for r in judged), None)
            found = coverage([r["residuals"] for r in judged], z90)
            out |= {
                f"{name}: dreamshard vs best heuristic": ratio_figure(
                    subset, OURS, HEURISTIC_KEYS, JUDGE
                ),
                f"{name}: worst task": worst_figure(subset, OURS, HEURISTIC_KEYS, JUDGE),
                f"{name}: device MAPE": mean_figure([r["device_mape"] for r in judged]),
                f"{name}: within-task Spearman": mean_figure([r["spearman"] for r in judged]),
                f"{name}: 90% gain intervals covering": share_figure(found, len(judged)),
                f"{name}: placements covered": share_figure(
                    coverage([r["placement_residuals"] for r in judged], z90), len(judged)
                ),
            }
        return out

    def details(self, rows: list[dict], figures: dict[str, Figure]) -> str:
        families = ["all", *sorted({row["task"].split("/")[0] for row in rows})]
        table = format_table(
            ["family", "vs best heuristic", "worst", "device MAPE", "Spearman", "covering"],
            [
                (
                    name,
                    figures[f"{name}: dreamshard vs best heuristic"].cell(),
                    f"{figures[f'{name}: worst task'].value:.3f}",
                    f"{figures[f'{name}: device MAPE'].value:.1%}",
                    f"{figures[f'{name}: within-task Spearman'].value:.3f}",
                    figures[f"{name}: 90% gain intervals covering"].cell(),
                )
                for name in families
            ],
        )
        declined = [r["task"] for r in rows if "device_mape" not in r]
        return "\n".join(
            [
                "## By family",
                "",
                "```",
                table,
                "```",
                "",
                "Covering: the share of (task, candidate) pairs whose true gain over the heuristic "
                "candidate the ensemble predicts cheapest lies inside the nominal 90% interval "
                "(every candidate the default planner weighs; the interval resamples tasks); "
                "over the study's placements instead (the heuristics', the planner's and 4 "
                f"random ones a task): {figures['all: placements covered'].cell()}.",
                f"Tasks some arm declined (no whole-table placement): {len(declined)}"
                + (f" ({', '.join(declined)})" if declined else "")
                + ".",
            ]
        )


def share_figure(found: dict | None, tasks: int) -> Figure:
    if not found:
        return NO_FIGURE
    low, high = found["interval"]
    return Figure(found["share"], low, high, tasks)


STUDY = OodStudy(
    "ood",
    "Out of distribution: the default planner, zero-shot, on families never trained on",
    TARGETS,
)
