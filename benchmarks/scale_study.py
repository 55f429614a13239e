"""The scale study (RQ5): 428-856 tables on 16-128 devices across hosts, every plan judged by our
simulated backend and by TorchRec's own estimator.

Run: .venv/bin/python benchmarks/scale_study.py [--model RUN/model.pt] [--seeds 0-7]
         [--sets dlrm-428,dlrm-856,wide-856] [--devices 16,32,64,128] [--memory loose,binding]
         [--torchrec-seconds 60] [--torchrec-wall 600] [--milp-seconds 30] [--out FILE]
         [--rows FILE] [--minutes M] [--replan "dreamshard auto,..."]

A study too long for one sitting (the whole grid is hours here) goes on over reruns: every
task's row is kept in `--rows` (default NAME.rows.json beside the report) under the settings
that made it (the model's fingerprint, the time limits), `--minutes` stops starting tasks after
that long, and the same command run again plans only the tasks not stored. `--replan NAMES`
plans and judges those planners again on every stored task whose record an older library made
(a planner changed since), keeping the rest of each row. The report covers the rows it has and
says how many, from which runs, commits and hosts, and which planners were re-planned where.

Tasks, fixed before the run by the arguments: each table set (`evaluation/scale_study.py`) and
seed on each device count under each memory setting, on hosts of 8 (`nvlink-rdma`). Planners:
the four heuristics on the memory-forced splits only (the reference) and with `--split auto`;
`search_analytic`; `dreamshard` with `--split none` and `auto` (the model of `--model`, else
one trained first on dlrm-50x8, simulated, as paper_scale does); TorchRec's planner allowed
every sharding type that maps to ours, with and without its storage reservation, stopped after
`--torchrec-seconds`; and the simulated MILP's lower bound on whole-table plans (loose memory,
`--milp-seconds`, 0: none). Ratios: geometric mean over tasks [bootstrap 95% interval over
tasks], pooled over table sets and memory settings per device count. A target is met when the
interval's upper end meets it. Progress on stderr; writes benchmarks/results/scale_study.md and
its .json (every plan's times, splits and both judges' costs).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from script_entry import run_script

from dreamshard.cli.args import number_list
from dreamshard.cli.train import config_from, training_options
from dreamshard.costs.dataset import hardware
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.evaluation.models import given_or_trained
from dreamshard.evaluation.ratio_tables import interval_cell
from dreamshard.evaluation.report_files import fenced_table, host_note, write_report
from dreamshard.evaluation.rounds import bootstrap_interval, geometric_mean
from dreamshard.evaluation.scale_study import (
    MEMORY_SETTINGS,
    STUDY_SETS,
    TOPOLOGY,
    StudyRows,
    judge_plan,
    memory_split_place,
    study_task,
)
from dreamshard.integrations.torchrec_judge import torchrec_judge
from dreamshard.learn.model_file import model_fingerprint
from dreamshard.learn.train_config import TrainConfig
from dreamshard.placement.heuristics import HEURISTIC_KEYS
from dreamshard.placement.registry import named_planner
from dreamshard.planners.milp_simulated import solve_simulated_milp
from dreamshard.state import state_dir

RESULTS = Path(__file__).parent / "results" / "scale_study.md"
OURS, TORCHREC = "dreamshard auto", "torchrec (no reservation)"
TORCHREC_TW = "torchrec table-wise (no reservation)"
# (devices, planner compared, reference, judge, target): the targets
TARGETS = [
    ((64, 128), OURS, "best heuristic", "simulated", 0.80, "loose"),
    ((64, 128), OURS, "best heuristic", "simulated", 0.85, "binding"),
    ((64, 128), OURS, TORCHREC, "simulated", 0.90, None),
    ((64, 128), OURS, TORCHREC, "torchrec", 1.00, None),
    ((16, 32), OURS, TORCHREC, "simulated", 0.85, None),
    # the same three against TorchRec's table-wise plan (not the targets' planner: a stand-in
    # where TorchRec's planner with every sharding type gives no plan in its time)
    ((64, 128), OURS, TORCHREC_TW, "simulated", 0.90, None),
    ((64, 128), OURS, TORCHREC_TW, "torchrec", 1.00, None),
    ((16, 32), OURS, TORCHREC_TW, "simulated", 0.85, None),
]


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def planners_for(model, seconds: float | None = None) -> dict:
    """name -> (task -> placement). TorchRec's planner with every sharding type gets `seconds`
    as its own `timeout_seconds` (its proposers stop there and it answers with its best plan
    so far; its enumeration comes first and is not counted), and a wall-clock limit of its
    own besides (`main`)."""
    planners = {
        f"{key} (memory splits)": (lambda t, key=key: memory_split_place(t, key))
        for key in HEURISTIC_KEYS
    }
    for key in HEURISTIC_KEYS:
        planner = named_planner(key, split="auto", topology=TOPOLOGY)
        planners[f"{key} auto"] = lambda t, p=planner: p(t, 0)
    for name, method, split in (
        ("search_analytic auto", "search_analytic", "auto"),
        ("dreamshard none", "dreamshard", "none"),
        (OURS, "dreamshard", "auto"),
    ):
        planner = named_planner(method, model, split=split, topology=TOPOLOGY)
        planners[name] = lambda t, p=planner: p(t, 0)
    for name, reserve in ((TORCHREC, False), ("torchrec (reservation)", True)):
        planner = named_planner(
            "torchrec", split="auto", reserve=reserve, topology=TOPOLOGY, time_budget=seconds
        )
        planners[name] = lambda t, p=planner: p(t, 0)
    # table-wise only: what TorchRec's planner gives in seconds where every type takes minutes
    planner = named_planner("torchrec", split="none", reserve=False, topology=TOPOLOGY)
    planners[TORCHREC_TW] = lambda t, p=planner: p(t, 0)
    return planners


def reference(records: dict, judge: str) -> float:
    """The per-task best heuristic on the memory-forced splits, under `judge`."""
    return min(records[f"{key} (memory splits)"][judge] for key in HEURISTIC_KEYS)


def ratios(rows: list[dict], planner: str, versus: str, judge: str) -> np.ndarray:
    """Per task: `planner`'s cost over `versus`'s (a planner, or "best heuristic")."""
    out = []
    for row in rows:
        records = row["plans"]
        base = reference(records, judge) if versus == "best heuristic" else records[versus][judge]
        out.append(records[planner][judge] / base)
    return np.array(out)


def target_rows(rows: list[dict]) -> list[list]:
    table = []
    for devices, planner, versus, judge, target, memory in TARGETS:
        chosen = [r for r in rows if r["devices"] in devices and memory in (None, r["memory"])]
        values = ratios(chosen, planner, versus, judge)
        values = values[np.isfinite(values)]
        if not values.size:
            table.append([devices, versus, judge, memory or "both", target, "-", "no plans"])
            continue
        low, high = bootstrap_interval(values)
        met = "met" if high <= target else "not met"
        cell = f"{geometric_mean(values):.3f} [{low:.3f}, {high:.3f}] ({values.size} tasks)"
        table.append([devices, versus, judge, memory or "both", target, cell, met])
    return table


def device_rows(rows: list[dict], planners: list[str], judge: str) -> list[list]:
    """Per device count: each planner over the best heuristic (memory splits), under `judge`."""
    out = []
    for d in sorted({r["devices"] for r in rows}):
        part = [r for r in rows if r["devices"] == d]
        out.append(
            [
                d,
                len(part),
                *(interval_cell(ratios(part, p, "best heuristic", judge)) for p in planners),
            ]
        )
    return out


def detail_rows(rows: list[dict], planners: list[str]) -> list[list]:
    """Per planner: mean plan seconds, tables split per plan by kind, declines."""
    out = []
    for p in planners:
        records = [r["plans"][p] for r in rows]
        seconds = [x["seconds"] for x in records if not x["declined"]]
        kinds: dict[str, int] = {}
        for x in records:
            for kind, count in x["split"].items():
                kinds[kind] = kinds.get(kind, 0) + count
        placed = max(1, len(seconds))
        split = ", ".join(f"{k} {v / placed:.1f}" for k, v in sorted(kinds.items())) or "none"
        declined = sum(1 for x in records if x["declined"])
        judged = sum(1 for x in records if x["torchrec_declined"])
        out.append([p, f"{np.mean(seconds):.2f}" if seconds else "-", split, declined, judged])
    return out


def provenance(rows: list[dict], fresh: int, grid: int) -> str:
    """Which runs made the rows: how many this one, how many earlier, at which commits and on
    which hosts; and whether the grid is complete."""
    commits = sorted({r.get("commit", "unknown") for r in rows})
    hosts = sorted({r.get("host", "unknown") for r in rows})
    done = "every task" if len(rows) == grid else f"{len(rows)} of its {grid} tasks (unfinished)"
    again: dict[str, list] = {}  # planner -> the notes of its re-planned records
    for row in rows:
        for name, note in row.get("replanned", {}).items():
            again.setdefault(name, []).append(note)
    replanned = "".join(
        f" {name} re-planned on {len(notes)} of them (`--replan`) at commits "
        f"{', '.join(sorted({n['commit'] for n in notes}))}, on "
        f"{'; '.join(sorted({n['host'] for n in notes}))}."
        for name, notes in sorted(again.items())
    )
    return (
        f"Rows: {done}; {fresh} planned or re-planned by this run, the rest by earlier runs of "
        f"the same command (`--rows`), at commits {', '.join(commits)}, on "
        f"{'; '.join(hosts)}.{replanned}"
    )


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a trained model (default: train one on dlrm-50x8)")
    parser.add_argument(
        "--seeds", default="0-7", help="seeds per cell, as 0-7 or 0,3 (default 0-7)"
    )
    parser.add_argument("--sets", default=",".join(STUDY_SETS))
    parser.add_argument("--devices", default="16,32,64,128")
    parser.add_argument("--memory", default=",".join(MEMORY_SETTINGS))
    parser.add_argument(
        "--torchrec-seconds",
        type=float,
        default=60.0,
        help="TorchRec's own timeout_seconds for its planner with every sharding type: its "
        "search stops there and it answers with its best plan (default 60)",
    )
    parser.add_argument(
        "--torchrec-wall",
        type=float,
        default=600.0,
        help="wall-clock seconds after which TorchRec's planner is stopped without a plan: "
        "its enumeration, before its own timeout counts, takes minutes at 856 tables on 128 "
        "devices (default 600)",
    )
    parser.add_argument(
        "--replan",
        default="",
        help="planners (report names, comma-separated) to plan and judge again on every "
        "stored task, the rest of each row kept: for a planner changed since the rows were "
        "made; each re-planned record says which commit made it",
    )
    parser.add_argument("--milp-seconds", type=float, default=30.0)
    parser.add_argument("--train-suite", default="dlrm-50x8")
    training_options(
        parser,
        ("warm_start", "costnet_steps", "seed"),
        TrainConfig(warm_start=1000, costnet_steps=1000),
    )
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument(
        "--rows",
        help="the study's rows, kept across runs: a rerun of the same command plans only the "
        "tasks not stored yet (default: beside --out, NAME.rows.json)",
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=0.0,
        help="start no task after this many minutes (0: no limit); the report then covers the "
        "tasks done, and a rerun goes on from there",
    )
    return parser.parse_args(argv)


def git(*args: str) -> subprocess.CompletedProcess | None:
    """`git ARGS` in this checkout (None when git cannot run)."""
    try:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, cwd=Path(__file__).parent, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def git_commit() -> str:
    """The checkout's commit, to say which code made a row (rows may span runs)."""
    found = git("rev-parse", "--short", "HEAD")
    return (found.stdout.strip() if found else "") or "unknown"


