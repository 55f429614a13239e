"""Never slower than TorchRec's planner in the user's step: `DreamShardPlanner` as shipped
(the reference rule on: TorchRec's own plan kept unless the calibrated predicted gain clears
the margin) against TorchRec's planner, in real TorchRec training steps.

Tasks, fixed by the options: held-out tasks `--first` to `--first + --tasks - 1` (default 8-15)
of each of `--suites` (2 devices each), never those the rule was calibrated on (training
tasks), each handed to both planners as a user's model is (`parts/user_model.py`: TorchRec's
default CPU topology, one rank's batch of the traces, TorchRec's default reservation). Arms:
`dreamshard planner` (`DreamShardPlanner()` with the shipped model, the reference rule on),
`torchrec` (`EmbeddingShardingPlanner` with the same topology, batch and pooling factors, no
timeout), `torchrec control` (`torchrec_step` only: the same plan again, measured as a plan
of its own: the noise floor of a ratio) and, in `torchrec_tune` (the same study with the tune
in the control's place),
`dreamshard tune` (`DreamShardPlanner.tune` with `--candidates` candidates for about
`--tune-seconds`, in a torchrun launch of its own on the judge's training
model, `gpu_tasks/tune_step.py`: its pick is judged in the judge's launches, which the tune did
not see, never by the ratio it reported). Judge: real DMP steps (`dmp`, wall clock; `dmp
cpu`, the ranks' CPU time), the task's plans trained in one torchrun launch a round, in
`--rounds` interleaved rounds, a fresh task order each round.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from benchmarks.parts.dmp_steps import launch_steps
from benchmarks.parts.user_model import user_model
from benchmarks.record import studied_model
from benchmarks.study import Arm, Figure, Judge, Study, Target, costs, ratio_figure
from dreamshard.cli.args import positive
from dreamshard.evaluation.rounds import median_cv
from dreamshard.integrations.dmp_backend import DmpBackend, StepConfig
from dreamshard.placement.reference import CALIBRATION_FILE
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import PlacementTask
from dreamshard.report import format_table

DMP, DMP_CPU = "dmp", "dmp cpu"
OURS, TORCHREC, CONTROL = "dreamshard planner", "torchrec", "torchrec control"
TUNE = "dreamshard tune"
SUITES = ("cpu-24x2", "cpu-48x2", "cpu-80x2")
KEPT = "tasks that kept TorchRec's plan"


def cell(arm: str, suite: str, judge: str = DMP) -> str:
    return f"{arm} vs {TORCHREC}, {judge}, {suite}"


class TorchRecStep(Study):
    tuned_arm = False  # `torchrec_tune`: the tune's arm too

    def options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--suites", default=",".join(SUITES), help="suites")
        parser.add_argument("--first", type=int, default=8, help="first held-out task a suite")
        parser.add_argument("--tasks", type=positive(int), default=8, help="tasks a suite")
        parser.add_argument("--rounds", type=positive(int), default=10, help="interleaved rounds")
        parser.add_argument("--steps", type=positive(int), default=20, help="timed steps a turn")
        if self.tuned_arm:
            parser.add_argument("--candidates", type=positive(int), default=6, help="tune: plans")
            parser.add_argument(
                "--tune-seconds", type=positive(float), default=42.0, help="tune: its budget"
            )

    def prepare(self, args: argparse.Namespace) -> None:
        self.backend = DmpBackend(StepConfig(warmup=5, steps=args.steps))
        self.users: dict = {}
        self.models = {"dreamshard": studied_model("shipped")[1]}
        calibration = json.loads(CALIBRATION_FILE.read_text())
        self.about = (
            f"Each plan trained on {self.backend.device_kind()} for 5 warm-up and {args.steps} "
            "timed steps a turn, a launch a task and round. Ratios: paired within rounds, "
            "geometric mean over rounds then tasks [bootstrap 95% interval over tasks and "
            f"rounds]. The rule's calibration: slope {calibration['slope']:.3f}, intercept "
            f"{calibration['intercept']:+.3f}, spread {calibration['spread']:.3f}, margin "
            f"{calibration['margin']:.0%}, from {calibration['source']}."
        )

    def tasks(self, args: argparse.Namespace) -> list[PlacementTask]:
        found = []
        for name in [s.strip() for s in args.suites.split(",") if s.strip()]:
            spec = parse_suite_name(name, 1, args.first + args.tasks)
            for task in make_suite(spec).test_tasks[args.first :]:
                user = user_model(task)
                self.users[task.name] = user
                found.append(user.task)
        return found

    def ours(self, task: PlacementTask):
        user = self.users[task.name]
        planner = user.planner()
        placement = user.placement(planner.plan(user.module, user.sharders), "dreamshard")
        verdict = planner.verdict
        return placement, {
            "reference": verdict.reference if verdict else None,
            "kept reference": bool(verdict and verdict.kept_reference),
            "predicted gain": verdict.predicted_gain if verdict else None,
            "lower gain": verdict.lower_gain if verdict else None,
            "reference note": planner.reference_note,
        }

    def tuned(self, task: PlacementTask, args: argparse.Namespace):
        """The tune's pick, from a launch of its own, and what it reported."""
        job = self.backend.job(task, [], 1)
        job.update(
            candidates=args.candidates,
            seconds=args.tune_seconds,
            tune_warmup=3,
            tune_steps=10,
        )
        found = self.backend.run(job, task.num_devices, "gpu_tasks.tune_step")["ranks"][0]
        placement = self.users[task.name].placement_of(found["plan"], "dreamshard_tuned")
        said = ("name", "ratio", "interval", "names", "ratios", "skipped", "rounds", "seconds")
        said += ("finalist", "confirmation", "confirm rounds")
        return placement, {f"tune {k}": found[k] for k in said}

    def arms(self, args: argparse.Namespace) -> list[Arm]:
        tune = [Arm(TUNE, lambda t: self.tuned(t, args))] if self.tuned_arm else []
        control = [] if self.tuned_arm else [Arm(CONTROL, self.torchrec)]  # torchrec_step's
        return [Arm(OURS, self.ours), Arm(TORCHREC, self.torchrec), *control, *tune]

    def torchrec(self, task: PlacementTask):
        return self.users[task.name].torchrec_planner_plan()

    def steps(self, task: PlacementTask, plans: dict) -> dict[str, dict[str, float]]:
        """One launch a task and round: the control trains as a plan of its own, the others
        once per distinct plan."""
        return launch_steps(self.backend, task, plans, (CONTROL,))

    def judges(self, args: argparse.Namespace) -> list[Judge]:
        return [Judge(DMP, rounds=args.rounds, per_task=self.steps, fills=(DMP, DMP_CPU))]

    def figures(self, rows: list[dict]) -> dict[str, Figure]:
        out = {}
        for suite in ["all", *suites_of(rows)]:
            subset = [r for r in rows if suite == "all" or r["task"].startswith(suite + "/")]
            for arm in (OURS, TUNE) if self.tuned_arm else (OURS, CONTROL):
                for judge in (DMP, DMP_CPU):
                    out[cell(arm, suite, judge)] = ratio_figure(subset, arm, TORCHREC, judge)
            if self.tuned_arm:
                value = out[cell(TUNE, suite)].value
                out[f"{TUNE} geometric mean, {suite}"] = Figure(value, value, value, len(subset))
            kept = [r["plans"][OURS].get("kept reference") for r in subset]
            count = float(sum(bool(k) for k in kept))
            out[f"{KEPT}, {suite}"] = Figure(count, count, count, len(kept))
        versus = TUNE if self.tuned_arm else CONTROL
        ratios = costs(rows, versus, DMP) / costs(rows, TORCHREC, DMP)
        spread = median_cv(ratios[:, ~np.isnan(ratios).any(axis=0)])
        out[f"{versus}'s paired spread over rounds"] = Figure(spread, spread, spread, len(rows))
        return out

    def details(self, rows: list[dict], figures: dict[str, Figure]) -> str:
        suites = ["all", *suites_of(rows)]
        table = format_table(
            ["suite", f"{OURS} ({DMP})", f"({DMP_CPU})", f"{TUNE} ({DMP})", CONTROL, "kept"],
            [
                [
                    s,
                    figures[cell(OURS, s)].cell(),
                    figures[cell(OURS, s, DMP_CPU)].cell(),
                    figures[cell(TUNE, s)].cell() if self.tuned_arm else "-",
                    "-" if self.tuned_arm else figures[cell(CONTROL, s)].cell(),
                    f"{figures[f'{KEPT}, {s}'].value:.0f} of {figures[f'{KEPT}, {s}'].tasks}",
                ]
                for s in suites
            ],
        )
        verdicts = format_table(
            [
                "task",
                "reference",
                "kept",
                "predicted gain",
                "lower end",
                "tune's pick (finalist: screened, confirmed)",
            ],
            [
                [
                    r["task"],
                    r["plans"][OURS].get("reference") or "-",
                    "yes" if r["plans"][OURS].get("kept reference") else "no",
                    fraction(r["plans"][OURS].get("predicted gain")),
                    fraction(r["plans"][OURS].get("lower gain")),
                    tune_cell(r["plans"].get(TUNE) or {}),
                ]
                for r in rows
            ],
        )
        versus = TUNE if self.tuned_arm else CONTROL
        spread = figures[f"{versus}'s paired spread over rounds"].value
        return "\n".join(
            [
                f"## Over `{TORCHREC}`'s step, by suite",
                "",
                "```",
                table,
                "```",
                "",
                f"`{versus}`'s paired ratio to `{TORCHREC}` varies over rounds by {spread:.1%} "
                "(coefficient of variation, the median over tasks).",
                "",
                "## The rule's verdict per task",
                "",
                "```",
                verdicts,
                "```",
            ]
        )


