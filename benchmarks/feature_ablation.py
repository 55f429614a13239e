"""The paper's feature study (its RQ4): the cost network's held-out error with each of the 21
table features removed, and with each feature group removed.

Run: .venv/bin/python benchmarks/feature_ablation.py [--dataset PATH] [--seeds 3] [--steps 1000]

"Removed" = the feature's column zeroed in training and evaluation alike (a constant the
encoder's bias absorbs: the same as dropping it), the network retrained from the same seed on
the same training data with the project's fit (`fit_costnet`: Adam, batch 64, lr 5e-4
decaying linearly). Per row and seed: MAPE of every head on held-out placements (fwd_comp,
bwd_comm, bwd_comp per device; the overall cost composed from them) and the overall cost's
Spearman correlation across the placements of one task, averaged over tasks. Changes are
paired by seed: a MAPE as a ratio to the full network's, a Spearman as a difference.

Data, by default: a simulated cost dataset made here (cheap; kept in
.dreamshard/feature_ablation/costs.sqlite, so a re-run measures nothing): `--placements`
heuristic and random placements of the suite's training tasks (the training warm start's
mix), and `--held-out` placements of its test tasks, whose tables the training tasks never
hold. With `--dataset PATH` (e.g. the main job's .dreamshard/pipeline/SUITE/costs.sqlite, real
fbgemm measurements), its costs: the backend settings with the most measurements; held out are
its test tasks when it has any (an evaluation stored them), else every fifth task by name.

Writes benchmarks/results/feature_ablation.md and .json (the dashboard's Cost model page shows
the JSON). The default run takes about 5 minutes of CPU (69 fits of 1000 steps): 5 to 12
minutes of wall time on 2 cores, as busy as other jobs make them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.parts.costnet_study import (
    HEADS,
    StudyData,
    dataset_data,
    fitted_scores,
    learned_heads,
    modeled_comm,
    simulated_data,
    study_config,
)
from benchmarks.parts.ratio_tables import paired_change
from benchmarks.parts.report_files import write_report
from benchmarks.script_entry import run_script
from dreamshard.costs.backends import describe_costs
from dreamshard.costs.dataset import hardware, versions
from dreamshard.learn.costnet_data import mask_features
from dreamshard.learn.train_config import LOSS_CHOICES, TrainConfig, fitting_loss
from dreamshard.progress import Progress
from dreamshard.report import format_table
from dreamshard.state import state_dir
from dreamshard.tables.features import FEATURE_NAMES
from dreamshard.tables.table import NUM_BINS

RESULTS = Path(__file__).parent / "results" / "feature_ablation.md"
FORMAT = "dreamshard-feature-ablation"  # dashboard/frames.py reads files of this format
GROUPS = {
    "dim": ("dim",),
    "rows/size": ("rows", "size"),
    "pooling": ("pooling_factor",),
    "access histogram": tuple(f"bin_{j}" for j in range(NUM_BINS)),
}
FULL = "none (all 21 features)"


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def removals() -> list[tuple[str, str, tuple[str, ...]]]:
    """(what is removed, kind, feature names): the full network, the groups, each feature."""
    rows = [(FULL, "full", ())]
    rows += [(name, "group", features) for name, features in GROUPS.items()]
    rows += [(name, "feature", (name,)) for name in FEATURE_NAMES]
    return rows


def fit_and_score(
    data: StudyData, removed: tuple[str, ...], seed: int, steps: int, loss: str
) -> dict:
    """A fresh cost network fitted without `removed`; its held-out errors."""
    train, held_out = (mask_features(d, removed) for d in (data.train, data.held_out))
    found = fitted_scores(study_config(data, seed, steps, loss), train, held_out)
    keep = [f"{head}_mape" for head in HEADS] + ["spearman", "spearman_tasks"]
    return {key: found[key] for key in keep}


def zero_features(data: StudyData) -> set[str]:
    """Features that are zero in every table of the data: removing them changes nothing."""
    features = np.concatenate([e.features for e in data.train + data.held_out])
    return {name for j, name in enumerate(FEATURE_NAMES) if not features[:, j].any()}


def study(
    data: StudyData, seeds: list[int], steps: int, loss: str, heads: tuple[str, ...]
) -> list[dict]:
    """Every removal, every seed. A removal that masks the same columns as another (a group of
    one feature; features zero in every table) reuses that one's fits: they are identical."""
    plan = removals()
    zero = zero_features(data)
    masked = {features: tuple(f for f in features if f not in zero) for _, _, features in plan}
    fitted: dict[tuple[str, ...], list[dict]] = {}
    progress = Progress(len(set(masked.values())) * len(seeds), "fitting cost networks")
    for label, _, features in plan:
        if masked[features] in fitted:
            continue
        runs = fitted[masked[features]] = []
        for seed in seeds:
            runs.append(fit_and_score(data, masked[features], seed, steps, loss))
            progress.step(f"{label}, seed {seed}: overall MAPE {runs[-1]['overall_mape']:.1%}")
    progress.close()
    full = fitted[()]
    rows = []
    for label, kind, features in plan:
        runs = fitted[masked[features]]
        stats = {
            f"{head}_mape": paired_change(
                [r[f"{head}_mape"] for r in runs], [r[f"{head}_mape"] for r in full], ratio=True
            )
            for head in heads
        }
        stats["spearman"] = paired_change(
            [r["spearman"] for r in runs], [r["spearman"] for r in full], ratio=False
        )
        rows.append(
            {
                "removed": label,
                "kind": kind,
                "features": list(features),
                "zero_in_data": sorted(set(features) & zero),
                "per_seed": [{"seed": s, **r} for s, r in zip(seeds, runs)],
                "summary": stats,
            }
        )
    return rows