# Library code no planner imports: the policy's training loop, collecting and storing
# measurements, tracking, the command line. A change there leaves a stored plan as good as new.
NOT_PLANNING = (
    "dreamshard/cli",
    "dreamshard/learn/train.py",
    "dreamshard/learn/costnet_data.py",
    "dreamshard/learn/coverage.py",
    "dreamshard/costs/collect.py",
    "dreamshard/costs/dataset.py",
    "dreamshard/costs/fanout.py",
    "dreamshard/costs/host_lock.py",
    "dreamshard/tracking.py",
)


def library_changed(since: str, now: str) -> bool:
    """Whether the planning code (`dreamshard/` but `NOT_PLANNING`) differs between commits
    `since` and `now` (True when git cannot tell)."""
    if since == now:
        return False
    excluded = [f":(top,exclude){path}" for path in NOT_PLANNING]
    found = git("diff", "--quiet", since, now, "--", ":(top)dreamshard", *excluded)
    return found is None or found.returncode != 0


def stale_plans(row: dict, names: list[str], commit: str) -> list[str]:
    """Those of `names` whose record in `row` was made by a library other than `commit`'s."""
    made = row.get("replanned", {})
    return [
        name
        for name in names
        if library_changed(made.get(name, {}).get("commit", row.get("commit", "")), commit)
    ]