def tune_cell(record: dict) -> str:
    if "tune name" not in record:
        return "-"
    finalist, rounds = record.get("tune finalist"), record["tune rounds"]
    if not finalist:
        return f"{record['tune name']} (none cheaper in {rounds} screening rounds)"
    screened = record["tune ratios"][record["tune names"].index(finalist)]
    ratio, low, high = record["tune confirmation"] or (float("nan"),) * 3
    return (
        f"{record['tune name']} ({finalist}: {screened:.3f} in {rounds} rounds, then "
        f"{ratio:.3f} [{low:.3f}, {high:.3f}] in {record['tune confirm rounds']} fresh)"
    )


def fraction(value) -> str:
    return "-" if value is None else f"{value:+.1%}"


def suites_of(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["task"].split("/")[0] for r in rows))


class TorchRecTune(TorchRecStep):
    tuned_arm = True


STUDY = TorchRecStep(
    "torchrec_step",
    "Never slower than TorchRec's planner: DreamShardPlanner as shipped in real training steps",
    tuple(Target(cell(OURS, s), at_most=1.01) for s in SUITES),
)
TUNED = TorchRecTune(
    "torchrec_tune",
    "A measured tune on the user's model against TorchRec's planner, in real training steps",
    tuple(Target(f"{TUNE} geometric mean, {s}", at_most=0.96) for s in SUITES)
    + tuple(Target(cell(TUNE, s), at_most=1.00) for s in SUITES)
    + tuple(Target(cell(OURS, s), at_most=1.01) for s in SUITES),
)