def mape_cell(stats: dict, full_row: bool) -> str:
    if full_row:
        return f"{stats['mean']:.1%} [{stats['min']:.1%}, {stats['max']:.1%}]"
    low, high = stats["change_min"], stats["change_max"]
    return f"{stats['mean']:.1%} {stats['change']:.2f}x [{low:.2f}, {high:.2f}]"


def spearman_cell(stats: dict, full_row: bool) -> str:
    if full_row:
        return f"{stats['mean']:.3f} [{stats['min']:.3f}, {stats['max']:.3f}]"
    return (
        f"{stats['mean']:.3f} {stats['change']:+.3f} "
        f"[{stats['change_min']:+.3f}, {stats['change_max']:+.3f}]"
    )


def table(rows: list[dict], heads: list[str]) -> str:
    headers = ["removed", *(f"{head} MAPE" for head in heads), "Spearman in a task"]
    body = []
    for row in rows:
        full = row["kind"] == "full"
        cells = [mape_cell(row["summary"][f"{head}_mape"], full) for head in heads]
        label = row["removed"] + (" (group)" if row["kind"] == "group" else "")
        if row["kind"] != "full" and row["zero_in_data"] == row["features"]:
            label += " (zero in all data)"
        body.append([label, *cells, spearman_cell(row["summary"]["spearman"], full)])
    return format_table(headers, body)


def findings(rows: list[dict]) -> str:
    """The headline: groups and features ranked by how much their removal hurts overall."""

    def ranked(kind: str, n: int) -> str:
        chosen = [r for r in rows if r["kind"] == kind]
        chosen.sort(key=lambda r: -r["summary"]["overall_mape"]["change"])
        cells = []
        for row in chosen[:n]:
            mape, rho = row["summary"]["overall_mape"], row["summary"]["spearman"]
            cells.append(
                f"{row['removed']} {mape['change']:.2f}x [{mape['change_min']:.2f}, "
                f"{mape['change_max']:.2f}] (Spearman {rho['change']:+.3f})"
            )
        return "; ".join(cells)

    noise = rows[0]["summary"]["overall_mape"]
    return (
        f"Overall MAPE of the full network {noise['mean']:.1%} (seeds {noise['min']:.1%} to "
        f"{noise['max']:.1%}). Groups by overall MAPE vs the full network: "
        f"{ranked('group', 4)}. Single features that hurt most: {ranked('feature', 4)}."
    )


def header(
    data: StudyData, seeds: list[int], steps: int, loss: str, runtime_s: float, cpu_s: float, argv
) -> str:
    spread = (
        f"Seeds {', '.join(map(str, seeds))}: every row is fitted once per seed from the same "
        "initial weights and batches as the full network's fit with that seed, and its change "
        "is paired by seed (MAPE: geometric mean of the ratios; Spearman: mean difference), "
        "[min, max] over seeds beside it. One retrain's noise can exceed a feature's effect: "
        "a change whose range spans 1x (or 0) is within that noise."
    )
    return (
        f"Costs: {describe_costs(data.config)}. Hardware of the costs: {data.hardware}. "
        f"Data: {data.source}. Fit: `fit_costnet`, loss {loss}, {steps} steps of batch "
        f"{TrainConfig.costnet_batch}, Adam lr {TrainConfig.learning_rate:g} decaying linearly; "
        f"removed features zeroed in training and evaluation{zero_note(data)}. {spread} "
        "MAPE over held-out "
        "placements (per device for each learned device head, empty devices left out; "
        "overall: the cost composed from the device heads); Spearman: the overall cost's rank "
        f"correlation across the held-out placements of one task, mean over "
        f"{data.spearman_tasks()} tasks. Host {hardware()}; {versions()}. Wall time "
        f"{runtime_s / 60:.1f} min ({cpu_s / 60:.1f} min of CPU). Command: "
        f"`{' '.join(['.venv/bin/python benchmarks/feature_ablation.py', *argv])}`."
    )


def comm_note(comm: dict | None) -> str:
    if comm is None:
        return ""
    return (
        f" The cost network takes the all-to-all from the {comm['topology']} topology model "
        "(as the costs did), so bwd_comm is exact by construction and not studied; the overall "
        "cost still composes it with the learned fwd_comp and bwd_comp."
    )


