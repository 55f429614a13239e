"""`torchrec_e2e.py --dmp-model MODEL`: dreamshard with DMP labels against dreamshard with
kernel labels, TorchRec's planner and `lookup`, in real TorchRec training steps on held-out
tasks of several table counts (issue 29's comparison).

Per suite (`--suites`, 2 devices each), its first `--tasks` test tasks; per task one launch
trains the distinct plans in `--rounds` interleaved rounds (`DmpBackend.measure_plans`):
- `dreamshard_dmp`: the dreamshard planner with `--dmp-model` (a cost network fitted on DMP
  step labels: `dreamshard train --backend dmp`), whole tables;
- `dreamshard`: the same planner with `--model` (kernel labels), whole tables;
- `torchrec`: TorchRec's planner with its defaults given the step's per-rank batch, so its
  storage reservation counts the same batch (`torchrec_default_plan`: its topology for this
  device kind, every sharding type, its heuristic reservation);
- `lookup`: the heuristic.
Ratios are paired within rounds; per suite the geometric mean over rounds then tasks, with a
bootstrap 95% interval that resamples tasks and their rounds (`bootstrap_paired`). The paired
repeat spread is, per task, the coefficient of variation over rounds of a plan's step over the
reference's in the same round; the report gives the median over tasks.
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks.torchrec_e2e_figures import MODULE_PATH, distinct, launch_line, report_head
from dreamshard.evaluation.rounds import bootstrap_paired, cv
from dreamshard.integrations.dmp_backend import DmpBackend
from dreamshard.integrations.torchrec_export import torchrec_default_plan
from dreamshard.placement.registry import named_planner, place
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import PlacementTask
from dreamshard.report import markdown_table

PLANS = ("dreamshard_dmp", "dreamshard", "torchrec", "lookup")
# ours over each reference: (the geometric mean at most, its interval's upper end at most)
TARGETS = {"torchrec": (0.88, 0.93), "lookup": (0.95, 1.00)}
CLOCKS = {"wall": "the step's wall clock (as trained)", "cpu": "the slowest rank's CPU time"}


def place_task(task: PlacementTask, dmp_model, kernel_model, device: str) -> dict:
    return {
        "dreamshard_dmp": named_planner("dreamshard", dmp_model, split="none")(task, 0),
        "dreamshard": named_planner("dreamshard", kernel_model, split="none")(task, 0),
        "torchrec": torchrec_default_plan(task, device, MODULE_PATH),
        "lookup": place(task, "lookup", split="none"),
    }


def measure_suites(args, backend: DmpBackend, dmp_model, kernel_model, log) -> dict:
    """Per suite, per task: the [rounds, PLANS] step costs by each clock, and what was run."""
    device = backend.device_kind()
    suites: dict[str, list[dict]] = {}
    for suite in [s.strip() for s in args.suites.split(",") if s.strip()]:
        tasks = make_suite(parse_suite_name(suite, 1, args.tasks)).test_tasks
        suites[suite] = []
        for task in tasks:
            began = time.monotonic()
            plans = place_task(task, dmp_model, kernel_model, device)
            unique, index = distinct(plans)
            run = backend.measure_plans(task, unique, args.rounds)
            columns = [index[name] for name in PLANS]
            suites[suite].append(
                {
                    "task": task.name,
                    "tables": len(task.tables),
                    "distinct_plans": len(unique),
                    "sharding_types": {n: run.sharding_types[index[n]] for n in PLANS},
                    "costs": {c: run.overall(c)[:, columns].tolist() for c in CLOCKS},
                    "seconds": time.monotonic() - began,
                }
            )
            log(f"{task.name}: {len(unique)} distinct plans, {time.monotonic() - began:.0f} s")
    return suites


def suite_figures(records: list[dict], clock: str) -> dict:
    """Per plan and reference: the paired ratio, its interval, tasks, and the median spread."""
    costs = np.array([r["costs"][clock] for r in records])  # [tasks, rounds, PLANS]
    out = {}
    for ref in TARGETS:
        r = PLANS.index(ref)
        for p, plan in enumerate(PLANS):
            if plan == ref:
                continue
            logs = np.log(costs[:, :, p] / costs[:, :, r]).T  # [rounds, tasks]
            ratio, low, high, tasks = bootstrap_paired(logs)
            spread = float(np.median(cv(np.exp(logs), axis=0))) if logs.shape[0] > 1 else 0.0
            out[f"{plan}/{ref}"] = {
                "ratio": ratio,
                "interval": [low, high],
                "tasks": tasks,
                "spread": spread,
            }
    return out


def figures(suites: dict) -> dict:
    return {
        suite: {clock: suite_figures(records, clock) for clock in CLOCKS}
        for suite, records in suites.items()
    }


def met(figure: dict, ref: str) -> bool:
    most, upper = TARGETS[ref]
    return figure["ratio"] <= most and figure["interval"][1] <= upper


def render(result: dict, argv: list[str]) -> str:
    args = result["args"]
    title = "DMP labels against kernel labels, TorchRec and lookup"
    lines = [
        *report_head(title, "torchrec_e2e.py", argv, result),
        f"{launch_line(result)}.",
        f"Tasks: the first {args['tasks']} test tasks of each suite (tables no training task "
        "holds), fixed by the suite's seed before the run; 2 ranks.",
        f"Models: `dreamshard_dmp` {result['models']['dreamshard_dmp']}; `dreamshard` "
        f"{result['models']['dreamshard']}. `torchrec`: TorchRec's planner with its defaults "
        "given the step's per-rank batch (its reservation counts that batch); `lookup`: the "
        "heuristic.",
        "Ratios: paired within rounds, geometric mean over rounds then tasks, [bootstrap 95% "
        "over tasks and their rounds]; spread: the median over tasks of the paired ratio's "
        "coefficient of variation over rounds. Targets (`dreamshard_dmp`): at most 0.88x "
        "`torchrec` with the upper end at most 0.93; at most 0.95x `lookup`, upper end at most "
        "1.00.",
    ]
    for clock, words in CLOCKS.items():
        rows = []
        for suite, by_clock in result["figures"].items():
            for key, f in by_clock[clock].items():
                plan, ref = key.split("/")
                target = ("met" if met(f, ref) else "not met") if plan == "dreamshard_dmp" else ""
                rows.append(
                    [
                        suite,
                        plan,
                        ref,
                        f"{f['ratio']:.3f}",
                        f"[{f['interval'][0]:.3f}, {f['interval'][1]:.3f}]",
                        f["tasks"],
                        f"{f['spread']:.1%}",
                        target,
                    ]
                )
        header = ["suite", "plan", "over", "ratio", "95% interval", "tasks", "spread", "target"]
        lines += [f"## By {words}", markdown_table(header, rows)]
    kinds = sorted(
        {
            k
            for records in result["suites"].values()
            for r in records
            for k in r["sharding_types"]["torchrec"]
        }
    )
    lines.append(f"TorchRec's plans used the sharding types {', '.join(kinds)}.")
    return "\n\n".join(lines) + "\n"
