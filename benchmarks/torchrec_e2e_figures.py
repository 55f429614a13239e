"""The figures of `torchrec_e2e.py`: per task and over tasks, by both clocks, the proxies'
agreement with DMP and the balanced-kernel bound of TorchRec's plans.

Also the plan names the run and its report share (`PLANS`, the references and targets).
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks.parts.dmp_proxy import LABEL as DMP_PROXY
from benchmarks.parts.ratio_tables import placed_mean
from benchmarks.parts.report_files import torchrec_version
from dreamshard.costs.backends import describe_costs
from dreamshard.costs.dataset import hardware, versions
from dreamshard.evaluation.rounds import (
    bootstrap_interval,
    cv,
    geometric_mean,
    paired_ratios,
    spearman,
)
from dreamshard.placement.tasks import Placement

MODULE_PATH = "embedding_bags"  # where gpu_tasks/dmp_step.py's model holds its collection
BOUNDED = ("torchrec_tw", "torchrec_cw")  # TorchRec's plans whose balanced-kernel bound we give
HEURISTICS = ("dim", "size", "lookup", "size_lookup", "random")
PLANS = (
    "dreamshard",
    "dreamshard_split",
    "torchrec_tw",
    "torchrec_cw",
    "torchrec_split",
    "torchrec_default",
    *HEURISTICS,
)
REFERENCES = ("lookup", "torchrec_tw", "torchrec_cw")  # paired ratios to each
# dreamshard against TorchRec's planner on the same memory and the same sharding types
TARGETS = (("dreamshard", "torchrec_tw"), ("dreamshard_split", "torchrec_cw"))
CLOCKS = ("wall", "cpu")  # the step's wall clock; the slowest rank's CPU time in it
# the proxies whose ranking is compared with DMP's: the fbgemm proxy as every other figure
# uses it, and the same kernels with the DMP step parts modeled (parts/dmp_proxy.py)
PROXIES = {"proxy": "fbgemm proxy", "proxy_dmp": DMP_PROXY}


def task_figures(costs: np.ndarray, names: list[str]) -> dict:
    """Per plan: geometric-mean ms, paired ratios to lookup and to torchrec_tw, spreads."""
    out = {}
    for ref in REFERENCES:
        ratios = paired_ratios(costs, names.index(ref))  # [rounds, plans]
        out[f"vs_{ref}"] = geometric_mean(ratios).tolist()
        out[f"vs_{ref}_cv"] = cv(ratios).tolist()
    out["ms"] = geometric_mean(costs).tolist()
    out["cost_cv"] = cv(costs).tolist()
    return out


def task_record(task, plans, run, index, proxy_costs, where, estimates) -> dict:
    """One task's figures: DMP by both clocks, both proxies, what TorchRec chose, the losses."""
    names = list(plans)
    ours = [n for n in names if isinstance(plans[n], Placement)]
    firsts = [n for n in ours if n == next(m for m in ours if where[m] == where[n])]
    proxy_ms = {n: float(geometric_mean(proxy_costs[:, where[n]])) for n in ours}
    modeled = {  # the second proxy, by the constants fitted for each clock
        clock: {n: float(ms[where[n]]) for n in ours} for clock, ms in estimates.items()
    }
    record = {
        "task": task.name,
        "tables": len(task.tables),
        "cap_bytes": task.memory_cap_bytes,
        "batch": run.batch,
        "distinct_plans": len(set(index.values())),
        "sharding_types": {n: run.sharding_types[index[n]] for n in names},
        "losses": {n: run.losses[index[n]] for n in names},
        "proxy_ms": proxy_ms,
        "proxy_vs_lookup": {n: proxy_ms[n] / proxy_ms["lookup"] for n in ours},
        "distinct_placements": firsts,  # each distinct placement under its first name
        "placements": {n: list(plans[n].devices) for n in ours},
    }
    for clock in CLOCKS:
        costs = run.overall(clock)[:, [index[n] for n in names]]  # [rounds, PLANS]
        dmp_ms = {n: float(geometric_mean(costs[:, j])) for j, n in enumerate(names)}
        dmp_proxy_ms = modeled.get(clock, modeled["wall"])
        record[clock] = {
            "costs": costs.tolist(),
            "figures": task_figures(costs, names),
            "dmp_ms": dmp_ms,
            "proxy_dmp_ms": dmp_proxy_ms,
            "proxy_dmp_vs_lookup": {n: dmp_proxy_ms[n] / dmp_proxy_ms["lookup"] for n in ours},
            "spearman": {
                "proxy": spearman([proxy_ms[n] for n in firsts], [dmp_ms[n] for n in firsts]),
                "proxy_dmp": spearman(
                    [dmp_proxy_ms[n] for n in firsts], [dmp_ms[n] for n in firsts]
                ),
            },
        }
    return record


def proxy_ratio(task: dict, clock: str, proxy: str, name: str) -> float:
    """A plan's cost over its task's lookup by one of `PROXIES`."""
    if proxy == "proxy":
        return task["proxy_vs_lookup"][name]
    return task[clock]["proxy_dmp_vs_lookup"][name]


