"""The reference rule's calibration: how far the planner's predicted gain over TorchRec's plan
holds in real TorchRec training steps (`dreamshard/placement/reference.py`).

Tasks, fixed by the options: the first `--tasks` training tasks of each of `--suites` (2
devices each; the target study, `torchrec_step`, uses held-out tasks 8-15, which share no task
with these), each handed to the planners as a user's model would be (`parts/user_model.py`:
TorchRec's default CPU topology, one rank's batch of the traces). Arms: TorchRec's plan as
`DreamShardPlanner` asks for it (`torchrec`), `DreamShardPlanner`'s own plan without the rule
(`--split auto` and whole tables) and the whole-table heuristics, on the tables as the planner
reads them. Judges: the planner's own prediction (`predicted`, exact) and real DMP steps
(`dmp`, wall clock, and `dmp cpu`), the task's distinct plans trained in one torchrun launch a
round, in `--rounds` interleaved rounds. Each distinct non-TorchRec plan of a task is one pair
(predicted log gain over TorchRec's, measured log gain over rounds); `parts/reference_fit.py`
fits the rule's line on them and writes the shipped calibration.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.parts.dmp_steps import launch_steps
from benchmarks.parts.reference_fit import MARGIN, gain_pairs, pair_arms
from benchmarks.parts.user_model import user_model
from benchmarks.record import studied_model
from benchmarks.study import Arm, Figure, Judge, Study
from dreamshard.cli.args import positive
from dreamshard.integrations.dmp_backend import DmpBackend, StepConfig
from dreamshard.placement.heuristics import greedy_place
from dreamshard.placement.reference import fit_calibration
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import PlacementTask
from dreamshard.report import format_table

DMP, DMP_CPU, PREDICTED = "dmp", "dmp cpu", "predicted"
TORCHREC, OWN, WHOLE = "torchrec", "dreamshard own", "dreamshard whole"
HEURISTICS = ("lookup", "size_lookup", "dim", "size")
BUDGET_S = 4.0  # DreamShardPlanner's default budget at these sizes: TorchRec gets 1 s


class ReferenceCalibration(Study):
    def options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--suites", default="cpu-24x2,cpu-48x2,cpu-80x2", help="suites")
        parser.add_argument("--tasks", type=positive(int), default=3, help="training tasks a suite")
        parser.add_argument("--rounds", type=positive(int), default=6, help="interleaved rounds")
        parser.add_argument("--steps", type=positive(int), default=20, help="timed steps a turn")

    def prepare(self, args: argparse.Namespace) -> None:
        self.backend = DmpBackend(StepConfig(warmup=5, steps=args.steps))
        self.users: dict = {}
        self.models = {"dreamshard": studied_model("shipped")[1]}  # the planner's default
        self.about = (
            f"Plans of training tasks (never the target study's), trained on "
            f"{self.backend.device_kind()} in {args.rounds} interleaved rounds of 5 warm-up and "
            f"{args.steps} timed steps, one launch a task and round. A pair is a task's distinct "
            "plan other than TorchRec's: its predicted and its measured log gain over TorchRec's "
            "(measured: paired within rounds, averaged over them)."
        )

    def tasks(self, args: argparse.Namespace) -> list[PlacementTask]:
        found = []
        for name in [s.strip() for s in args.suites.split(",") if s.strip()]:
            for task in make_suite(parse_suite_name(name, args.tasks, 1)).train_tasks:
                user = user_model(task)
                planner = user.planner(reference=False)
                planner.plan(user.module, user.sharders)  # loads the model, fixes its options
                self.users[task.name] = (user, planner, planner.task(user.module))
                found.append(user.task)
        return found

    def arms(self, args: argparse.Namespace) -> list[Arm]:
        def own(split: str):
            def plan(task):
                user, planner, _ = self.users[task.name]
                made = user.planner(reference=False, split=split).plan(user.module, user.sharders)
                return user.placement(made, f"dreamshard {split}")

            return plan

        def heuristic(key: str):
            return lambda task: greedy_place(self.users[task.name][2], key)

        return [
            Arm(TORCHREC, lambda t: self.users[t.name][0].torchrec(BUDGET_S)[0]),
            Arm(OWN, own("auto")),
            Arm(WHOLE, own("none")),
            *[Arm(key, heuristic(key)) for key in HEURISTICS],
        ]

    def predicted(self, task: PlacementTask, placement) -> float:
        _, planner, seen = self.users[task.name]
        return float(planner._planner.predict(seen, placement, planner.method_options()))

    def steps(self, task: PlacementTask, plans: dict) -> dict[str, dict[str, float]]:
        return launch_steps(self.backend, task, plans)

    def judges(self, args: argparse.Namespace) -> list[Judge]:
        return [
            Judge(PREDICTED, self.predicted),
            Judge(DMP, rounds=args.rounds, per_task=self.steps, fills=(DMP, DMP_CPU)),
        ]

    def task_extra(self, task: PlacementTask, plans: dict) -> dict:
        seen: dict = {}
        for arm, p in plans.items():
            seen.setdefault((p.devices, p.splits), arm)
        return {"same": {arm: seen[(p.devices, p.splits)] for arm, p in plans.items()}}

    def figures(self, rows: list[dict]) -> dict[str, Figure]:
        out = {}
        for judge in (DMP, DMP_CPU):
            x, y = gain_pairs(rows, judge)
            if x.size < 3:
                continue
            fit = fit_calibration(x, y, MARGIN, "")
            for name, value in [
                ("slope", fit.slope),
                ("intercept", fit.intercept),
                ("spread", fit.spread),
                ("pairs", float(fit.pairs)),
                ("correlation", float(np.corrcoef(x, y)[0, 1])),
            ]:
                out[f"{name}, {judge}"] = Figure(value, value, value, len(rows))
        return out

    def details(self, rows: list[dict], figures: dict[str, Figure]) -> str:
        x, y = gain_pairs(rows, DMP)
        arms = pair_arms(rows)
        lines = [[a, f"{p:+.3f}", f"{m:+.3f}"] for a, p, m in zip(arms, x, y)]
        return "\n".join(
            [
                "## Pairs: log gain over TorchRec's plan (positive: cheaper than TorchRec's)",
                "",
                "```",
                format_table(["task / arm", "predicted", f"measured ({DMP})"], lines),
                "```",
                "",
                "Least-squares line of measured on predicted log gains, by each clock: "
                + "; ".join(
                    f"{j}: slope {figures[f'slope, {j}'].value:.3f}, intercept "
                    f"{figures[f'intercept, {j}'].value:+.3f}, residual spread "
                    f"{figures[f'spread, {j}'].value:.3f}, correlation "
                    f"{figures[f'correlation, {j}'].value:.2f} over "
                    f"{figures[f'pairs, {j}'].value:.0f} plans"
                    for j in (DMP, DMP_CPU)
                    if f"slope, {j}" in figures
                )
                + ".",
                "",
                f"Margin fixed at {MARGIN:.0%}. `python -m benchmarks.parts.reference_fit` writes "
                "the `dmp` fit into `dreamshard/placement/reference_calibration.json`.",
            ]
        )


STUDY = ReferenceCalibration(
    "reference_calibration",
    "The reference rule's calibration: predicted against measured gains over TorchRec's plan",
)
