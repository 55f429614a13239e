"""The TorchRec study: plans judged by real TorchRec training steps (the `dmp` backend).

Tasks, fixed by the options: the first `--tasks` held-out tasks of each of `--suites` (2
devices each; tables no training task holds). Arms: `dreamshard` (whole tables, as the paper)
and `dreamshard auto` (`--split auto`, the planner's default) with `--model` (default the
shipped model); TorchRec's planner on our cap without its reservation, table-wise only
(`torchrec table-wise`) and allowed column-wise too (`torchrec column-wise`, the sharding types
`dreamshard auto` uses); TorchRec's planner as a user calls it (`torchrec defaults`: its own
estimators for the device kind the step trains on, every sharding type and kernel, told our
cap, the pooling factors and the per-rank batch, its reservation off as for every arm; its plan
read back as ours); the heuristics, whole tables. Judges: the `dmp` backend, each plan trained
under DistributedModelParallel (gloo on CPUs, NCCL on GPUs, a rank per device) for `--warmup`
then `--steps` timed steps, one torchrun launch a task and round (its plans taking turns), in
`--rounds` interleaved rounds: `dmp` is the slowest rank's median step by the wall clock,
`dmp cpu` the slowest rank's CPU time in it (the same launch); and the in-process `fbgemm`
proxy (kernels measured, the all-to-all modeled), exact, whose rank correlation with DMP the
report gives.
"""

from __future__ import annotations

import argparse
from importlib.metadata import version

import numpy as np

from benchmarks.parts.dmp_steps import launch_steps
from benchmarks.parts.torchrec_defaults import DEFAULTS, torchrec_defaults
from benchmarks.record import model_option, studied_model
from benchmarks.study import Arm, Figure, Judge, Study, Target, costs, mean_figure, ratio_figure
from dreamshard.cli.args import positive
from dreamshard.costs.backends import make_backend
from dreamshard.evaluation.rounds import median_cv, spearman
from dreamshard.integrations.dmp_backend import DmpBackend, StepConfig
from dreamshard.integrations.torchrec_planner import torchrec_column_place, torchrec_place
from dreamshard.placement.registry import named_planner, place
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import PlacementTask
from dreamshard.report import format_table

DMP, DMP_CPU, PROXY = "dmp", "dmp cpu", "fbgemm"
JUDGES = (DMP, DMP_CPU, PROXY)
OURS, WHOLE = "dreamshard auto", "dreamshard"
TW, CW = "torchrec table-wise", "torchrec column-wise"
HEURISTICS = ("dim", "size", "lookup", "size_lookup", "random")
# (figure, arm, versus, at most): the first is the next issue's; the others the old report's
GOALS = (
    ("dreamshard vs TorchRec's planner (its step)", OURS, DEFAULTS, 1.00),
    ("dreamshard whole tables vs torchrec table-wise (its step)", WHOLE, TW, 0.95),
    ("dreamshard auto vs torchrec column-wise (its step)", OURS, CW, 0.95),
)


