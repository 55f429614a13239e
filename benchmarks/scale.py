"""The scale study (the paper's RQ5): 428-856 tables on 16-128 devices across hosts, every plan
judged by our simulated backend and by TorchRec's own estimator.

Tasks, fixed by the options: each table set (`benchmarks/parts/scale_tasks.py`) and seed on each
device count under each memory setting, fp16, on hosts of 8 (`nvlink-rdma`: NVLink inside a
host, 400 Gb/s RDMA between; communication modeled). Arms: the four heuristics on the
memory-forced splits only (the reference: their per-task best) and with `--split auto`;
`search_analytic`; `dreamshard` with `--split none` and `auto` (`--model`, default the shipped
model); TorchRec's planner with every sharding type that maps to ours, with and without its
storage reservation (`--torchrec-seconds` as its own timeout, stopped without a plan after
`--torchrec-wall`), and table-wise only. Judges: the simulated backend on that topology and
TorchRec's EmbeddingPerfEstimator (`compute_device=cuda`), both exact, one round.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.parts.scale_tasks import (
    MEMORY_SETTINGS,
    REFERENCE,
    STUDY_SETS,
    TOPOLOGY,
    grid_tasks,
    reference_arms,
)
from benchmarks.record import model_option, studied_model
from benchmarks.study import Arm, Figure, Judge, Study, Target, ratio_figure
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.integrations.torchrec_judge import torchrec_judge
from dreamshard.placement.heuristics import HEURISTIC_KEYS
from dreamshard.placement.registry import named_planner
from dreamshard.report import format_table

OURS, TORCHREC = "dreamshard auto", "torchrec (no reservation)"
TORCHREC_TW = "torchrec table-wise (no reservation)"
JUDGES = ("simulated", "torchrec")
# (devices, memory or None for both, versus, judge, at most)
GOALS = (
    ((64, 128), "loose", "best heuristic", "simulated", 0.80),
    ((64, 128), "binding", "best heuristic", "simulated", 0.85),
    ((64, 128), None, TORCHREC, "simulated", 0.90),
    ((64, 128), None, TORCHREC, "torchrec", 1.00),
    ((16, 32), None, TORCHREC, "simulated", 0.85),
)


def goal_name(devices, memory, versus, judge) -> str:
    where = f"{','.join(map(str, devices))} devices, {memory or 'both'} memory"
    return f"{OURS} vs {versus}, {judge} judge, {where}"


def cell_of(task_name: str) -> tuple[str, int, str]:
    """(table set, devices, memory) of a task named "dlrm-856x128/loose/seed 0"."""
    head, memory, _ = task_name.split("/")
    table_set, devices = head.rsplit("x", 1)
    return table_set, int(devices), memory


class ScaleStudy(Study):
    def options(self, parser: argparse.ArgumentParser) -> None:
        model_option(parser)
        parser.add_argument("--seeds", default="0-7", help="seeds per cell, as 0-7 or 0,3")
        parser.add_argument("--sets", default=",".join(STUDY_SETS), help="table sets")
        parser.add_argument("--devices", default="16,32,64,128", help="device counts")
        parser.add_argument("--memory", default=",".join(MEMORY_SETTINGS), help="loose, binding")
        parser.add_argument(
            "--torchrec-seconds",
            type=float,
            default=20.0,
            help="TorchRec's own timeout_seconds for its planner with every sharding type",
        )
        parser.add_argument(
            "--torchrec-wall",
            type=float,
            default=600.0,
            help="seconds after which TorchRec's planner is stopped without a plan",
        )

    def prepare(self, args: argparse.Namespace) -> None:
        self.model, provenance = studied_model(args.model)
        self.models = {"dreamshard": provenance}
        self.backend = SimulatedBackend(topology=TOPOLOGY)
        self.about = (
            f"TorchRec's planner gets {args.torchrec_seconds:g} s as its own `timeout_seconds` "
            f"(its enumeration comes first and is not counted) and {args.torchrec_wall:g} s in "
            "all. Ratios: over the per-task best heuristic on memory-forced splits unless named; "
            "geometric mean [bootstrap 95% interval over tasks], over the tasks both planned."
        )

    def tasks(self, args: argparse.Namespace):
        return grid_tasks(args.sets, args.devices, args.memory, args.seeds)

    def arms(self, args: argparse.Namespace) -> list[Arm]:
        arms = reference_arms()
        named = [(f"{key} auto", key, None, "auto", {}) for key in HEURISTIC_KEYS]
        named += [
            ("search_analytic auto", "search_analytic", None, "auto", {}),
            ("dreamshard none", "dreamshard", self.model, "none", {}),
            (OURS, "dreamshard", self.model, "auto", {}),
        ]
        for name, method, model, split, extra in named:
            planner = named_planner(method, model, split=split, topology=TOPOLOGY, **extra)
            arms.append(Arm(name, lambda t, p=planner: p(t, 0)))
        for name, reserve in ((TORCHREC, False), ("torchrec (reservation)", True)):
            planner = named_planner(
                "torchrec",
                split="auto",
                reserve=reserve,
                topology=TOPOLOGY,
                time_budget=args.torchrec_seconds,
            )
            arms.append(Arm(name, lambda t, p=planner: p(t, 0), seconds=args.torchrec_wall))
        planner = named_planner("torchrec", split="none", reserve=False, topology=TOPOLOGY)
        return [*arms, Arm(TORCHREC_TW, lambda t, p=planner: p(t, 0))]

    def judges(self, args: argparse.Namespace) -> list[Judge]:
        return [
            Judge("simulated", lambda t, p: float(self.backend.overall_many(t, [p])[0])),
            Judge("torchrec", lambda t, p: torchrec_judge(t, p, TOPOLOGY)),
        ]

    def figures(self, rows: list[dict]) -> dict[str, Figure]:
        out = {}
        for devices, memory, versus, judge, _ in GOALS:
            chosen = [
                r
                for r in rows
                if cell_of(r["task"])[1] in devices and memory in (None, cell_of(r["task"])[2])
            ]
            base = REFERENCE if versus == "best heuristic" else versus
            out[goal_name(devices, memory, versus, judge)] = ratio_figure(chosen, OURS, base, judge)
        for cell in sorted({cell_of(r["task"]) for r in rows}):
            chosen = [r for r in rows if cell_of(r["task"]) == cell]
            for arm in arms_of(rows):
                for judge in JUDGES:
                    name = cell_figure(arm, judge, cell)
                    out[name] = ratio_figure(chosen, arm, REFERENCE, judge)
        return out

    def details(self, rows: list[dict], figures: dict[str, Figure]) -> str:
        shown = [a for a in arms_of(rows) if a not in REFERENCE]
        parts = []
        for judge in JUDGES:
            table = [
                [f"{'x'.join(map(str, cell[:2]))} {cell[2]}"]
                + [figures[cell_figure(arm, judge, cell)].cell() for arm in shown]
                for cell in sorted({cell_of(r["task"]) for r in rows})
            ]
            parts += [
                f"## Over the best heuristic on memory-forced splits, {judge} judge",
                "",
                "```",
                format_table(["cell", *shown], table),
                "```",
                "",
            ]
        return "\n".join(
            parts + ["## Plan times, splits, declines", "", "```", plan_table(rows), "```"]
        )


def cell_figure(arm: str, judge: str, cell: tuple) -> str:
    """The name of `arm`'s figure over the best heuristic in one cell (set, devices, memory)."""
    return f"{arm} vs best heuristic, {judge} judge, {cell[0]}x{cell[1]} {cell[2]}"


