"""A planner's plan of a task made in a process of its own, as `dreamshard place` runs it (the
speed study, `benchmarks/speed.py`): the child (`python -m benchmarks.parts.plan_process`)
reads the task's table file, loads the model, plans once untimed, then `--repeats` times, and
writes its last plan as a plan file, which the parent reads back with the child's figures."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.record import ROOT
from dreamshard.cli.args import plan_topology
from dreamshard.costs.hardware import load_hardware
from dreamshard.errors import DreamshardError
from dreamshard.placement.plan_file import placement_from_plan, read_plan, write_plan
from dreamshard.placement.planner import PlanOptions
from dreamshard.placement.registry import place, registration
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.tables.sources import load_tables, save_tables

NAN = float("nan")


def plan_in_process(
    task: PlacementTask,
    method: str,
    split: str,
    model: str,
    repeats: int,
    seconds: float,
    hardware: str = "cpu",
) -> tuple[Placement, dict]:
    """`method`'s plan of `task` for the hardware file `hardware`, made by the child in a process
    of its own and read back from its plan file, with the child's figures (median_s, first_s,
    peak_mb); DreamshardError when the child made none within `seconds`."""
    with tempfile.TemporaryDirectory() as folder:
        tables, out = Path(folder) / "tables.json", Path(folder) / "plan.json"
        save_tables(task.tables, tables)
        cmd = [sys.executable, "-m", "benchmarks.parts.plan_process", str(tables)]
        cmd += [str(task.num_devices), str(task.memory_cap_bytes), method, split]
        cmd += ["--name", task.name, "--model", model, "--hardware", hardware]
        cmd += ["--repeats", str(repeats), "--plan", str(out)]
        try:
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=seconds)
        except subprocess.TimeoutExpired:
            raise DreamshardError(f"no plan in {seconds:g} s") from None
        if done.returncode:
            raise DreamshardError((done.stderr.strip().splitlines() or ["failed"])[-1])
        said = json.loads(done.stdout.strip().splitlines()[-1])
        return placement_from_plan(task, read_plan(out), str(out)), said


def peak_mb() -> float:
    """This process's peak resident memory in MiB (VmHWM: it starts afresh at exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return NAN


def plan_options(model, split: str, hardware: str) -> PlanOptions:
    """As `dreamshard place --hardware` plans: a GPU file on its own links (`plan_topology`)."""
    if hardware == "cpu":
        return PlanOptions(model=model, split=split, reserve=False)
    chosen = load_hardware(hardware)
    topology = plan_topology(None, chosen)
    return PlanOptions(model=model, split=split, reserve=False, hardware=chosen, topology=topology)


def child(argv: list[str]) -> None:
    """One planner on one task in this process: plan once untimed, then `--repeats` times;
    write the last plan, print the figures as JSON (an error: one line on stderr, exit 1)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.parts.plan_process")
    parser.add_argument("spec", nargs=5, help="TABLE_FILE DEVICES CAP_BYTES METHOD SPLIT")
    parser.add_argument("--name", default="")
    parser.add_argument("--model", default="shipped")
    parser.add_argument("--hardware", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--plan", required=True)
    args = parser.parse_args(argv)
    tables, devices, cap, method, split = args.spec
    from dreamshard.planners.dreamshard_planner import one_thread

    try:
        task = PlacementTask(tuple(load_tables(tables)), int(devices), int(cap), name=args.name)
        model = registration(method).load().load_model(args.model)
        options = plan_options(model, split, args.hardware)
        times = []
        with one_thread():
            for _ in range(1 + args.repeats):  # the first: lazy imports, first allocations
                start = time.perf_counter()
                placement = place(task, method, options=options)
                times.append(time.perf_counter() - start)
        write_plan(task, placement, args.plan)
    except Exception as exc:  # noqa: BLE001 - TorchRec's planner fails in its own ways
        text = (str(exc).strip().splitlines() or [""])[0]
        print(f"{type(exc).__name__}: {text}"[:300], file=sys.stderr)
        sys.exit(1)
    median = statistics.median(times[1:] or times)
    print(json.dumps({"median_s": median, "first_s": times[0], "peak_mb": peak_mb()}))


if __name__ == "__main__":
    child(sys.argv[1:])