class TorchRecStudy(Study):
    def options(self, parser: argparse.ArgumentParser) -> None:
        model_option(parser)
        parser.add_argument("--suites", default="cpu-24x2,cpu-48x2,cpu-80x2", help="suites")
        parser.add_argument("--tasks", type=positive(int), default=4, help="held-out tasks a suite")
        parser.add_argument("--rounds", type=positive(int), default=6, help="interleaved rounds")
        parser.add_argument("--steps", type=positive(int), default=30, help="timed steps a turn")
        parser.add_argument("--warmup", type=int, default=5, help="warm-up steps a turn")

    def prepare(self, args: argparse.Namespace) -> None:
        self.model, provenance = studied_model(args.model)
        self.models = {"dreamshard": provenance}
        self.backend = DmpBackend(StepConfig(warmup=args.warmup, steps=args.steps))
        self.device = self.backend.device_kind()
        self.proxy = make_backend("fbgemm")
        self.about = (
            f"TorchRec {version('torchrec')}. Each plan trained on {self.device} for "
            f"{args.warmup} warm-up and {args.steps} timed steps a turn, a launch a task and "
            "round. Ratios: paired within rounds, geometric mean over rounds then tasks "
            "[bootstrap 95% interval over tasks and rounds], over the tasks both planned. "
            f"`{OURS}` against `{DEFAULTS}` is what a user gets against what TorchRec gives them."
        )

    def tasks(self, args: argparse.Namespace) -> list[PlacementTask]:
        suites = [s.strip() for s in args.suites.split(",") if s.strip()]
        return [
            t for s in suites for t in make_suite(parse_suite_name(s, 1, args.tasks)).test_tasks
        ]

    def arms(self, args: argparse.Namespace) -> list[Arm]:
        whole = named_planner("dreamshard", self.model)
        auto = named_planner("dreamshard", self.model, split="auto")
        return [
            Arm(WHOLE, lambda t: whole(t, 0)),
            Arm(OURS, lambda t: auto(t, 0)),
            Arm(TW, lambda t: torchrec_place(t, reserve=False)),
            Arm(CW, torchrec_column_place),
            Arm(DEFAULTS, lambda t: torchrec_defaults(t, self.device)),
            *[Arm(key, lambda t, key=key: place(t, key, split="none")) for key in HEURISTICS],
        ]

    def steps(self, task: PlacementTask, plans: dict) -> dict[str, dict[str, float]]:
        """One launch a task and round: its distinct plans trained in turn (one torchrun), each
        plan's slowest rank's median step by the wall clock and by CPU time."""
        return launch_steps(self.backend, task, plans)

    def judges(self, args: argparse.Namespace) -> list[Judge]:
        return [
            Judge(DMP, rounds=args.rounds, per_task=self.steps, fills=(DMP, DMP_CPU)),
            Judge(PROXY, lambda t, p: self.proxy.measure(t, p).overall),
        ]

    def task_extra(self, task: PlacementTask, plans: dict) -> dict:
        """Each arm whose plan is another's (named by the first): the proxy's ranking counts
        a placement once."""
        seen: dict = {}
        for arm, p in plans.items():
            seen.setdefault((p.devices, p.splits), arm)
        same = {arm: seen[(p.devices, p.splits)] for arm, p in plans.items()}
        return {"same": {arm: first for arm, first in same.items() if arm != first}}

    def figures(self, rows: list[dict]) -> dict[str, Figure]:
        out = {name: ratio_figure(rows, arm, versus, DMP) for name, arm, versus, _ in GOALS}
        for suite in ["all", *suites_of(rows)]:
            subset = [r for r in rows if suite == "all" or r["task"].startswith(suite + "/")]
            for arm in arms_of(rows):
                for judge in JUDGES:
                    out[cell(arm, judge, suite)] = ratio_figure(subset, arm, DEFAULTS, judge)
        for judge in (DMP, DMP_CPU):
            per_task, pooled = proxy_agreement(rows, judge)
            out[f"fbgemm Spearman with {judge}, per task"] = mean_figure(per_task)
            out[f"fbgemm Spearman with {judge}, pooled"] = Figure(pooled, pooled, pooled, len(rows))
        ratios = costs(rows, OURS, DMP) / costs(rows, DEFAULTS, DMP)  # [round, task]
        ratios = ratios[:, ~np.isnan(ratios).any(axis=0)]
        spread = median_cv(ratios) if ratios.size else float("nan")
        out["paired-ratio spread over rounds"] = Figure(spread, spread, spread, ratios.shape[1])
        return out

    def details(self, rows: list[dict], figures: dict[str, Figure]) -> str:
        suites = suites_of(rows)
        table = format_table(
            ["arm", *[f"{j} (all)" for j in JUDGES], *[f"{DMP} ({s})" for s in suites]],
            [
                [arm, *[figures[cell(arm, j, "all")].cell() for j in JUDGES]]
                + [figures[cell(arm, DMP, s)].cell() for s in suites]
                for arm in arms_of(rows)
            ],
        )
        agreement = "; ".join(
            f"with {j}: {figures[f'fbgemm Spearman with {j}, per task'].value:.2f} per task "
            f"(mean), {figures[f'fbgemm Spearman with {j}, pooled'].value:.2f} pooled"
            for j in (DMP, DMP_CPU)
        )
        spread = figures["paired-ratio spread over rounds"].value
        return "\n".join(
            [
                f"## Over `{DEFAULTS}`, by each judge",
                "",
                "```",
                table,
                "```",
                "",
                "The fbgemm proxy's rank correlation (Spearman) with DMP over each task's distinct "
                "placements, and pooled over tasks with each cost over its task's `lookup`: "
                f"{agreement}. The paired ratio `{OURS}` / `{DEFAULTS}` by `{DMP}` varies over "
                f"rounds by {spread:.1%} (coefficient of variation, the median over tasks).",
                "",
                "## Plan times, splits, declines",
                "",
                "```",
                plan_table(rows),
                "```",
            ]
        )


