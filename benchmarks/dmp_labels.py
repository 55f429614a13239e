"""Cost networks judged on real TorchRec training steps: how well each ranks the DMP steps of
held-out tasks' placements, and how noisy those step labels are (issue 29).

Run: .venv/bin/python benchmarks/dmp_labels.py --model DMP_MODEL [--model KERNEL_MODEL ...]
         [--suites cpu-24x2,cpu-48x2,cpu-80x2] [--tasks 8] [--per-task 8] [--steps 20]
         [--warmup 5] [--rounds 3] [--clock wall|cpu] [--pin] [--dataset FILE] [--out REPORT.md]
Smoke run: --suites cpu-6x2 --tasks 2 --per-task 4 --steps 2 --warmup 1

Held out: each suite's first `--tasks` test tasks (tables no training task holds), `--per-task`
placements of each from the collection's mix (random and the four heuristics, `collect`),
measured by the `dmp` backend as a collection measures them (`--rounds` interleaved rounds
beside the task's reference plan in one launch per task; a label is each rank's median step,
the slowest rank's the overall). They are stored in `--dataset` (default
$DREAMSHARD_HOME/dmp_labels/costs-dmp.sqlite), so a re-run measures only what is missing.

Each `--model` predicts every placement's overall cost (`predicted_overall`: its modeled
all-to-all where it has one); the figure is the Spearman correlation within a task of its
predictions with the DMP labels, averaged over tasks (per suite and over all, with a bootstrap
95% interval over tasks): the ranking a planner relies on. The report names the command that
made each model (from its metadata). The labels' noise: per placement, the coefficient of
variation over rounds of its step divided by the reference plan's step in the same round
(`paired_cv`); the issue's target is below 5%.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from benchmarks.parts.models import train_command, trained_on
from benchmarks.parts.report_files import fenced_table, torchrec_version, write_report
from benchmarks.script_entry import run_script
from dreamshard.costs.backends import describe_costs
from dreamshard.costs.collect import collect, collection_jobs
from dreamshard.costs.dataset import CostDataset, hardware, measurement_key, versions
from dreamshard.errors import DreamshardError
from dreamshard.evaluation.rounds import spearman
from dreamshard.integrations.dmp_backend import DmpBackend, StepConfig
from dreamshard.learn.costnet_data import load_examples, measured_rows
from dreamshard.learn.costnet_fit import fit_costnet
from dreamshard.learn.model_file import DreamShardModel, resolve_model
from dreamshard.learn.pretrain import rehearsal_examples
from dreamshard.learn.train import fresh_state
from dreamshard.learn.train_config import TrainConfig
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.planners.dreamshard_planner import predicted_overall
from dreamshard.state import state_dir

RESULTS = Path(__file__).parent / "results" / "dmp_labels.md"
TARGET_SPEARMAN, TARGET_CV = 0.9, 0.05


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        help="a model to judge (file, train --out folder, shipped or models:/...); repeat",
    )
    parser.add_argument("--suites", default="cpu-24x2,cpu-48x2,cpu-80x2", help="comma-separated")
    parser.add_argument("--tasks", type=int, default=8, help="held-out tasks per suite")
    parser.add_argument("--per-task", type=int, default=8, help="placements per task")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per plan and round")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up steps per turn")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per launch")
    parser.add_argument(
        "--clock", choices=["wall", "cpu"], default="wall", help="which time a step is (wall)"
    )
    parser.add_argument("--pin", action="store_true", help="bind each rank to a core of its own")
    parser.add_argument(
        "--interleave",
        choices=["turns", "steps"],
        default="steps",
        help="one step of each plan in turn (steps, the default), or a plan's timed steps in "
        "a row (turns)",
    )
    parser.add_argument("--dataset", help="where the held-out labels are stored")
    parser.add_argument(
        "--fit",
        metavar="DATASET",
        help="also fit cost networks on this dataset's DMP labels (a collection's or a dmp "
        "training run's costs.sqlite; its suites' test tasks left out), one per --fit-labels "
        "design, each the shipped network fine-tuned with the log-ratio loss, and judge them",
    )
    parser.add_argument("--fit-labels", default="raw,step-split", help="label designs to fit")
    parser.add_argument("--fit-steps", type=int, default=1000, help="Adam steps of each fit")
    parser.add_argument(
        "--fit-rehearsal",
        type=int,
        default=0,
        help="also fit each design replaying this many tasks of the shipped network's "
        "pre-training family beside the DMP labels, half of every batch (`train --rehearsal`)",
    )
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    if args.tasks < 1 or args.per_task < 3:
        parser.error("--tasks must be at least 1 and --per-task at least 3 (a Spearman needs 3)")
    return args


def held_out_jobs(suite_name: str, tasks: int, per_task: int) -> list:
    """`per_task` placements of each of the suite's first `tasks` test tasks (the collection's
    mix, as if those were its training tasks)."""
    suite = make_suite(parse_suite_name(suite_name, num_train_tasks=1, num_test_tasks=tasks))
    held = replace(suite, train_tasks=suite.test_tasks)
    return list(collection_jobs(held, tasks * per_task))


def labelled(jobs: list, backend: DmpBackend, dataset: CostDataset) -> list[tuple]:
    """(task, placement, cost) of each job the dataset holds a label of (measured here)."""
    config, machine = backend.config(), hardware()
    found = []
    for job in jobs:
        cost = dataset.stored_cost(measurement_key(job.task, job.placement, config, 0, machine))
        if cost is not None:
            found.append((job.task, job.placement, cost))
    return found


def mean_interval(values: list[float], resamples: int = 2000, seed: int = 0) -> tuple:
    """(mean, low, high): a bootstrap 95% interval of the mean over tasks."""
    values = np.array([v for v in values if not np.isnan(v)])
    if values.size < 2:
        value = float(values.mean()) if values.size else float("nan")
        return value, value, value
    picks = np.random.default_rng(seed).integers(0, values.size, (resamples, values.size))
    low, high = np.quantile(values[picks].mean(axis=1), [0.025, 0.975])
    return float(values.mean()), float(low), float(high)


def judge(model, found: list[tuple]) -> list[float]:
    """Per task, the Spearman correlation of the model's predicted overall costs with the
    labels (NaN where fewer than 3 placements or all labels equal)."""
    by_task: dict[str, list[tuple]] = {}
    for task, placement, cost in found:
        by_task.setdefault(task.name, []).append((task, placement, cost))
    rhos = []
    for group in by_task.values():
        predicted = [predicted_overall(model, t, [p])[0] for t, p, _ in group]
        rhos.append(spearman(np.array(predicted), np.array([c.overall for _, _, c in group])))
    return rhos


def fitted_models(
    path: str, designs: list[str], steps: int, rehearsal: int = 0
) -> list[tuple[str, object, str]]:
    """(name, model, how it was made) per label design: the shipped network fine-tuned on the
    dataset's most common DMP settings' measurements (log-ratio loss, seed 0, no prior); with
    `rehearsal`, each design once more replaying that many pre-training tasks (half of every
    batch, as `train --rehearsal N --rehearsal-share 0.5` does)."""
    if not Path(path).exists():
        raise DreamshardError(f"--fit: no cost dataset at {path}")
    dataset = CostDataset(path)
    configs = Counter(row["config"] for row in dataset.rows(backend="dmp"))
    if not configs:
        raise DreamshardError(f"--fit: {path} holds no DMP measurement")
    config = json.loads(configs.most_common(1)[0][0])
    backend = DmpBackend(StepConfig(**config["steps"]))
    rows = measured_rows(dataset, config, fitting=True)
    fitted = []
    for design, replayed in [(d, r) for d in designs for r in sorted({0, rehearsal})]:
        train = TrainConfig(
            backend="dmp",
            costnet_loss="log-ratio",
            labels=design,
            iterations=1,
            costnet_steps=steps,
            seed=0,
            rehearsal=replayed,
            rehearsal_share=0.5,
        )
        examples = load_examples(dataset, config, design, fitting=True)
        if len(examples) < 5:
            raise DreamshardError(f"--fit: {len(examples)} {design} examples in {path}")
        state = fresh_state(train, backend)
        replay = rehearsal_examples(train, rows, "cpu-gloo") if replayed else None
        fit_costnet(state, train, examples, replay)
        model = DreamShardModel(state.costnet, state.policy, {"config": asdict(train)})
        prior = f", {replayed} pre-training tasks replayed (half a batch)" if replayed else ""
        how = (
            f"the shipped network fine-tuned by this script on {len(examples)} DMP measurements "
            f"of `{path}` ({design} labels, log-ratio loss, {steps} Adam steps, seed 0, no "
            f"prior{prior})"
        )
        fitted.append((f"fit:{design}" + (f"+rehearsal{replayed}" if replayed else ""), model, how))
    return fitted


def reliability(found: list[tuple], split: str) -> list[float]:
    """Per task, how well the measurement ranks its placements against itself, the ceiling of
    any model's figure: `split` "one": the first round against the mean of the others;
    "halves": the median of the even rounds against that of the odd ones (two labels of half
    the rounds each; a label of all of them agrees with the truth better still). NaN with one
    round."""
    by_task: dict[str, list] = {}
    for task, _, cost in found:
        by_task.setdefault(task.name, []).append(cost.info.get("round_ms", []))
    rhos = []
    for rounds in by_task.values():
        ms = np.array(rounds)
        if ms.ndim != 2 or ms.shape[1] < 2:
            rhos.append(float("nan"))
        elif split == "one":
            rhos.append(spearman(ms[:, 0], ms[:, 1:].mean(axis=1)))
        else:
            rhos.append(spearman(np.median(ms[:, ::2], axis=1), np.median(ms[:, 1::2], axis=1)))
    return rhos


SELF = {"one round": "one", "halves": "halves"}  # the measurement against itself (`reliability`)


def main(argv: list[str] | None = None) -> str:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    began = time.monotonic()
    models = [(name, resolve_model(name)) for name in args.model]
    notes = {name: (trained_on(model), train_command(model)) for name, model in models}
    if args.fit:
        designs = [d.strip() for d in args.fit_labels.split(",") if d.strip()]
        fits = fitted_models(args.fit, designs, args.fit_steps, args.fit_rehearsal)
        for name, model, how in fits:
            models.append((name, model))
            notes[name] = (how, "")
    if not models:
        raise DreamshardError("nothing to judge: give --model or --fit")
    steps = StepConfig(
        warmup=args.warmup,
        steps=args.steps,
        clock=args.clock,
        pin=args.pin,
        interleave=args.interleave,
    )
    backend = DmpBackend(steps, rounds=args.rounds)
    path = Path(args.dataset) if args.dataset else state_dir() / "dmp_labels" / "costs-dmp.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    dataset = CostDataset(path)
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    per_suite, measured_now = {}, 0
    for suite in suites:
        jobs = held_out_jobs(suite, args.tasks, args.per_task)
        print(f"{suite}: {len(jobs)} held-out placements under DMP", flush=True)
        summary = collect(jobs, backend, dataset, f"{suite} held out")
        measured_now += summary.measured
        found = labelled(jobs, backend, dataset)
        if summary.errors:
            print(f"{suite}: {summary.errors} placements failed (left out)", flush=True)
        per_suite[suite] = found
    result = {
        "args": vars(args),
        "hardware": hardware(),
        "versions": {**versions(), "torchrec": torchrec_version()},
        "dmp": describe_costs(backend.config()),
        "dataset": str(path),
        "seconds": time.monotonic() - began,
        "measured_now": measured_now,
        "models": {
            name: {"trained_on": notes[name][0], "command": notes[name][1]} for name, _ in models
        },
        "suites": {},
    }
    for suite, found in per_suite.items():
        cvs = [cost.info["paired_cv"] for _, _, cost in found if "paired_cv" in cost.info]
        result["suites"][suite] = {
            "placements": len(found),
            "tasks": len({t.name for t, _, _ in found}),
            "paired_cv": cvs,
            "spearman": {name: judge(model, found) for name, model in models},
            "reliability": {name: reliability(found, split) for name, split in SELF.items()},
        }
    report = render(result, argv)
    write_report(args.out, report, result)
    print(report)
    return report


def render(result: dict, argv: list[str]) -> str:
    args = result["args"]
    lines = [
        "# Cost networks on real TorchRec training steps (DMP labels)",
        "",
        f"Command: `.venv/bin/python benchmarks/dmp_labels.py {' '.join(argv)}`",
        f"Host: {result['hardware']}; {result['versions']}. One host for every figure.",
        f"Labels: {result['dmp']}; stored in `{result['dataset']}`, "
        f"{result.get('measured_now', '?')} of them measured by this run (the rest stored by "
        f"an earlier run of the same command). {result['seconds']:.0f} s in all.",
        f"Held out: the first {args['tasks']} test tasks of each suite (2 ranks), "
        f"{args['per_task']} placements each (random and the four heuristics).",
        "",
        "## Models",
        "",
    ]
    for name, about in result["models"].items():
        made = "" if about["command"] in about["trained_on"] else f"; made by `{about['command']}`"
        lines.append(f"- `{name}`: {about['trained_on']}{made}")
    lines += [
        "",
        f"## Spearman within a task (mean over tasks [bootstrap 95%]; target >= {TARGET_SPEARMAN})",
        "",
    ]
    names = list(result["models"])
    columns = [*names, *SELF]
    rows = []
    pooled: dict[str, list[float]] = {name: [] for name in columns}
    for suite, figures in result["suites"].items():
        found = dict(figures["spearman"])
        agreement = figures.get("reliability", {})
        if isinstance(agreement, list):  # written before the halves were counted
            agreement = {"one round": agreement}
        found.update(agreement)
        cells = [suite, figures["tasks"]]
        for name in columns:
            rhos = found.get(name, [])
            pooled[name] += rhos
            cells.append("{:.3f} [{:.3f}, {:.3f}]".format(*mean_interval(rhos)))
        rows.append(cells)
    rows.append(
        [
            "all",
            sum(f["tasks"] for f in result["suites"].values()),
            *("{:.3f} [{:.3f}, {:.3f}]".format(*mean_interval(pooled[n])) for n in columns),
        ]
    )
    lines.append(fenced_table(" | ".join(["suite", "tasks", *columns]), rows))
    lines += [
        "",
        "The measurement against itself: `one round`, each task's first round against the mean "
        "of its other rounds; `halves`, the median of its even rounds against that of its odd "
        "ones. A label (the median of all rounds) is more reliable than either, but a model's "
        "figure cannot go much above what the labels agree with themselves.",
    ]
    lines += [
        "",
        f"## Label noise: paired spread over rounds (target < {TARGET_CV:.0%})",
        "",
        "Per placement, the coefficient of variation over rounds of its step / the reference "
        "plan's step in the same round.",
        "",
    ]
    noise = []
    for suite, figures in result["suites"].items():
        cvs = np.array(figures["paired_cv"])
        if not cvs.size:
            noise.append([suite, 0, "-", "-", "-"])
            continue
        noise.append(
            [
                suite,
                cvs.size,
                f"{np.median(cvs):.1%}",
                f"{np.quantile(cvs, 0.9):.1%}",
                f"{np.mean(cvs < TARGET_CV):.0%}",
            ]
        )
    lines.append(fenced_table("suite | placements | median | 90th pct | under 5%", noise))
    return "\n".join(lines)


if __name__ == "__main__":
    run_script(main)
