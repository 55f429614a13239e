"""The envelope study: the default planner, planning for a GPU hardware file, against the plain
heuristics at the file's centre and at every corner of its envelope, under both GPU judges.

Tasks, fixed by the options (defaults: the issue's headline cell): the scale study's table sets
(`parts/scale_tasks.py`, fp16) on `--devices` (hosts of the file's size), under `--memory`
(`loose`: whole-table plans exist; `binding`: 1.2x the even share), seeds `--seeds` (fresh:
100-107, not the scale study's). Arms: the four heuristics on the memory-forced splits (their
per-task best is the reference: what a user gets without a planner), and `dreamshard` as shipped
(`--split auto`, the default, and `--split none`) planning for `--hardware` at its central
constants on its links, with its default time budget (the arm's seconds are its plan time).
Judges, exact, nothing measured: the simulated backend's roofline (`costs.roofline`) at the
centre and at the 16 corners of the file's envelope, and TorchRec's `EmbeddingPerfEstimator`
(`torchrec-estimator`) at the centre and the 8 corners it tells apart (it has no floor). The
planner rates with the roofline (its centre, the envelope's two far ends for its splits, all 16
corners for its guard), never with TorchRec's estimator, which so stays an independent judge;
both are models of a GPU that was not here.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.parts.scale_tasks import REFERENCE, grid_tasks, reference_arms
from benchmarks.record import model_option, studied_model
from benchmarks.study import Arm, Figure, Judge, Study, Target, ratio_figure, worst_figure
from dreamshard.costs.hardware import load_hardware
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.integrations.torchrec_judge import TorchRecEstimatorBackend
from dreamshard.placement.registry import named_planner
from dreamshard.placement.tasks import PlacementTask
from dreamshard.report import format_table

AUTO, NONE = "dreamshard auto", "dreamshard none"
SIM, EST = "roofline", "torchrec-estimator"
CORNERS = 16


def corner_name(i: int, judge: str = SIM) -> str:
    return f"{judge} corner {i:02d}"


def cell(memory: str, judge: str, arm: str = AUTO) -> str:
    return f"{arm} vs best plain heuristic, {memory} memory, {judge}"


def worst_mean(judge: str) -> str:
    return f"{AUTO} vs best plain heuristic, {judge}, worst corner (geomean over tasks)"


def worst_task(judge: str) -> str:
    return f"{AUTO} vs best plain heuristic, {judge}, worst task at any corner"


PLAN_TIME = f"{AUTO} plan time (s), median over tasks"


def said(placement):
    """The plan, and where it came from (the guard's plain plan or the planner's own)."""
    return placement, {"candidate": placement.candidate}


def judged_corners(rows: list[dict], judge: str) -> list[str]:
    """The names of `judge`'s corners the rows hold costs under (from the rows alone, as a
    re-render or the importer has them)."""
    found = {name for r in rows for p in r["plans"].values() for name in p.get("costs", {})}
    return sorted(n for n in found if n.startswith(f"{judge} corner "))


class EnvelopeStudy(Study):
    hardware_file = "h100-sxm"  # the --hardware default (envelope_a100's: a100-80gb)
    table_sets = "dlrm-856"  # the --sets default (envelope_428's and envelope_wide's: theirs)

    def options(self, parser: argparse.ArgumentParser) -> None:
        model_option(parser)
        parser.add_argument("--hardware", default=self.hardware_file, help="the hardware file")
        parser.add_argument("--sets", default=self.table_sets, help="table sets")
        parser.add_argument("--devices", default="64,128", help="device counts")
        parser.add_argument("--memory", default="loose,binding", help="memory settings")
        parser.add_argument("--seeds", default="100-107", help="seeds, as 100-107 or 1,3")

    def prepare(self, args: argparse.Namespace) -> None:
        self.model, provenance = studied_model(args.model)
        self.models = {"dreamshard": provenance}
        self.hardware = load_hardware(args.hardware)
        self.corners = self.hardware.corners()
        self.centre = SimulatedBackend(hardware=self.hardware)
        self.at_corners = [SimulatedBackend(hardware=self.hardware.at(c)) for c in self.corners]
        self.estimator = TorchRecEstimatorBackend(self.hardware)
        # TorchRec's estimator has no per-call floor: the corners that differ only there are
        # one corner to it, judged once (at the floor's low end)
        floor = self.hardware.constants["call_floor_ms"].low
        self.est_corners = [i for i, c in enumerate(self.corners) if c["call_floor_ms"] == floor]
        corners = "; ".join(
            f"{i:02d}: " + ", ".join(f"{k} {v:g}" for k, v in c.items())
            for i, c in enumerate(self.corners)
        )
        self.about = (
            f"Hardware file {self.hardware.name} (sha256 {self.hardware.sha256[:12]}), plans at "
            f"its centre on its links ({self.hardware.topology_name()}). Ratios: over the "
            "per-task best of the four heuristics on memory-forced splits, judged alike; "
            "geometric mean [bootstrap 95% interval over tasks]. TorchRec's estimator, which has "
            "no per-call floor, judges the centre and the corners at the floor's low end (the "
            f"others are the same to it). Corners: {corners}."
        )

    def tasks(self, args: argparse.Namespace) -> list[PlacementTask]:
        return grid_tasks(args.sets, args.devices, args.memory, args.seeds)

    def arms(self, args: argparse.Namespace) -> list[Arm]:
        arms = reference_arms()
        for name, split in ((AUTO, "auto"), (NONE, "none")):
            planner = named_planner(
                "dreamshard",
                self.model,
                split=split,
                hardware=self.hardware,
                topology=self.hardware.topology_name(),
            )
            arms.append(Arm(name, lambda t, p=planner: said(p(t, 0))))
        return arms

    def judges(self, args: argparse.Namespace) -> list[Judge]:
        out = [
            Judge(SIM, lambda t, p: float(self.centre.overall_many(t, [p])[0])),
            Judge(EST, lambda t, p: self.estimator.measure(t, p).overall),
        ]
        for i, backend in enumerate(self.at_corners):
            out.append(
                Judge(corner_name(i), lambda t, p, b=backend: float(b.overall_many(t, [p])[0]))
            )
        for i in self.est_corners:
            judge = TorchRecEstimatorBackend(self.hardware.at(self.corners[i]))
            out.append(Judge(corner_name(i, EST), lambda t, p, j=judge: j.measure(t, p).overall))
        return out

    def figures(self, rows: list[dict]) -> dict[str, Figure]:
        out = {}
        for memory in ("loose", "binding"):
            part = [r for r in rows if f"/{memory}/" in r["task"]]
            for arm in (AUTO, NONE):
                for judge in (SIM, EST):
                    out[cell(memory, judge, arm)] = ratio_figure(part, arm, REFERENCE, judge)
        self.worst_corner = {}
        for judge in (SIM, EST):
            names = judged_corners(rows, judge)
            at = [ratio_figure(rows, AUTO, REFERENCE, name) for name in names]
            worst = max(range(len(at)), key=lambda k: np.nan_to_num(at[k].value, nan=-1))
            self.worst_corner[judge] = names[worst]
            out[worst_mean(judge)] = at[worst]
            tasks = [worst_figure(rows, AUTO, REFERENCE, name) for name in names]
            out[worst_task(judge)] = max(tasks, key=lambda f: np.nan_to_num(f.value, nan=-1))
        seconds = [r["plans"][AUTO].get("seconds") for r in rows if AUTO in r["plans"]]
        seconds = [s for s in seconds if s is not None]
        median = float(np.median(seconds)) if seconds else float("nan")
        out[PLAN_TIME] = Figure(median, median, median, len(seconds))
        self.slowest = max(seconds, default=float("nan"))
        return out

    def details(self, rows: list[dict], figures: dict[str, Figure]) -> str:
        lines = ["## Over the per-task best plain heuristic, centre", "", "```"]
        table = [
            [name.split(" vs ")[0], name.split(", ", 1)[1], figure.cell()]
            for name, figure in figures.items()
            if " memory, " in name
        ]
        lines += [format_table(["arm", "memory, judge", "ratio [95%]"], table), "```", ""]
        lines += ["## dreamshard auto at each corner", "", "```"]
        table = []
        judged = {judge: judged_corners(rows, judge) for judge in (SIM, EST)}
        for i in range(CORNERS):
            row = [f"{i:02d}"]
            for judge in (SIM, EST):
                name = corner_name(i, judge)
                if name not in judged[judge]:
                    row += ["as the corner without its floor", "-"]
                    continue
                worst = worst_figure(rows, AUTO, REFERENCE, name)
                row += [ratio_figure(rows, AUTO, REFERENCE, name).cell(), f"{worst.value:.3f}"]
            table.append(row)
        headers = ["corner (values: the head)", SIM, "worst task", EST, "worst task"]
        lines += [format_table(headers, table), "```", ""]
        lines.append(
            f"Worst corners by geometric mean: {self.worst_corner[SIM]}, "
            f"{self.worst_corner[EST]}. Plan time of "
            f"`{AUTO}`: median {figures[PLAN_TIME].value:.2f} s, slowest {self.slowest:.2f} s "
            "(this host, one thread, the runner's process)."
        )
        answers: dict[str, int] = {}
        for r in rows:
            found = r["plans"].get(AUTO, {}).get("candidate") or ""
            kind = "the envelope guard's plain plan" if "envelope guard" in found else "planned"
            answers[kind] = answers.get(kind, 0) + 1
        lines.append(
            "Answers of `dreamshard auto`: "
            + ", ".join(f"{k} on {v} tasks" for k, v in sorted(answers.items()))
            + "."
        )
        return "\n".join(lines)


STUDY = EnvelopeStudy(
    "envelope",
    "Planning for a GPU hardware file: the default planner over the file's envelope",
    (
        Target(cell("loose", SIM), at_most=0.85),
        Target(cell("loose", EST), at_most=0.85),
        Target(cell("binding", SIM), at_most=0.90),
        Target(cell("binding", EST), at_most=0.90),
        Target(worst_mean(SIM), at_most=1.00),
        Target(worst_task(SIM), at_most=1.02),
        Target(worst_mean(EST), at_most=1.00),
        Target(worst_task(EST), at_most=1.02),
        Target(PLAN_TIME, at_most=1.0),
    ),
)


class A100Envelope(EnvelopeStudy):
    """The same study for the `a100-80gb` file, its rows and report `envelope_a100`'s."""

    hardware_file = "a100-80gb"


A100 = A100Envelope("envelope_a100", STUDY.title + " (a100-80gb)", STUDY.targets)


class Dlrm428Envelope(EnvelopeStudy):
    """The same study on the dlrm pool's test half (428 tables), its rows and report
    `envelope_428`'s."""

    table_sets = "dlrm-428"


class WideEnvelope(EnvelopeStudy):
    """The same study on 856 tables of the wide family, its rows and report `envelope_wide`'s."""

    table_sets = "wide-856"


DLRM_428 = Dlrm428Envelope("envelope_428", STUDY.title + " (428 dlrm tables)", STUDY.targets)
WIDE = WideEnvelope("envelope_wide", STUDY.title + " (856 wide tables)", STUDY.targets)