def zero_note(data: StudyData) -> str:
    zero = [name for name in FEATURE_NAMES if name in zero_features(data)]
    if not zero:
        return ""
    one = len(zero) == 1
    return (
        f" ({', '.join(zero)} {'is' if one else 'are'} zero in every table here: removing "
        f"{'it' if one else 'them'} changes nothing, {'its row is' if one else 'their rows are'} "
        "the full network's)"
    )


def markdown(results: dict) -> str:
    return "\n\n".join(
        [
            f"# The cost network's features (the paper's RQ4), {results['created']}",
            results["note"],
            "## Headline\n\n" + results["headline"],
            "## Held-out errors with each feature group and each feature removed\n\n"
            "MAPE cells: mean over seeds, then (rows below the first) the ratio to the full "
            "network and its [min, max] over seeds; first row: [min, max] over seeds. "
            "Spearman cells: mean, then the difference to the full network.\n\n```\n"
            + table(results["rows"], results["heads"])
            + "\n```",
        ]
    )


def study_data(args: argparse.Namespace) -> StudyData:
    """`--dataset`'s costs, or the simulated study set, kept in the state folder (a re-run
    measures nothing)."""
    if args.dataset:
        return dataset_data(args.dataset)
    costs = state_dir() / "feature_ablation" / "costs.sqlite"
    return simulated_data(
        args.suite, args.placements, args.held_out, args.held_out_tasks, costs, log
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] + " " + __doc__.splitlines()[1],
        epilog="Writes the markdown report to --out and the JSON beside it (the dashboard's "
        "Cost model page reads it). The default run takes about 5 minutes of CPU.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--dataset",
        help="an existing cost dataset (sqlite), e.g. real fbgemm measurements "
        "(.dreamshard/pipeline/SUITE/costs.sqlite); default: simulate one",
    )
    parser.add_argument("--suite", default="cpu-50x4", help="suite to simulate")
    parser.add_argument(
        "--placements", type=int, default=1000, help="training placements to simulate"
    )
    parser.add_argument("--held-out", type=int, default=200, help="held-out placements to simulate")
    parser.add_argument(
        "--held-out-tasks", type=int, default=10, help="test tasks the held-out placements cover"
    )
    parser.add_argument("--seeds", type=int, default=3, help="retrains per row (seeds 0..N-1)")
    parser.add_argument("--steps", type=int, default=1000, help="cost-net steps per fit")
    parser.add_argument(
        "--costnet-loss",
        default=TrainConfig.costnet_loss,
        choices=LOSS_CHOICES,
        help="the cost network's loss, as in training",
    )
    parser.add_argument(
        "--out", default=str(RESULTS), help="markdown report; the .json goes beside it"
    )
    args = parser.parse_args(argv)
    if (
        args.seeds < 1
        or args.steps < 1
        or args.placements < 5
        or args.held_out < 3
        or args.held_out_tasks < 1
    ):
        parser.error(
            "--seeds, --steps and --held-out-tasks must be positive, --placements >= 5, "
            "--held-out >= 3"
        )
    return args


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    torch.set_num_threads(1)  # small networks: faster on one thread here
    began, began_cpu = time.monotonic(), time.process_time()
    data = study_data(args)
    args.costnet_loss = fitting_loss(study_config(data, 0, args.steps, args.costnet_loss))
    seeds = list(range(args.seeds))
    log(f"{data.source}; {len(seeds)} seeds")
    comm, heads = modeled_comm(data), learned_heads(data)
    rows = study(data, seeds, args.steps, args.costnet_loss, heads)
    runtime_s, cpu_s = time.monotonic() - began, time.process_time() - began_cpu
    results = {
        "format": FORMAT,
        "version": 1,
        "created": time.strftime("%Y-%m-%d"),
        "runtime_s": runtime_s,
        "cpu_s": cpu_s,
        "data": {
            "costs": describe_costs(data.config),
            "backend": data.config.get("backend", "?"),
            "measured": data.config.get("backend") == "fbgemm",
            "hardware": data.hardware,
            "source": data.source,
            "train_placements": len(data.train),
            "held_out_placements": len(data.held_out),
            "train_tasks": len({e.task for e in data.train}),
            "held_out_tasks": len({e.task for e in data.held_out}),
            "spearman_tasks": data.spearman_tasks(),
        },
        "training": {
            "seeds": seeds,
            "steps": args.steps,
            "loss": args.costnet_loss,
            "batch": TrainConfig.costnet_batch,
            "learning_rate": TrainConfig.learning_rate,
        },
        "heads": list(heads),
        "modeled_comm": comm,
        "rows": rows,
        "headline": findings(rows),
        "note": header(data, seeds, args.steps, args.costnet_loss, runtime_s, cpu_s, argv)
        + comm_note(comm),
    }
    print(results["note"] + "\n\n" + results["headline"] + "\n\n" + table(rows, list(heads)))
    write_report(args.out, markdown(results), results)
    print(f"feature study took {runtime_s / 60:.1f} min ({cpu_s / 60:.1f} min of CPU)")
    return results


if __name__ == "__main__":
    run_script(main)