def plan_task(planners: dict, args, backend, cell: tuple, only: list[str] | None = None) -> dict:
    """One task's row: every planner's plan (or only those of `only`), both judges, the MILP
    bound (not when re-planning)."""
    table_set, seed, devices, memory = cell
    task = study_task(table_set, seed, devices, memory)
    plans = {}
    for name, planner in planners.items():
        if only is not None and name not in only:
            continue
        limit = args.torchrec_wall if name in (TORCHREC, "torchrec (reservation)") else None
        plans[name] = judge_plan(task, planner, backend, limit, torchrec_judge).to_dict()
    bound = float("nan")
    if args.milp_seconds and memory == "loose" and only is None:
        bound = solve_simulated_milp(task, backend, args.milp_seconds).bound
    return dict(
        set=table_set,
        seed=seed,
        devices=devices,
        memory=memory,
        task=task.name,
        plans=plans,
        milp_bound=bound,
        commit=git_commit(),
        host=hardware(),
        made=time.strftime("%Y-%m-%d"),
    )


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)
    out = str(state_dir() / "scale_study" / "model")
    config = config_from(
        args, suite=args.train_suite, backend="simulated", topology=TOPOLOGY, out=out
    )
    model, model_note = given_or_trained(args.model, config, say)
    planners = planners_for(model, args.torchrec_seconds)
    replan = [name.strip() for name in args.replan.split(",") if name.strip()]
    unknown = [name for name in replan if name not in planners]
    if unknown:
        raise SystemExit(
            f"--replan: no planner named {', '.join(map(repr, unknown))}; the names are "
            + ", ".join(planners)
        )
    backend = SimulatedBackend(topology=TOPOLOGY)
    grid = [
        (s, seed, int(d), m)
        for s in args.sets.split(",")
        for d in args.devices.split(",")
        for m in args.memory.split(",")
        for seed in number_list(args.seeds, "--seeds")
    ]
    settings = {
        "model": model_fingerprint(model),
        "torchrec_seconds": args.torchrec_seconds,
        "milp_seconds": args.milp_seconds,
    }
    store = StudyRows(args.rows or Path(args.out).with_suffix(".rows.json"), settings)
    rows, began, fresh, commit = [], time.monotonic(), 0, git_commit()
    for k, cell in enumerate(grid):
        row = store.stored(cell)
        stale = [] if row is None else stale_plans(row, replan, commit)
        if row is None or stale:
            if args.minutes and time.monotonic() - began > 60 * args.minutes:
                say(f"{args.minutes:g} min spent: {len(grid) - k} tasks left for a rerun")
                break
            spent = time.monotonic() - began
            again = f", re-planning {', '.join(stale)}" if stale else ""
            say(f"[{k + 1}/{len(grid)}] {'/'.join(map(str, cell))}{again} ({spent:.0f} s)")
            if row is None:
                row = plan_task(planners, args, backend, cell)
                store.add(row)
            else:
                note = dict(commit=commit, host=hardware(), made=time.strftime("%Y-%m-%d"))
                plans = plan_task(planners, args, backend, cell, stale)["plans"]
                row = store.replace_plans(cell, plans, note)
            fresh += 1
        rows.append(row)
    rows += [r for r in (store.stored(c) for c in grid[len(rows) :]) if r is not None]
    names = list(planners)
    shown = [n for n in names if "memory splits" not in n]
    command = "benchmarks/scale_study.py " + " ".join(argv if argv is not None else sys.argv[1:])
    report = "\n\n".join(
        [
            "# The scale study (RQ5): plans at 16-128 devices across hosts, two judges",
            f"Made by `{command.strip()}`. {host_note()}. {provenance(rows, fresh, len(grid))} "
            f"The grid: {len(grid)} tasks ({args.sets}; "
            f"devices {args.devices}; memory {args.memory}; seeds {args.seeds}), fp16, hosts of 8 "
            f"({TOPOLOGY}: NVLink inside a host, 400 Gb/s RDMA between; communication modeled). "
            f"Model: {model_note}. Judges: our simulated backend on that topology (exact, one "
            "round) and TorchRec's EmbeddingPerfEstimator (its planner's default, "
            "compute_device=cuda; `integrations/torchrec_judge.py`). TorchRec's planner gets "
            f"every sharding type that maps to ours and {args.torchrec_seconds:g} s as its own "
            "`timeout_seconds` (its proposers stop there and it answers with its best plan so "
            "far; its enumeration of sharding options, 25-80 s here, comes first and is not "
            f"counted), stopped without a plan after {args.torchrec_wall:g} s in all. Its "
            "records made before 2026-12-05 (those not re-planned, above) had a wall-clock "
            f"limit of {args.torchrec_seconds:g} s instead, within which it never planned.",
            "## Targets\n\n"
            + fenced_table(
                "devices | versus | judge | memory | target | geo-mean [95%] | ",
                target_rows(rows),
            ),
            "## Over the best heuristic on memory-forced splits, our judge\n\n"
            + fenced_table(
                " | ".join(["devices", "tasks", *shown]), device_rows(rows, shown, "simulated")
            ),
            "## Over the best heuristic on memory-forced splits, TorchRec's judge\n\n"
            + fenced_table(
                " | ".join(["devices", "tasks", *shown]), device_rows(rows, shown, "torchrec")
            ),
            "## Plan times, splits, declines\n\nSeconds: mean over the tasks planned; splits: "
            "tables split per plan, by kind; declined: no plan; unjudged: TorchRec's estimator "
            "could not rate the plan.\n\n"
            + fenced_table(
                "planner | seconds | splits | declined | unjudged", detail_rows(rows, names)
            ),
        ]
    )
    write_report(args.out, report, {"command": command, "rows": rows})


if __name__ == "__main__":
    run_script(main)
