"""The planning-speed study: each planner's time and peak memory at scale, beside TorchRec's.

Tasks (`placement.suites.SPEED_TASKS`): 856 and 10,000 dlrm tables (seed 7) on 128 devices of
8 GiB and on 1,024 of 16 GiB, fp16 (`--tables-scale S` scales tables and devices by S for a first
look: other tasks, named by their sizes), each planned for this host's calibrated model (`cpu`)
and for the `h100-sxm` hardware file (`HARDWARE`). Arms: the four heuristics with `--split auto`;
`dreamshard` as a user runs it (8 samples, `--split auto`, the default budget) with `--model`
(default the shipped ensemble); TorchRec's planner on the same caps without its reservation,
table-wise and with every sharding type (the cpu tasks only). Each arm runs in a process of its
own, as `dreamshard place --tables FILE [--hardware NAME]` does (`parts/plan_process.py`): it
reads the task's table file, loads the model, plans once untimed, then `--repeats` times, and
writes its last plan as a plan file, which the runner reads back; past `--seconds` in all, the
arm declines. Per plan: the median in-process seconds and the process's peak resident memory
(VmHWM). Judge: the simulated backend of the task's hardware (cpu: the calibrated model on
cpu-gloo exchange, the default the tasks take; h100-sxm: its roofline on its own links), all
modeled, exact, one round.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace

from benchmarks.parts.plan_process import NAN, plan_in_process
from benchmarks.record import model_option, studied_model
from benchmarks.study import Arm, Figure, Judge, Study, Target, mean_figure, ratio_figure
from dreamshard.cli.args import positive
from dreamshard.costs.hardware import load_hardware
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.errors import DreamshardError
from dreamshard.placement.budget import default_time_budget
from dreamshard.placement.registry import method_names
from dreamshard.placement.suites import SPEED_TASKS, speed_task
from dreamshard.placement.tasks import PlacementTask
from dreamshard.report import format_table
from dreamshard.tables.synthetic import generate_tables

JUDGE, OURS = "simulated", "dreamshard auto"
HEURISTICS = tuple(f"{key} auto" for key in method_names("heuristic"))
# (arm, method, split, planned for GPU files too): TorchRec plans without its reservation, on
# our caps
ARMS = (
    *((name, name.split()[0], "auto", True) for name in HEURISTICS),
    (OURS, "dreamshard", "auto", True),
    ("torchrec table-wise", "torchrec", "none", False),
    ("torchrec every type", "torchrec", "auto", False),
)
# Each task is planned for each hardware file: this host's calibrated model (`cpu`, the task's
# own name) and a GPU file's (the name with the file's after a space), each judged by its own
# simulated backend; TorchRec's planner, whose time no file changes, on the cpu tasks only.
HARDWARE = ("cpu", "h100-sxm")
# median seconds the issues ask for, by task: (dreamshard, every heuristic); and peak memory
LIMITS = {"dlrm-856x128": (1.0, 0.2), "dlrm-10000x1024": (10.0, 2.0)}
MEMORY_MB = 1024
TARGETS = tuple(
    Target(f"{task}{hw}: {arm} {what}", at_most=MEMORY_MB if what == "peak MB" else limit)
    for hw in ("", *(f" {name}" for name in HARDWARE[1:]))
    for task, limits in LIMITS.items()
    for arm, limit in zip((OURS, "slowest heuristic"), limits)
    for what in ("median s", "peak MB")
)
SECONDS, SCALE = (120.0, 30.0), (1.0, 0.25)  # (a run, --quick) unless given


def hardware_of(task_name: str) -> str:
    """The hardware file a task of this study is planned for (`HARDWARE`)."""
    return task_name.split(" ")[1] if " " in task_name else "cpu"


def dlrm_task(name: str, tables: int, devices: int, cap_bytes: int) -> PlacementTask:
    """A speed task as `speed_task` makes it: `tables` dlrm tables of seed 7, fp16."""
    return PlacementTask(tuple(generate_tables("dlrm", tables, 7)), devices, cap_bytes, name=name)


def speed_tasks(scale: float = 1.0, hardware=HARDWARE) -> list[PlacementTask]:
    """`SPEED_TASKS`, or with tables and devices scaled by `scale` (named by their sizes), for
    each of `hardware` (a GPU file's named with it: `hardware_of`)."""
    if scale == 1.0:
        tasks = [speed_task(name) for name, *_ in SPEED_TASKS]
    else:
        sizes = [(round(n * scale) or 1, round(d * scale) or 1, g) for _, n, d, g in SPEED_TASKS]
        tasks = [dlrm_task(f"dlrm-{n}x{d}", n, d, int(gib * 2**30)) for n, d, gib in sizes]
    suffix = {hw: "" if hw == "cpu" else f" {hw}" for hw in hardware}
    return [replace(t, name=t.name + suffix[hw]) for hw in hardware for t in tasks]


class SpeedStudy(Study):
    def options(self, parser: argparse.ArgumentParser) -> None:
        model_option(parser)
        parser.add_argument("--repeats", type=positive(int), default=3, help="timed plans")
        parser.add_argument(
            "--seconds", type=float, help=f"the most an arm's process may take ({SECONDS})"
        )
        parser.add_argument("--tables-scale", type=float, help=f"x tables, devices ({SCALE})")

    def prepare(self, args: argparse.Namespace) -> None:
        quick = int(getattr(args, "quick", False))  # --quick: smaller tasks, a shorter limit
        args.seconds = args.seconds or SECONDS[quick]
        args.tables_scale = args.tables_scale or SCALE[quick]
        self.models = {"dreamshard": studied_model(args.model)[1]}  # the child loads it
        self.backends = {
            hw: SimulatedBackend() if hw == "cpu" else SimulatedBackend(hardware=load_hardware(hw))
            for hw in HARDWARE
        }
        self.settings = {"repeats": args.repeats, "limit_s": args.seconds}

    def tasks(self, args: argparse.Namespace) -> list[PlacementTask]:
        return speed_tasks(args.tables_scale)

    def arms(self, args: argparse.Namespace) -> list[Arm]:
        fixed = (str(args.model), args.repeats, args.seconds)

        def plan(task, method, split, gpu_too):
            hardware = hardware_of(task.name)
            if hardware != "cpu" and not gpu_too:
                raise DreamshardError("not run for a GPU file: its times are the cpu task's")
            return plan_in_process(task, method, split, *fixed, hardware)

        return [
            Arm(name, lambda t, m=method, s=split, g=gpu: plan(t, m, s, g))
            for name, method, split, gpu in ARMS
        ]

    def judges(self, args: argparse.Namespace) -> list[Judge]:
        def judge(task, placement):
            backend = self.backends[hardware_of(task.name)]
            return float(backend.overall_many(task, [placement])[0])

        return [Judge(JUDGE, judge)]

    def task_extra(self, task: PlacementTask, plans: dict) -> dict:
        gib, load = task.memory_cap_bytes / 2**30, os.getloadavg()[0]
        sizes = {"tables": len(task.tables), "devices": task.num_devices, "gib": gib}
        extra = {"load": load, "cores": os.cpu_count(), "hardware": hardware_of(task.name)}
        return sizes | self.settings | extra

    def figures(self, rows: list[dict]) -> dict[str, Figure]:
        out = {}
        for row in rows:
            task, plans = row["task"], row["plans"]
            for arm, plan in plans.items():
                out[f"{task}: {arm} median s"] = mean_figure([plan.get("median_s", NAN)])
                out[f"{task}: {arm} peak MB"] = mean_figure([plan.get("peak_mb", NAN)])
                out[f"{task}: {arm} vs heuristics"] = ratio_figure([row], arm, HEURISTICS, JUDGE)
            for what, key in (("median s", "median_s"), ("peak MB", "peak_mb")):
                found = [plans.get(arm, {}).get(key, NAN) for arm in HEURISTICS]
                worst = NAN if any(v != v for v in found) else max(found)  # NaN: one declined
                out[f"{task}: slowest heuristic {what}"] = mean_figure([worst])
        return out

    def details(self, rows: list[dict], figures: dict[str, Figure]) -> str:
        parts = []
        for row in rows:
            task, plans = row["task"], row["plans"]
            torchrec = [p["median_s"] for a, p in plans.items() if "median_s" in p and "torch" in a]
            table, declined = [], []
            for arm, plan in plans.items():
                if "declined" in plan:
                    table.append([arm, *["-"] * 8])
                    declined.append(f"- {arm}: {plan['declined']}")
                    continue
                cost = (plan["costs"].get(JUDGE) or [None])[0]
                table.append(
                    [arm, f"{plan['median_s']:.3f}", f"{plan['first_s']:.2f}"]
                    + [f"{plan['seconds']:.1f}", f"{plan['peak_mb']:.0f}"]
                    + [sum(plan.get("splits", {}).values())]
                    + ["-" if cost is None else f"{cost:.1f}"]
                    + [f"{figures[f'{task}: {arm} vs heuristics'].value:.3f}"]
                    + [f"{plan['median_s'] / min(torchrec):.3f}x" if torchrec else "-"]
                )
            headers = ["arm", "median s", "first s", "process s", "peak MB", "split"]
            headers += ["simulated ms", "vs best heuristic", "vs torchrec"]
            parts += [
                f"## {task}: {row['tables']} tables on {row['devices']} devices of "
                f"{row['gib']:g} GiB, planned for {row.get('hardware', 'cpu')} (default "
                f"budget {default_time_budget(row['tables']):g} s)",
                "",
                f"{row['repeats']} timed plans after one untimed, {row['limit_s']:g} s a process "
                f"at most; load average {row['load']:.1f} on {row['cores']} cores after it.",
                "",
                "```",
                format_table(headers, table),
                "```",
                "",
                *(["No plan:", "", *declined, ""] if declined else []),
            ]
        parts.append(
            "first s: the untimed first plan; process s: the arm's whole process (imports, the "
            "model, every plan); split: tables split; vs torchrec: the median over TorchRec's "
            "fastest (either arm)."
        )
        return "\n".join(parts)


STUDY = SpeedStudy(
    "speed",
    "Planning speed at scale: time and peak memory beside TorchRec's planner",
    TARGETS,
    about="Each arm in a process of its own (torch on one thread), as `dreamshard place` runs: "
    "the median of its in-process plans after one untimed plan, and the process's peak resident "
    "memory (VmHWM). TorchRec has no time limit of its own, only the process's. Ratio: the "
    "plan's simulated cost (for the task's hardware: cpu's calibrated model, or a GPU file's "
    "roofline on its links) over the task's best heuristic's. Targets: the issue's, on the two "
    "speed tasks (README, `placement/budget.py`); a scaled run (`--tables-scale`, and `--quick` "
    "at 0.25) has other tasks and meets none.",
)