def cell(arm: str, judge: str, suite: str) -> str:
    return f"{arm} vs {DEFAULTS}, {judge}, {suite}"


def arms_of(rows: list[dict]) -> list[str]:
    return list(rows[0]["plans"]) if rows else []


def suites_of(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["task"].split("/")[0] for r in rows))


def mean_cost(plan: dict, judge: str) -> float:
    """A plan's cost under `judge`: the geometric mean over its rounds (NaN: none)."""
    found = [c for c in plan.get("costs", {}).get(judge) or [] if c is not None]
    return float(np.exp(np.mean(np.log(found)))) if found else float("nan")


def proxy_agreement(rows: list[dict], judge: str) -> tuple[list[float], float]:
    """The fbgemm proxy's Spearman with `judge` per task over its distinct placements, and
    pooled over tasks (each cost over the task's `lookup`)."""
    per_task, pooled = [], ([], [])
    for row in rows:
        arms = [a for a in row["plans"] if a not in row.get("same", {})]
        pairs = [
            (mean_cost(row["plans"][a], PROXY), mean_cost(row["plans"][a], judge)) for a in arms
        ]
        pairs = [(x, y) for x, y in pairs if not (np.isnan(x) or np.isnan(y))]
        if not pairs:
            continue
        per_task.append(spearman(*zip(*pairs)))
        base = [mean_cost(row["plans"]["lookup"], j) for j in (PROXY, judge)]
        for x, y in pairs:
            pooled[0].append(x / base[0])
            pooled[1].append(y / base[1])
    return per_task, spearman(*pooled) if len(pooled[0]) > 2 else float("nan")


def plan_table(rows: list[dict]) -> str:
    """Per arm: mean plan seconds, tables split a plan by kind, tasks declined, plans a judge
    declined, and the sharding types TorchRec's defaults chose."""
    out = []
    for arm in arms_of(rows):
        records = [r["plans"][arm] for r in rows]
        placed = [x for x in records if "declined" not in x]
        kinds: dict[str, int] = {}
        for x in placed:
            for kind, count in x.get("splits", {}).items():
                kinds[kind] = kinds.get(kind, 0) + count
        split = ", ".join(f"{k} {v / max(1, len(placed)):.1f}" for k, v in sorted(kinds.items()))
        types = sorted({k for x in placed for k in x.get("torchrec types", [])})
        out.append(
            [
                arm,
                f"{np.mean([x['seconds'] for x in placed]):.2f}" if placed else "-",
                split or "none",
                len(records) - len(placed),
                sum(bool(x.get("judge_declined")) for x in records),
                ", ".join(types) or "-",
            ]
        )
    return format_table(["arm", "seconds", "splits", "declined", "unjudged", "types"], out)


STUDY = TorchRecStudy(
    "torchrec",
    "Plans in real TorchRec training steps: dreamshard against TorchRec's planner",
    tuple(Target(name, at_most=at_most) for name, _, _, at_most in GOALS),
)
