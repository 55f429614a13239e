"""The study runner: one way to run any `Study` (benchmarks/study.py).

It plans every task with every arm (within the arm's time limit, recording what it declined),
judges each plan by the exact judges at once, then measures every plan of every task in
interleaved rounds for the measured judges (each round a fresh random order, so drift common to
a round cancels in paired ratios). Progress is kept in the state folder after every task and
every round: the same command run again goes on where it stopped, and starts afresh when the
commit or the options changed (a report's rows come from one commit). Then the figures, the
targets (met when the 95% interval's upper end meets them), the report, the rows file and the
MLflow run. `--quick` runs 2 tasks and 2 rounds and writes nothing but the report on stdout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path

import numpy as np

from benchmarks.record import RESULTS, commit, host, log_run, rows_path, write_rows
from benchmarks.report import render
from benchmarks.study import Judge, Study
from dreamshard.errors import DreamshardError, InfeasibleError
from dreamshard.files import write_text_atomic
from dreamshard.placement.tasks import Placement, PlacementTask, check_legal
from dreamshard.planners.dreamshard_planner import one_thread
from dreamshard.state import state_dir

QUICK_TASKS, QUICK_ROUNDS = 2, 2


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextmanager
def within(seconds: float | None) -> Iterator[None]:
    """DreamshardError when the body runs past `seconds` (None: no limit; main thread only)."""
    if not seconds:
        yield
        return

    def expire(*_):
        raise DreamshardError(f"no plan in {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def plan_record(task: PlacementTask, arm, exact: list[Judge]) -> tuple[dict, Placement | None]:
    """One arm's plan of one task: its seconds, splits and exact judges' costs, or why it
    declined (its own refusal, or its time limit)."""
    start = time.perf_counter()
    try:
        with within(arm.seconds):
            placement = arm.plan(task)
    except (DreamshardError, InfeasibleError) as exc:
        return {"declined": first_line(exc), "costs": {}}, None
    record = {"seconds": round(time.perf_counter() - start, 4), "costs": {}}
    if isinstance(placement, tuple):  # (placement, what the arm says of its own plan)
        placement, said = placement
        record |= said
    check_legal(task, placement)  # a planner's illegal plan is a bug, never a figure
    if placement.splits:
        kinds = [split.kind for split in placement.splits]
        record["splits"] = {kind: kinds.count(kind) for kind in sorted(set(kinds))}
    for judge in exact:
        try:
            record["costs"][judge.name] = [float(judge.cost(task, placement))]
        except DreamshardError as exc:
            record["costs"][judge.name] = [None]
            record.setdefault("judge_declined", {})[judge.name] = first_line(exc)
    return record, placement


class Progress:
    """The run so far (rows, plans, rounds done) in the state folder, under a key of the
    study, its options and the commit: a rerun of the same command resumes it."""

    def __init__(self, study: str, settings: dict, quick: bool):
        key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
        self.path = state_dir() / "studies" / study / f"{key}.pickle"
        self.quick = quick
        self.state = {"rows": {}, "plans": {}, "rounds": 0}
        if not quick and self.path.is_file():
            self.state = pickle.loads(self.path.read_bytes())
            say(f"resuming {self.path}: {len(self.state['rows'])} tasks planned")

    @staticmethod
    def exists(study: Study, args: argparse.Namespace) -> bool:
        """Whether a run of `study` with these options at this commit was stopped part way (a
        study that makes a model first can then reuse the one that run made)."""
        return Progress(study.name, settings_of(study, args, commit()), quick=True).path.is_file()

    def save(self) -> None:
        if self.quick:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(self.state))
        tmp.replace(self.path)


def plan_tasks(study: Study, tasks, arms, exact, progress: Progress) -> None:
    """Every task planned by every arm and judged by the exact judges, a row each."""
    for t, task in enumerate(tasks):
        if task.name in progress.state["rows"]:
            continue
        start = time.monotonic()
        row, plans = {"task": task.name, "plans": {}}, {}
        for arm in arms:
            row["plans"][arm.name], placement = plan_record(task, arm, exact)
            if placement is not None:
                plans[arm.name] = placement
        row.update(study.task_extra(task, plans))
        progress.state["rows"][task.name] = row
        progress.state["plans"][task.name] = plans
        progress.save()
        declined = [name for name, plan in row["plans"].items() if "declined" in plan]
        say(
            f"[{t + 1}/{len(tasks)}] {task.name}: {len(plans)} plans in "
            f"{time.monotonic() - start:.1f} s"
            + (f"; declined: {', '.join(declined)}" if declined else "")
        )


def measure_rounds(tasks, measured: list[Judge], rounds: int, progress: Progress) -> None:
    """Every plan of every task measured once a round by each measured judge, in a fresh
    random order each round (seeded by the round): plan by plan, or task by task for a judge
    that measures a task's plans at once (`Judge.per_task`)."""
    plans = progress.state["plans"]
    items = [
        (task, arm, placement) for task in tasks for arm, placement in plans[task.name].items()
    ]
    for r in range(progress.state["rounds"], rounds):
        start, rng = time.monotonic(), np.random.default_rng(r)
        for i in rng.permutation(len(items)):
            task, arm, placement = items[i]
            record = progress.state["rows"][task.name]["plans"][arm]
            for judge in (j for j in measured if j.per_task is None):
                measure_plan(record, judge, task, placement)
        for t in rng.permutation(len(tasks)):
            task = tasks[t]
            for judge in (j for j in measured if j.per_task is not None):
                measure_task(progress.state["rows"][task.name], judge, task, plans[task.name])
        progress.state["rounds"] = r + 1
        progress.save()
        say(f"round {r + 1}/{rounds}: {len(items)} plans in {time.monotonic() - start:.0f} s")