def summarize(per_task: list[dict], clock: str) -> dict:
    """Per plan over tasks: geometric means of the paired ratios, intervals, spreads; Spearman."""
    rows = {}
    for j, name in enumerate(PLANS):
        figures = [t[clock]["figures"] for t in per_task]
        row = {"ms": float(np.mean([f["ms"][j] for f in figures]))}
        for ref in REFERENCES:
            ratios = np.array([f[f"vs_{ref}"][j] for f in figures])
            row[f"vs_{ref}"] = float(geometric_mean(ratios))
            row[f"vs_{ref}_range"] = [float(ratios.min()), float(ratios.max())]
            row[f"vs_{ref}_interval"] = list(bootstrap_interval(ratios))
            row[f"vs_{ref}_cv"] = float(np.median([f[f"vs_{ref}_cv"][j] for f in figures]))
        row["cost_cv"] = float(np.median([f["cost_cv"][j] for f in figures]))
        if name != "torchrec_default":
            for proxy in PROXIES:
                ratios = [proxy_ratio(t, clock, proxy, name) for t in per_task]
                row[f"{proxy}_vs_lookup"] = float(geometric_mean(np.array(ratios)))
        rows[name] = row
    agreement = {}
    for proxy in PROXIES:
        # pooled: every task's distinct placements, each cost over the task's lookup cost
        by_proxy, dmp = [], []
        for t in per_task:
            for name in t["distinct_placements"]:
                by_proxy.append(proxy_ratio(t, clock, proxy, name))
                dmp.append(t[clock]["dmp_ms"][name] / t[clock]["dmp_ms"]["lookup"])
        per_task_rho = [t[clock]["spearman"][proxy] for t in per_task]
        valid = [r for r in per_task_rho if not np.isnan(r)]
        agreement[proxy] = {
            "spearman_pooled": spearman(by_proxy, dmp),
            "spearman_per_task_mean": float(np.mean(valid)) if valid else float("nan"),
            "spearman_per_task": per_task_rho,
        }
    return {"rows": rows, "agreement": agreement}


def balanced_bounds(per_task: list[dict], profiled: list[dict]) -> dict:
    """For TorchRec's plans (`BOUNDED`), per task and clock: the step less its embedding
    kernels' imbalance (the slowest rank's profiled kernel time over the ranks' mean), over the
    step. No plan of the same kind does better while the kernels' total stays what it is: the
    best is the one whose ranks' kernels are perfectly balanced (the rest of the step held)."""
    out: dict = {name: {clock: [] for clock in CLOCKS} for name in BOUNDED}
    for task, prof in zip(per_task, profiled):
        for name in BOUNDED:
            if name not in prof["plans"]:
                continue
            kernels = np.array(
                [r["parts_ms"].get("embedding kernels", 0.0) for r in prof["plans"][name]]
            )
            excess = float(kernels.max() - kernels.mean())
            for clock in CLOCKS:
                step = task[clock]["dmp_ms"][name]
                ours = "dreamshard" if name == "torchrec_tw" else "dreamshard_split"
                out[name][clock].append(
                    {
                        "task": task["task"],
                        "kernels_ms": kernels.tolist(),
                        "step_ms": step,
                        "bound": (step - excess) / step,
                        "ours": task[clock]["dmp_ms"][ours] / step,
                    }
                )
    for name in BOUNDED:
        for clock in CLOCKS:
            if out[name][clock]:
                out[name][f"{clock}_bound"] = placed_mean([f["bound"] for f in out[name][clock]])
    return out


def distinct(plans: dict[str, Placement | dict]) -> tuple[list, dict[str, int]]:
    """The distinct plans (identical placements measured once) and each name's index."""
    unique: list = []
    keys: list = []
    index: dict[str, int] = {}
    for name, plan in plans.items():
        key = (plan.devices, plan.splits) if isinstance(plan, Placement) else name
        if key not in keys:
            keys.append(key)
            unique.append(plan)
        index[name] = keys.index(key)
    return unique, index


def step_costs(backend) -> str:
    """How a DMP step is timed, for runs that train a task's plans side by side in rounds of
    their own (`measure_plans`), not as labels beside a reference plan."""
    label_only = ("rounds", "reference")
    return describe_costs({k: v for k, v in backend.config().items() if k not in label_only})


def run_head(args, backend) -> dict:
    """What every DMP run's results begin with: its options, host, versions and how a step is
    timed."""
    return {
        "args": vars(args),
        "hardware": hardware(),
        "versions": {**versions(), "torchrec": torchrec_version()},
        "dmp": step_costs(backend),
    }


def launch_line(result: dict) -> str:
    """How a run's plans were stepped: its costs, one launch a task, its rounds and steps."""
    args = result["args"]
    return (
        f"Costs: {result['dmp']}. Each task's distinct plans trained in one launch, "
        f"{args['rounds']} interleaved rounds of {args['warmup']} warm-up + {args['steps']} "
        "timed steps a plan; communication measured (inside the step)"
    )


def report_head(title: str, script: str, argv: list[str], result: dict) -> list[str]:
    """A DMP report's title (dated) and its command, time, host and versions line."""
    return [
        f"# {title} ({time.strftime('%Y-%m-%d')})",
        f"Command: `.venv/bin/python benchmarks/{script} {' '.join(argv)}`; "
        f"{result['seconds'] / 60:.1f} min in all. Host: {result['hardware']} (one host for "
        f"every figure); {result['versions']}.",
    ]