def arms_of(rows: list[dict]) -> list[str]:
    return list(rows[0]["plans"]) if rows else []


def plan_table(rows: list[dict]) -> str:
    """Per arm: mean plan seconds, tables split per plan by kind, tasks declined, and plans
    TorchRec's estimator could not rate."""
    out = []
    for arm in arms_of(rows):
        records = [r["plans"][arm] for r in rows]
        seconds = [x["seconds"] for x in records if "declined" not in x]
        kinds: dict[str, int] = {}
        for x in records:
            for kind, count in x.get("splits", {}).items():
                kinds[kind] = kinds.get(kind, 0) + count
        placed = max(1, len(seconds))
        split = ", ".join(f"{k} {v / placed:.1f}" for k, v in sorted(kinds.items())) or "none"
        declined = sum("declined" in x for x in records)
        unjudged = sum(JUDGES[1] in x.get("judge_declined", {}) for x in records)
        mean = f"{np.mean(seconds):.2f}" if seconds else "-"
        out.append([arm, mean, split, declined, unjudged])
    return format_table(["arm", "seconds", "splits", "declined", "unjudged"], out)


STUDY = ScaleStudy(
    "scale",
    "The scale study (RQ5): plans at 16-128 devices across hosts, two judges",
    tuple(Target(goal_name(d, m, v, j), at_most=at_most) for d, m, v, j, at_most in GOALS),
)