def measure_plan(record: dict, judge: Judge, task, placement) -> None:
    """One round of a plan-by-plan judge: its cost appended to the plan's record, or None
    with the reason when the judge declines."""
    try:
        cost = float(judge.cost(task, placement))
    except DreamshardError as exc:
        cost = None
        record.setdefault("judge_declined", {})[judge.name] = first_line(exc)
    record["costs"].setdefault(judge.name, []).append(cost)


def measure_task(row: dict, judge: Judge, task, plans: dict) -> None:
    """One round of a per-task judge: all the task's plans in one measurement."""
    try:
        found = judge.per_task(task, plans)
    except DreamshardError as exc:
        found = {arm: None for arm in plans}
        reason = first_line(exc)
    for arm in plans:
        record = row["plans"][arm]
        if found[arm] is None:
            record.setdefault("judge_declined", {})[judge.name] = reason
        for name in judge.names():
            value = None if found[arm] is None else float(found[arm][name])
            record["costs"].setdefault(name, []).append(value)


def settings_of(study: Study, args: argparse.Namespace, at: str) -> dict:
    options = {k: v for k, v in vars(args).items() if k not in ("quick", "no_mlflow", "name")}
    return {"study": study.name, "options": options, "commit": at}


def command_of(study: Study, argv: list[str]) -> str:
    return " ".join([".venv/bin/python -m benchmarks run", study.name, *argv])


def run(study: Study, args: argparse.Namespace, argv: list[str]) -> int:
    """Run `study` with its parsed options; write its report, rows and MLflow run (not with
    `--quick`). Exit code 0 whether or not targets are met: a missed target is a finding."""
    started, at = time.monotonic(), commit()  # the rows' commit: the one the run starts at
    study.prepare(args)
    tasks = study.tasks(args)
    if args.quick:
        tasks = tasks[:QUICK_TASKS]
    if len({t.name for t in tasks}) != len(tasks):
        raise DreamshardError(f"study {study.name} names two tasks alike: names key its rows")
    judges = study.judges(args)
    exact = [j for j in judges if j.rounds == 1]
    measured = [j for j in judges if j.rounds > 1]
    rounds = max((j.rounds for j in measured), default=0)
    rounds = min(rounds, QUICK_ROUNDS) if args.quick else rounds
    progress = Progress(study.name, settings_of(study, args, at), args.quick)
    with one_thread():  # placing runs many small products, which more threads only slow
        plan_tasks(study, tasks, study.arms(args), exact, progress)
        measure_rounds(tasks, measured, rounds, progress)
    rows = [progress.state["rows"][t.name] for t in tasks]
    meta = {
        "study": study.name,
        "command": command_of(study, argv),
        "commit": at,
        "date": date.today().isoformat(),
        "minutes": (time.monotonic() - started) / 60,
        **host(),
        "tasks": len(tasks),
        "judges": {n: (rounds if j.rounds > 1 else 1) for j in judges for n in j.names()},
        "models": study.models,
        "about": study.about,  # what `prepare` said of this run's options, for a re-render
    }
    report, found = render(study, meta, rows)
    print(report)
    if args.quick:
        return 0
    out = Path(args.out) if args.out else RESULTS
    path = rows_path(study.name, out)
    write_rows(path, meta, rows)
    write_text_atomic(path.with_name(f"{study.name}.md"), report)
    say(f"wrote {path} and {study.name}.md")
    if not args.no_mlflow:
        say(f"MLflow run {log_run(meta, found, path, path.with_name(f'{study.name}.md'))}")
    progress.path.unlink(missing_ok=True)
    return 0
