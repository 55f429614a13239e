"""The published study: a sanity check of the GPU units against published step times. Not a
target: it says how far the models' embedding time is from a measured whole step.

Tasks: the synthetic models of NVIDIA-Merlin/distributed-embeddings
(`examples/benchmarks/synthetic_models/`, Apache-2.0), transcribed with attribution in
`benchmarks/data/merlin_synthetic_models.json`: Tiny to Jumbo (55 to 1,022 tables), each on the
GPU counts its README gives a step time for (1 to 128 DGX-A100 GPUs, global batch 65,536,
Adagrad). A table group of `tables` tables becomes that many tables of its rows and width, a
shared table read by several inputs one table whose lookups a sample are their hotness summed
(its pooled outputs, one an input, counted as one); the ids are taken as cold (every lookup a
row of its own, up to the table's rows: the README gives no access distribution); fp32 (that
`main.py` has no mixed precision), Adagrad's state in memory, the `--hardware` file's memory
(default `a100-80gb`: the README does not say 40 or 80 GB). Arms: the `size_lookup` heuristic
on the memory-forced splits, and `dreamshard` as shipped planning for the file. Judges, exact:
the roofline at the file's centre (global batch) and TorchRec's estimator (the per-rank batch).
What the published step holds that neither model does: the MLP's forward and backward, the
dense optimizer, the input pipeline, the loss all-reduce, XLA's fusion of the rest; and a
one-GPU step has no exchange at all.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchmarks.parts.scale_tasks import memory_split_place
from benchmarks.record import model_option, studied_model
from benchmarks.study import Arm, Figure, Judge, Study
from dreamshard.costs.hardware import load_hardware
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.integrations.torchrec_judge import TorchRecEstimatorBackend
from dreamshard.placement.registry import named_planner
from dreamshard.placement.tasks import PlacementTask
from dreamshard.report import format_table
from dreamshard.tables.table import NUM_BINS, Table

DATA = Path(__file__).parent / "data" / "merlin_synthetic_models.json"
COLD = (1.0,) + (0.0,) * (NUM_BINS - 1)  # every lookup a row of its own
HEURISTIC, OURS = "size_lookup (memory splits)", "dreamshard auto"
SIM, EST = "roofline", "torchrec-estimator"


def model_tables(model: dict) -> tuple[Table, ...]:
    """The model's tables: each group's `tables` copies, lookups a sample its hotness summed."""
    return tuple(
        Table(f"g{g}t{k}", group["rows"], group["dim"], float(sum(group["hotness"])), COLD)
        for g, group in enumerate(model["embedding_groups"])
        for k in range(group["tables"])
    )


class PublishedStudy(Study):
    def options(self, parser: argparse.ArgumentParser) -> None:
        model_option(parser)
        parser.add_argument("--hardware", default="a100-80gb", help="the hardware file")

    def prepare(self, args: argparse.Namespace) -> None:
        self.model, provenance = studied_model(args.model)
        self.models = {"dreamshard": provenance}
        self.hardware = load_hardware(args.hardware)
        self.data = json.loads(DATA.read_text())
        self.published = {}  # task name -> (model, GPUs, published step ms, global batch)
        self.about = (
            f"Hardware file {self.hardware.name} (sha256 {self.hardware.sha256[:12]}); source "
            f"{self.data['source']['repository']} at {self.data['source'].get('commit', '?')[:12]}"
            f" ({self.data['source']['license']}). Predicted: the slowest device's forward, "
            "exchange and backward of the embeddings alone, modeled; published: a whole "
            "training step, measured by its authors."
        )

    def tasks(self, args: argparse.Namespace) -> list[PlacementTask]:
        memory = int(self.hardware.value("memory_bytes"))
        tasks = []
        for model in self.data["models"]:
            tables = model_tables(model)
            for point in model["published"]:
                name = f"{model['name']} ({len(tables)} tables) x{point['gpus']}"
                self.published[name] = (point["step_ms"], model["global_batch"], point["gpus"])
                task = PlacementTask(
                    tables, point["gpus"], memory, "fp32", name=name, optimizer="adagrad"
                )
                tasks.append(task)
        return tasks

    def arms(self, args: argparse.Namespace) -> list[Arm]:
        planner = named_planner(
            "dreamshard",
            self.model,
            split="auto",
            hardware=self.hardware,
            topology=self.hardware.topology_name(),
        )
        return [
            Arm(HEURISTIC, lambda t: memory_split_place(t, "size_lookup")),
            Arm(OURS, lambda t: planner(t, 0)),
        ]

    def judges(self, args: argparse.Namespace) -> list[Judge]:
        def roofline(task, placement):
            batch = self.published[task.name][1]
            backend = SimulatedBackend(hardware=self.hardware, batch_size=batch)
            return backend.measure(task, placement).overall

        def estimator(task, placement):
            _, batch, gpus = self.published[task.name]
            backend = TorchRecEstimatorBackend(self.hardware, batch_size=batch // gpus)
            return backend.measure(task, placement).overall

        return [Judge(SIM, roofline), Judge(EST, estimator)]

    def task_extra(self, task: PlacementTask, plans: dict) -> dict:
        return {"published_ms": self.published[task.name][0]}

    def figures(self, rows: list[dict]) -> dict[str, Figure]:
        out = {}
        for judge in (SIM, EST):
            shares = [
                r["plans"][HEURISTIC]["costs"][judge][0] / r["published_ms"]
                for r in rows
                if (r["plans"][HEURISTIC].get("costs") or {}).get(judge, [None])[0]
            ]
            value = float(np.exp(np.mean(np.log(shares)))) if shares else float("nan")
            low, high = (min(shares), max(shares)) if shares else (value, value)
            out[f"{HEURISTIC}: predicted embedding time over the published step, {judge}"] = Figure(
                value, low, high, len(shares)
            )
        return out

    def details(self, rows: list[dict], figures: dict[str, Figure]) -> str:
        table = []
        for r in rows:
            line = [r["task"], f"{r['published_ms']:g}"]
            for arm in (HEURISTIC, OURS):
                costs = r["plans"][arm].get("costs") or {}
                for judge in (SIM, EST):
                    value = costs.get(judge, [None])[0]
                    line.append("-" if value is None else f"{value:.2f}")
            table.append(line)
        headers = ["model x GPUs", "published step ms"]
        headers += [f"{a.split(' ')[0]} {j} ms" for a in (HEURISTIC, OURS) for j in (SIM, EST)]
        lines = ["## Predicted embedding time beside the published step", "", "```"]
        lines += [format_table(headers, table), "```", ""]
        for name, figure in figures.items():
            lines.append(
                f"- {name}: geometric mean {figure.value:.3f}, from {figure.low:.3f} to "
                f"{figure.high:.3f} over {figure.tasks} model and GPU-count pairs."
            )
        lines += [
            "",
            "Not a target. A share below 1 is expected: the published step also runs the MLP, "
            "the dense optimizer, the input pipeline and the loss all-reduce.",
        ]
        return "\n".join(lines)


STUDY = PublishedStudy(
    "published",
    "GPU units against published step times (NVIDIA-Merlin distributed-embeddings, DGX-A100)",
)
