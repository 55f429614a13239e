"""The fair-baseline study: the default planner planning for a GPU hardware file against
TorchRec's planner given at least two minutes, under both GPU judges.

Tasks, fixed by the options (the envelope study's loose cell): 856 dlrm tables
(`parts/scale_tasks.py`, fp16, loose memory) on `--devices` (hosts of the file's size), seeds
`--seeds` (100-107). Arms: `dreamshard` as shipped (`--split auto`, its default budget) planning
for `--hardware` at its centre on its links; TorchRec's `EmbeddingShardingPlanner` with its
default proposers and every sharding type ours map to, the same file's constants and links,
`--torchrec-seconds` its own timeout (the arm's seconds say how long it took), once with its
storage reservation (its default) and once without (the whole cap, as ours plan on). TorchRec's
estimator is the judge its own planner optimises, and our planner never rates with it; the
roofline is ours. Nothing is measured.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.parts.scale_tasks import grid_tasks
from benchmarks.record import model_option, studied_model
from benchmarks.study import Arm, Figure, Judge, Study, Target, ratio_figure
from dreamshard.costs.hardware import load_hardware
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.integrations.torchrec_judge import TorchRecEstimatorBackend
from dreamshard.integrations.torchrec_planner import torchrec_place
from dreamshard.placement.registry import named_planner
from dreamshard.placement.tasks import PlacementTask
from dreamshard.report import format_table

OURS = "dreamshard auto"
RESERVED, WHOLE = "torchrec (reservation)", "torchrec (no reservation)"
SIM, EST = "roofline", "torchrec-estimator"
# the runner's limit on a TorchRec arm beyond its own timeout: its enumeration and estimates of
# every sharding option come first (tens of seconds at 856 tables with every type)
ENUMERATION_SECONDS = 600


def versus(arm: str, judge: str) -> str:
    return f"{OURS} vs {arm}, {judge}"


class FairStudy(Study):
    devices, torchrec_seconds = "64,128", 120.0  # the defaults (torchrec_small's: 16,32; 20 s)
    hardware_file = "h100-sxm"  # the --hardware default (torchrec_small_a100's: a100-80gb)

    def options(self, parser: argparse.ArgumentParser) -> None:
        model_option(parser)
        parser.add_argument("--hardware", default=self.hardware_file, help="the hardware file")
        parser.add_argument("--devices", default=self.devices, help="device counts")
        parser.add_argument("--seeds", default="100-107", help="seeds, as 100-107 or 1,3")
        parser.add_argument(
            "--torchrec-seconds",
            type=float,
            default=self.torchrec_seconds,
            help="TorchRec's planner's timeout_seconds",
        )

    def prepare(self, args: argparse.Namespace) -> None:
        self.model, provenance = studied_model(args.model)
        self.models = {"dreamshard": provenance}
        self.hardware = load_hardware(args.hardware)
        self.about = (
            f"Hardware file {self.hardware.name} (sha256 {self.hardware.sha256[:12]}), both "
            f"planners at its centre on its links ({self.hardware.topology_name()}); TorchRec's "
            f"planner {args.torchrec_seconds:g} s its timeout. Ratios: geometric mean [bootstrap "
            "95% interval over the tasks both planned]."
        )

    def tasks(self, args: argparse.Namespace) -> list[PlacementTask]:
        return grid_tasks("dlrm-856", args.devices, "loose", args.seeds)

    def arms(self, args: argparse.Namespace) -> list[Arm]:
        hw, seconds = self.hardware, args.torchrec_seconds
        ours = named_planner(
            "dreamshard", self.model, split="auto", hardware=hw, topology=hw.topology_name()
        )

        def torchrec(reserve: bool):
            def plan(task):
                return torchrec_place(task, 0, reserve, "auto", hw.topology_name(), seconds, hw)

            return plan

        return [
            Arm(OURS, lambda t: ours(t, 0)),
            Arm(RESERVED, torchrec(True), seconds=seconds + ENUMERATION_SECONDS),
            Arm(WHOLE, torchrec(False), seconds=seconds + ENUMERATION_SECONDS),
        ]

    def judges(self, args: argparse.Namespace) -> list[Judge]:
        centre, estimator = SimulatedBackend(hardware=self.hardware), None

        def estimate(task, placement):
            nonlocal estimator
            estimator = estimator or TorchRecEstimatorBackend(self.hardware)
            return estimator.measure(task, placement).overall

        return [
            Judge(SIM, lambda t, p: float(centre.overall_many(t, [p])[0])),
            Judge(EST, estimate),
        ]

    def figures(self, rows: list[dict]) -> dict[str, Figure]:
        return {
            versus(arm, judge): ratio_figure(rows, OURS, arm, judge)
            for arm in (WHOLE, RESERVED)
            for judge in (SIM, EST)
        }

    def details(self, rows: list[dict], figures: dict[str, Figure]) -> str:
        table = []
        for devices in sorted({r["task"].split("/")[0] for r in rows}):
            cell = [r for r in rows if r["task"].startswith(devices + "/")]
            for arm in (OURS, RESERVED, WHOLE):
                records = [r["plans"][arm] for r in cell]
                seconds = [p["seconds"] for p in records if "seconds" in p]
                declined = sum("declined" in p for p in records)
                timing = f"{np.median(seconds):.1f} / {max(seconds):.1f}" if seconds else "-"
                table.append([devices, arm, f"{len(cell) - declined} of {len(cell)}", timing])
        headers = ["tasks", "arm", "planned", "plan seconds median / max"]
        lines = ["## Plans, declines and plan times per cell", "", "```"]
        lines += [format_table(headers, table), "```", ""]
        reasons = sorted(
            {p["declined"] for r in rows for p in r["plans"].values() if "declined" in p}
        )
        lines += [f"- declined: {reason}" for reason in reasons]
        return "\n".join(lines)


STUDY = FairStudy(
    "torchrec_fair",
    "dreamshard against TorchRec's planner given two minutes, planning for a GPU file",
    tuple(
        Target(versus(arm, judge), at_most=limit)
        for arm in (WHOLE, RESERVED)
        for judge, limit in ((SIM, 0.90), (EST, 1.00))
    ),
)


class SmallFair(FairStudy):
    """The same study on 16 and 32 GPUs with TorchRec's planner given 20 s (issue 50's small
    cells), its rows and report `torchrec_small`'s."""

    devices, torchrec_seconds = "16,32", 20.0


SMALL = SmallFair(
    "torchrec_small",
    "dreamshard against TorchRec's planner given 20 s on 16 and 32 GPUs, planning for a GPU file",
    tuple(Target(versus(arm, SIM), at_most=0.85) for arm in (WHOLE, RESERVED)),
)


class SmallFairA100(SmallFair):
    """`torchrec_small` for the `a100-80gb` file, its rows and report `torchrec_small_a100`'s."""

    hardware_file = "a100-80gb"


SMALL_A100 = SmallFairA100("torchrec_small_a100", SMALL.title + " (a100-80gb)", SMALL.targets)
