"""The units study: plans for a GPU hardware file judged by both GPU judges, the simulated
roofline and TorchRec's estimator, in the same units, and where the two still differ.

Tasks, fixed by the options: the scale study's table sets (`parts/scale_tasks.py`, loose memory,
fp16) on `--devices` (hosts of the hardware file's size), seeds `--seeds`; and an agreement task
of 20 tables on 64 devices in 8 hosts, two of them forced table-row-wise in TorchRec's plan.
Every arm plans for `--hardware` at its central constants and its links: the four heuristics on
memory-forced splits (their per-task best is the reference), `search_analytic --split auto`
(rates with the roofline), `dreamshard --split auto` (the shipped model unless `--model`: its
cost network was trained on CPU costs and plans on the file's links), and TorchRec's planner with
the file's constants (`--torchrec-seconds` its own timeout), which reports its own plan's perf.
Judges, exact: the simulated backend (the roofline) at the centre and at the 16 corners of the
file's envelope, and TorchRec's `EmbeddingPerfEstimator` (`torchrec-estimator`) at the centre.
Nothing is measured: every figure is a model of a GPU that was not here.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.parts.scale_tasks import REFERENCE, grid_tasks, reference_arms
from benchmarks.parts.torchrec_reported import torchrec_reported_place
from benchmarks.record import model_option, studied_model
from benchmarks.study import Arm, Figure, Judge, Study, Target, mean_figure, ratio_figure
from dreamshard.costs.hardware import load_hardware
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.costs.types import COST_TERMS
from dreamshard.integrations.torchrec_judge import TorchRecEstimatorBackend
from dreamshard.placement.registry import named_planner
from dreamshard.placement.tasks import PlacementTask
from dreamshard.report import format_table
from dreamshard.tables.synthetic import generate_tables
from dreamshard.tables.table import Table

OURS, SEARCH, TORCHREC = "dreamshard auto", "search_analytic auto", "torchrec"
SIM, EST = "simulated", "torchrec-estimator"
AGREEMENT = "TorchRec's reported perf over the torchrec-estimator judge"
FORCED = {"tall_a": "table_row_wise", "tall_b": "table_row_wise"}


def agreement_task(memory: int) -> PlacementTask:
    tables = generate_tables("dlrm", 18, 5)
    tall = (Table("tall_a", 800_000, 64, 30.0), Table("tall_b", 4_000_000, 128, 12.0))
    return PlacementTask((*tables, *tall), 64, memory, name="agreement-20x64/seed 5")


def corner_name(i: int) -> str:
    return f"{SIM} corner {i:02d}"


class UnitsStudy(Study):
    def options(self, parser: argparse.ArgumentParser) -> None:
        model_option(parser)
        parser.add_argument("--hardware", default="h100-sxm", help="the hardware file")
        parser.add_argument("--sets", default="dlrm-856", help="table sets")
        parser.add_argument("--devices", default="128", help="device counts")
        parser.add_argument("--seeds", default="0-3", help="seeds, as 0-3 or 0,2")
        parser.add_argument("--torchrec-seconds", type=float, default=20.0)

    def prepare(self, args: argparse.Namespace) -> None:
        self.model, provenance = studied_model(args.model)
        self.models = {"dreamshard": provenance}
        self.hardware = load_hardware(args.hardware)
        self.corners = self.hardware.corners()
        self.simulated = [SimulatedBackend(hardware=self.hardware)] + [
            SimulatedBackend(hardware=self.hardware.at(c), topology=None) for c in self.corners
        ]
        self.estimator = TorchRecEstimatorBackend(self.hardware)
        self.judged: dict = {}  # (task, plan) -> each judge's PlacementCost at the centre
        corners = "; ".join(
            f"{i:02d}: " + ", ".join(f"{k} {v:g}" for k, v in c.items())
            for i, c in enumerate(self.corners)
        )
        self.about = (
            f"Hardware file {self.hardware.name} (sha256 {self.hardware.sha256[:12]}), plans at "
            f"its centre on its links ({self.hardware.topology_name()}); TorchRec's planner "
            f"{args.torchrec_seconds:g} s. Ratios: over the per-task best heuristic on "
            "memory-forced splits, geometric mean [bootstrap 95% interval over tasks]. "
            f"Corners: {corners}."
        )

    def tasks(self, args: argparse.Namespace) -> list[PlacementTask]:
        tasks = grid_tasks(args.sets, args.devices, "loose", args.seeds)
        return [agreement_task(int(load_hardware(args.hardware).value("memory_bytes"))), *tasks]

    def arms(self, args: argparse.Namespace) -> list[Arm]:
        arms = reference_arms()
        for name, method, model in (
            (SEARCH, "search_analytic", None),
            (OURS, "dreamshard", self.model),
        ):
            planner = named_planner(
                method,
                model,
                split="auto",
                hardware=self.hardware,
                topology=self.hardware.topology_name(),
            )
            arms.append(Arm(name, lambda t, p=planner: p(t, 0)))

        def torchrec(task):
            forced = {k: v for k, v in FORCED.items() if k in {t.name for t in task.tables}}
            return torchrec_reported_place(task, self.hardware, args.torchrec_seconds, forced)

        return [*arms, Arm(TORCHREC, torchrec, seconds=20 * args.torchrec_seconds)]

    def judges(self, args: argparse.Namespace) -> list[Judge]:
        def judge(backend, key):
            def cost(task, placement):
                found = backend.measure(task, placement)
                self.judged[(task.name, placement, key)] = found
                return found.overall

            return cost

        out = [Judge(SIM, judge(self.simulated[0], SIM)), Judge(EST, judge(self.estimator, EST))]
        for i, backend in enumerate(self.simulated[1:]):
            out.append(
                Judge(corner_name(i), lambda t, p, b=backend: float(b.overall_many(t, [p])[0]))
            )
        return out

    def task_extra(self, task: PlacementTask, plans: dict) -> dict:
        """Each plan's mean device terms (ms) under both judges at the centre, and the share of
        the roofline's forward that is the per-call floor."""
        terms = {}
        floor = self.hardware.value("call_floor_ms")
        for arm, placement in plans.items():
            found = {k: self.judged.get((task.name, placement, k)) for k in (SIM, EST)}
            if any(v is None for v in found.values()):
                continue
            terms[arm] = {
                k: [float(np.mean([getattr(d, t) for d in v.devices])) for t in COST_TERMS]
                for k, v in found.items()
            }
            busy = [d.fwd_comp for d in found[SIM].devices if d.fwd_comp > 0]
            terms[arm]["floor_share"] = float(np.mean([floor / f for f in busy])) if busy else 0.0
        self.judged.clear()
        return {"terms": terms}

    def figures(self, rows: list[dict]) -> dict[str, Figure]:
        scale = [r for r in rows if not r["task"].startswith("agreement")]
        out = {}
        shares = []
        for r in rows:
            record = r["plans"].get(TORCHREC, {})
            judged = (record.get("costs") or {}).get(EST)
            if "reported_ms" in record and judged and judged[0]:
                shares.append(record["reported_ms"] / judged[0])
        out[AGREEMENT] = mean_figure(shares)
        if shares:
            worst = float(np.max(np.abs(np.log(shares))))
            out[AGREEMENT] = Figure(
                out[AGREEMENT].value, float(np.exp(-worst)), float(np.exp(worst)), len(shares)
            )
        for arm in (SEARCH, OURS, TORCHREC):
            for judge in (SIM, EST):
                out[f"{arm} vs best heuristic, {judge}"] = ratio_figure(
                    scale, arm, REFERENCE, judge
                )
            at_corners = [ratio_figure(scale, arm, REFERENCE, corner_name(i)) for i in range(16)]
            worst = max(range(16), key=lambda i: np.nan_to_num(at_corners[i].value, nan=-1))
            out[f"{arm} vs best heuristic, {SIM}, worst corner ({worst:02d})"] = at_corners[worst]
        return out

    def details(self, rows: list[dict], figures: dict[str, Figure]) -> str:
        ratios = [
            [name.split(" vs ")[0], name.split(", ", 1)[1], figure.cell()]
            for name, figure in figures.items()
            if " vs best heuristic" in name
        ]
        lines = ["## Over the per-task best heuristic (memory-forced splits), scale tasks", ""]
        lines += ["```", format_table(["arm", "judge", "ratio [95%]"], ratios), "```", ""]
        lines += ["## Where the two judges differ: mean device terms (ms), centre", "", "```"]
        table = []
        for r in rows:
            for arm, terms in r.get("terms", {}).items():
                if arm not in (REFERENCE[0], OURS, TORCHREC):
                    continue
                sim, est = terms[SIM], terms[EST]
                table.append(
                    [r["task"], arm]
                    + [f"{s:.3f} / {e:.3f}" for s, e in zip(sim, est)]
                    + [f"{terms['floor_share']:.0%}"]
                )
        headers = ["task", "arm", *(f"{t} sim / est" for t in COST_TERMS), "floor share"]
        lines += [format_table(headers, table), "```", ""]
        lines.append(
            "By construction TorchRec's estimator has no per-call floor (the floor share is the "
            "roofline's forward that is floor), no fusion, no L2 reuse, penalties for dims under "
            "128, and no latency in its exchange; our fwd_comm also holds the wait for the "
            "slowest device's forward."
        )
        return "\n".join(lines)


STUDY = UnitsStudy(
    "units",
    "GPU units: plans for a hardware file under the roofline and TorchRec's estimator",
    (Target(AGREEMENT, at_least=1 - 1e-6, at_most=1 + 1e-6),),
)
