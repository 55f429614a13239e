"""Planning speed at data-set scale: our policy against TorchRec's planner, 856 tables on 128 GPUs.

Run: .venv/bin/python benchmarks/planning_speed.py [--model RUN/model.pt] [--repeats 3]

All 856 tables of the `dlrm` profile pool on 128 devices, each capped at 1.3x the even share
or 1.02x the largest table, whichever is more (here the largest table sets it). Without --model
a small model is trained first on the simulated backend (the networks' sizes, not their
training, set the speed). Each planner runs once untimed (imports, first allocations), then
`--repeats` times; the median wall time is reported. TorchRec is asked twice: with its own
storage reservation (what its users run, which may reject the task) and with none, the same
memory our planners get. Writes benchmarks/results/planning_speed.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from dreamshard.costs.dataset import hardware, versions
from dreamshard.errors import DreamshardError
from dreamshard.files import write_text_atomic
from dreamshard.placement.registry import place
from dreamshard.placement.suites import SCALE_SLACK, capped_task
from dreamshard.placement.tasks import PlacementTask, check_legal
from dreamshard.report import format_table
from dreamshard.tables.synthetic import generate_tables

RESULTS = Path(__file__).parent / "results" / "planning_speed.md"
NUM_TABLES, NUM_DEVICES = 856, 128
TARGET_RATIO, TARGET_SECONDS = 5.0, 2.0


def scale_task(seed: int) -> PlacementTask:
    tables = generate_tables("dlrm", NUM_TABLES, seed)
    return capped_task(tables, NUM_DEVICES, f"dlrm-{NUM_TABLES}x{NUM_DEVICES}")


def small_model(out: str):
    """A quickly trained model on the simulated backend (its size is the real one)."""
    from dreamshard.learn.train import train
    from dreamshard.learn.train_config import TrainConfig

    config = TrainConfig(
        suite="cpu-50x4",
        backend="simulated",
        out=out,
        iterations=1,
        placements_per_iteration=2,
        costnet_steps=20,
        policy_updates=1,
        episodes=2,
        warm_start=4,
        train_tasks=4,
    )
    return train(config, log=lambda line: None)


def timed(planner, repeats: int) -> tuple[float | None, str]:
    """Median seconds of `repeats` runs after one untimed run, or None and why it failed."""
    try:
        planner()
    except DreamshardError as exc:
        return None, str(exc)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        planner()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), ""


def torchrec_versions() -> str:
    found = []
    for package in ("torchrec", "tensordict", "torchmetrics"):
        try:
            found.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            found.append(f"{package} not installed")
    return ", ".join(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="trained model file (default: train a small one)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="table pool seed (default 0)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1); dreamshard places on one thread "
        "whatever this says, so it matters to TorchRec's planner only",
    )
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]
    note = f"torch threads {args.threads}; load average {load:.1f} on {os.cpu_count()} cores"
    task = scale_task(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        if args.model:
            model, source = args.model, args.model
        else:
            start = time.perf_counter()
            model = small_model(tmp)
            source = f"trained here on simulated cpu-50x4 in {time.perf_counter() - start:.0f} s"

        from dreamshard.integrations.torchrec_planner import torchrec_place

        start = time.perf_counter()
        try:
            import torchrec  # noqa: F401
        except ImportError:
            pass
        import_seconds = time.perf_counter() - start

        def ours(samples, split="none"):
            return lambda: check_legal(
                task, place(task, "dreamshard", model=model, samples=samples, split=split)
            )

        def theirs(reserve):
            return lambda: check_legal(task, torchrec_place(task, reserve=reserve))

        planners = [
            ("dreamshard greedy (samples=0)", ours(0)),
            ("dreamshard best of 8 (default)", ours(8)),
            ("dreamshard best of 8, --split auto", ours(8, "auto")),
            ("torchrec, its own reservation", theirs(True)),
            ("torchrec, no reservation (same caps)", theirs(False)),
        ]
        results = {}
        for label, planner in planners:
            results[label] = timed(planner, args.repeats)
            print(label, results[label], flush=True)
    write_text_atomic(RESULTS, report(task, results, source, import_seconds, args.repeats, note))
    print(RESULTS.read_text())
    print(f"wrote {RESULTS}")


def report(task, results, source, import_seconds, repeats, note) -> str:
    reference = results["torchrec, no reservation (same caps)"][0]
    rows, notes = [], []
    for label, (seconds, why) in results.items():
        if seconds is None:
            rows.append([label, "rejected", "-"])
            notes.append(f"- {label}: {why}")
            continue
        ratio = f"{reference / seconds:.1f}x" if reference else "-"
        rows.append([label, f"{seconds:.3f}", ratio])
    ours = [results[k][0] for k in results if k.startswith("dreamshard")]
    verdicts = []
    for label, seconds in zip(("greedy", "best of 8"), ours):
        fast = reference is not None and reference / seconds >= TARGET_RATIO
        verdicts.append(f"{label}: {'meets' if fast and seconds < TARGET_SECONDS else 'misses'}")
    split_seconds = results["dreamshard best of 8, --split auto"][0]
    verdicts.append(
        f"with splitting (issue 13: under {TARGET_SECONDS:g} s): "
        f"{'meets' if split_seconds is not None and split_seconds < TARGET_SECONDS else 'misses'}"
    )
    return (
        "\n\n".join(
            [
                f"# Planning speed at data-set scale ({time.strftime('%Y-%m-%d')})",
                f"Host: {hardware()}; {versions()}; {torchrec_versions()}. "
                f"Task: {len(task.tables)} `dlrm` tables on {task.num_devices} devices, cap "
                f"{task.memory_cap_bytes / 2**30:.2f} GiB each (the larger of {SCALE_SLACK}x the "
                "even share and 1.02x the largest table), fp16. "
                f"Model: {source}. Median wall time of {repeats} runs after one untimed run, in "
                f"process ({note}; TorchRec's import, {import_seconds:.1f} s, not counted). "
                "Speed-up: TorchRec's time with the same caps divided by the planner's.",
                "```\n"
                + format_table(["planner", "seconds", "speed-up vs torchrec"], rows)
                + "\n```",
                f"Targets: at least {TARGET_RATIO:g}x faster than TorchRec and under "
                f"{TARGET_SECONDS:g} s (issue 7, whole tables); under {TARGET_SECONDS:g} s with "
                "splitting (issue 13). " + "; ".join(verdicts) + ".",
                *(["Rejections:\n\n" + "\n".join(notes)] if notes else []),
            ]
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
