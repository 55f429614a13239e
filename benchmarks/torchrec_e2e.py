"""Plans judged by real TorchRec training steps (the `dmp` backend), and the proxy's validity.

Run: .venv/bin/python benchmarks/torchrec_e2e.py [--suite cpu-24x2] [--tasks 4] [--rounds 10]
         [--steps 30] [--warmup 5] [--proxy-rounds 3] [--model MODEL] [--out REPORT.md]
Smoke run: --tasks 1 --rounds 2 --steps 5 --proxy-rounds 1

On the suite's held-out tasks (2 devices: one process per device on this host's cores), every
plan below is built into TorchRec's DistributedModelParallel and trained for real
(`dreamshard/costs/dmp.py`, `gpu_tasks/dmp_step.py`): an EmbeddingBagCollection of the task's
tables, a dense tower and a loss, gloo on the CPU (NCCL on GPUs), batches from the tables'
traces. One torchrun launch per task trains all of its distinct plans in `--rounds` interleaved
rounds (a fresh order each round, `--warmup` steps then `--steps` timed steps per turn); a
plan's cost in a round is the slowest rank's median step. Ratios are paired within rounds.

Plans: `dreamshard`, whole tables as in the paper (`--model`, else the registered champion when
the state folder has one, else a model trained here on the suite's training tasks with
`--train-backend`; the report says which) and `dreamshard_split` (the same model with
`--split auto`: it may cut tables column-wise); TorchRec's planner on our memory cap without
its reservation, restricted to table-wise (`torchrec_tw`), allowed column-wise too
(`torchrec_cw`, the sharding types `dreamshard_split` uses) and allowed row-wise as well
(`torchrec_split`, what `--method torchrec --split auto` gives); TorchRec's planner with its
defaults (`torchrec_default`: its own topology for this host's device kind, no memory cap of
ours, any sharding type; it may choose data-parallel, so it runs as TorchRec's own
ShardingPlan); and the heuristics `dim`,
`size`, `lookup`, `size_lookup`, `random` (whole tables). The same placements (all but
`torchrec_default`) are also measured by the in-process `fbgemm` proxy in `--proxy-rounds`
interleaved rounds, and the Spearman rank correlation of the proxy's costs with DMP's says how
well the proxy, on which every other figure rests, ranks plans as real training does.

Every figure is given twice: by the step's wall clock (the spec: the slowest rank's median
step) and by the slowest rank's CPU time in the step, which leaves out the time a rank was
preempted by other work on a shared host (`dreamshard/costs/dmp.py`).

Time with the defaults on the shared 2-core host: training the model about 2 min (simulated;
15+ min on fbgemm under load), the proxy about 3 min, DMP about 2.5 min per task. Writes the
report and its JSON beside it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
from dmp_calibration import calibrate, measure_kernels
from planners_report import torchrec_version
from scipy.stats import spearmanr

from dreamshard.costs.backends import describe_costs, make_backend
from dreamshard.costs.comm import get_topology
from dreamshard.costs.dataset import hardware, versions
from dreamshard.costs.dmp import DmpBackend, StepConfig
from dreamshard.costs.dmp_proxy import LABEL as DMP_PROXY
from dreamshard.costs.dmp_proxy import step_terms
from dreamshard.errors import DreamshardError
from dreamshard.evaluation.rounds import (
    bootstrap_interval,
    cv,
    geometric_mean,
    paired_ratios,
)
from dreamshard.files import write_json_atomic, write_text_atomic
from dreamshard.integrations.torchrec_export import sharding_plan_to_dict
from dreamshard.learn.train import train
from dreamshard.learn.train_config import TrainConfig
from dreamshard.methods import named_planner, resolve_model
from dreamshard.placement.heuristics import PLANNERS
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import Placement, PlacementTask, check_legal
from dreamshard.planners.torchrec_planner import (
    placement_from_sharding,
    plan_with_torchrec,
    quiet_torchrec,
    torchrec_place,
    torchrec_request,
)
from dreamshard.report import format_bytes, markdown_table
from dreamshard.state import state_dir
from dreamshard.tables.traces import table_batch_size

RESULTS = Path(__file__).parent / "results" / "torchrec_e2e.md"
PROFILE_PROGRAM = str(Path(__file__).parent / "dmp_step_profile.py")
PROFILED = (
    "lookup",
    "dreamshard",
    "torchrec_tw",
    "random",
    "dreamshard_split",
    "torchrec_cw",
    "torchrec_split",
)
BOUNDED = ("torchrec_tw", "torchrec_cw")  # TorchRec's plans whose balanced-kernel bound we give
MODULE_PATH = "embedding_bags"  # where gpu_tasks/dmp_step.py's model holds its collection
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
# uses it, and the same kernels with the DMP step's other parts modeled (costs/dmp_proxy.py)
PROXIES = {"proxy": "fbgemm proxy", "proxy_dmp": DMP_PROXY}
CHAMPION_URI = "models:/dreamshard-policy@champion"


def torchrec_default_plan(task: PlacementTask, device: str) -> dict:
    """TorchRec's plan with its defaults, in its JSON form (module path of the DMP model).

    Its own topology for the device kind we train on (its default memory, not our cap), its
    storage reservation, every sharding type and kernel it offers; only the pooling factors
    (statistics, not constraints) and the per-rank batch come from the task.
    """
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import (
        EmbeddingShardingPlanner,
        ParameterConstraints,
        Topology,
    )

    request = torchrec_request(task)
    constraints = {
        t.name: ParameterConstraints(pooling_factors=[t.pooling_factor]) for t in task.tables
    }
    with quiet_torchrec():
        topology = Topology(world_size=task.num_devices, compute_device=device)
        planner = EmbeddingShardingPlanner(
            topology=topology, batch_size=request.batch_size, constraints=constraints
        )
        plan = planner.plan(request.module, [EmbeddingBagCollectionSharder()])
    data = sharding_plan_to_dict(plan, "torchrec_default", task.name, task.num_devices)
    data["plan"] = {MODULE_PATH: data["plan"][""]}
    return data


def torchrec_column_place(task: PlacementTask) -> Placement:
    """TorchRec's planner on our cap without its reservation, allowed the sharding types
    `dreamshard --split auto` uses where every table fits a device: table- and column-wise
    (`torchrec_place(split="auto")` also offers row-wise)."""
    request = torchrec_request(task, reserve=False, split="auto")
    for constraint in request.constraints.values():
        constraint.sharding_types = [k for k in constraint.sharding_types if k != "row_wise"]
    plan = plan_with_torchrec(request)
    placement = placement_from_sharding(task, plan.plan[""], "torchrec_cw")
    check_legal(task, placement)
    return placement


def champion_or_none():
    """The registered champion when the state folder's registry has one, else None."""
    if not (state_dir() / "mlflow.db").exists() and not os.environ.get("MLFLOW_TRACKING_URI"):
        return None
    try:
        return resolve_model(CHAMPION_URI)
    except DreamshardError:
        return None


def dreamshard_model(args: argparse.Namespace):
    """(model, a sentence saying which it is)."""
    if args.model:
        model = resolve_model(args.model)
        meta = model.metadata
        backend = re.search(r"'backend': '(\w+)'", str(meta.get("backend", "")))
        return model, (
            f"`{args.model}`, trained on {meta.get('suite', '?')} "
            f"({backend.group(1) if backend else '?'} backend) at {meta.get('trained', '?')}"
        )
    champion = champion_or_none()
    if champion is not None:
        return champion, f"the registered champion `{CHAMPION_URI}` of the state folder"
    began = time.monotonic()
    out = state_dir() / "torchrec_e2e" / f"model-{args.train_backend}"
    config = TrainConfig(suite=args.suite, backend=args.train_backend, out=str(out))
    model = train(config, log=lambda line: print(line, flush=True))
    return model, (
        f"no champion registered in the state folder, so a model trained by this run on "
        f"{args.suite}'s training tasks ({args.train_backend} backend, paper defaults: "
        f"{config.iterations} iterations, {config.warm_start} warm-start placements; "
        f"{(time.monotonic() - began) / 60:.1f} min), saved in `{out}`"
    )


def place_task(task: PlacementTask, model, device: str) -> dict[str, Placement | dict]:
    plans: dict[str, Placement | dict] = {
        "dreamshard": named_planner("dreamshard", model)(task, 0),
        "dreamshard_split": named_planner("dreamshard", model, split="auto")(task, 0),
        "torchrec_tw": torchrec_place(task, reserve=False),
        "torchrec_cw": torchrec_column_place(task),
        "torchrec_split": torchrec_place(task, reserve=False, split="auto"),
        "torchrec_default": torchrec_default_plan(task, device),
    }
    for name in HEURISTICS:
        plans[name] = PLANNERS[name](task, 0)
    return plans


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


def spearman(x, y) -> float:
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(spearmanr(x, y).statistic)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="cpu-24x2", help="held-out tasks of this suite")
    parser.add_argument("--tasks", type=int, default=4, help="held-out tasks")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved DMP rounds")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per plan and round")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up steps per turn")
    parser.add_argument("--proxy-rounds", type=int, default=4, help="fbgemm proxy rounds")
    parser.add_argument(
        "--calibration-tasks",
        type=int,
        default=2,
        help="training tasks whose designed plans fit the modeled DMP terms' constants",
    )
    parser.add_argument(
        "--calibration-rounds", type=int, default=5, help="DMP rounds of the calibration"
    )
    parser.add_argument("--model", help="model file or models:/ URI (default: see above)")
    parser.add_argument(
        "--train-backend",
        default="simulated",
        choices=["fbgemm", "simulated"],
        help="where a model trained here learns (default simulated: about 2 min; fbgemm took "
        "15+ min on the busy shared host)",
    )
    parser.add_argument(
        "--no-profile",
        dest="profile",
        action="store_false",
        help="skip profiling where the first task's steps spend their time",
    )
    parser.add_argument("--out", default=str(RESULTS))
    argv = sys.argv[1:] if argv is None else argv  # the report records the command as run
    args = parser.parse_args(argv)
    began = time.monotonic()
    loads = [os.getloadavg()[0]]
    model, model_note = dreamshard_model(args)
    trained_s = time.monotonic() - began

    tasks = make_suite(parse_suite_name(args.suite, 1, args.tasks)).test_tasks
    # training tasks (never held out) for the calibration; the suite's draw of its held-out
    # tasks depends on how many training tasks it draws, so the held-out ones above are the
    # same as in the runs before the calibration
    calibration_tasks = make_suite(parse_suite_name(args.suite, args.calibration_tasks, 1))
    backend = DmpBackend(StepConfig(warmup=args.warmup, steps=args.steps))
    device = backend.device_kind()
    placed = [place_task(task, model, device) for task in tasks]
    proxy = make_backend("fbgemm")
    topology = get_topology("cpu-gloo" if device == "cpu" else "nvlink")

    # the modeled DMP terms' constants, fitted on designed plans of training tasks
    calibration_began = time.monotonic()
    step_models, calibration = calibrate(
        list(calibration_tasks.train_tasks),
        DmpBackend(StepConfig(warmup=args.warmup, steps=args.steps)),
        proxy,
        topology,
        args.calibration_rounds,
        args.proxy_rounds,
        log=lambda line: print(line, flush=True),
    )
    calibration_s = time.monotonic() - calibration_began
    loads.append(os.getloadavg()[0])

    # the proxy: every distinct placement of every task, one interleaved run
    items, where = [], []  # where[t][name]: the proxy's item of task t's placement `name`
    for task, plans in zip(tasks, placed):
        unique, index = distinct({n: p for n, p in plans.items() if isinstance(p, Placement)})
        where.append({name: len(items) + i for name, i in index.items()})
        items.extend((task, p) for p in unique)
    proxy_began = time.monotonic()
    proxy_costs, kernels = measure_kernels(proxy, items, args.proxy_rounds, seed=1)
    batch = table_batch_size(tasks[0].tables, backend.batch_size)
    estimates = {  # the second proxy: [items] per clock, ms
        clock: np.array(
            [m.estimate(k, step_terms(t, p, batch, topology)) for (t, p), k in zip(items, kernels)]
        )
        for clock, m in step_models.items()
    }
    proxy_s = time.monotonic() - proxy_began
    loads.append(os.getloadavg()[0])

    per_task = []
    dmp_began = time.monotonic()
    for t, (task, plans) in enumerate(zip(tasks, placed)):
        unique, index = distinct(plans)
        print(f"{task.name}: {len(unique)} distinct plans under DMP", flush=True)
        run = backend.measure_plans(task, unique, args.rounds)
        loads.append(os.getloadavg()[0])
        record = task_record(task, plans, run, index, proxy_costs, where[t], estimates)
        per_task.append(record)
    dmp_s = time.monotonic() - dmp_began
    profiled = (
        [step_profile(backend, task, plans) for task, plans in zip(tasks, placed)]
        if args.profile
        else []
    )
    result = {
        "args": vars(args),
        "model": model_note,
        "hardware": hardware(),
        "versions": {**versions(), "torchrec": torchrec_version()},
        "dmp": describe_costs(backend.config()),
        "proxy": describe_costs(proxy.config()),
        "loads": loads,
        "seconds": {
            "model": trained_s,
            "calibration": calibration_s,
            "proxy": proxy_s,
            "dmp": dmp_s,
            "all": time.monotonic() - began,
        },
        "tasks": per_task,
        "calibration": calibration,
        "topology": topology.name,
        "profile": profiled,
        "bounds": balanced_bounds(per_task, profiled),
        "summary": {clock: summarize(per_task, clock) for clock in CLOCKS},
    }
    report = render(result, argv)
    out = Path(args.out)
    write_text_atomic(out, report)
    write_json_atomic(out.with_suffix(".json"), result)
    print(report)
    return report


def step_profile(backend: DmpBackend, task: PlacementTask, plans: dict) -> dict:
    """Per plan of `PROFILED` (distinct ones), per rank: the median step and its self CPU time
    by category (`dmp_step_profile.py`)."""
    unique, index = distinct({n: plans[n] for n in PROFILED})
    names = [next(n for n in PROFILED if index[n] == i) for i in range(len(unique))]
    job = {**backend.job(task, unique, rounds=1), "names": names}
    print(f"{task.name}: profiling {', '.join(names)}", flush=True)
    ranks = backend.run(job, task.num_devices, PROFILE_PROGRAM)["ranks"]
    return {"task": task.name, "plans": {n: [r[n] for r in ranks] for n in names}}


def profile_table(profiled: dict) -> str:
    parts = sorted(
        {k for ranks in profiled["plans"].values() for r in ranks for k in r["parts_ms"]}
    )
    header = ["plan", "rank", "step ms (median, profiled)", *[f"{p} ms" for p in parts]]
    rows = [
        [name, rank, f"{r['step_ms']:.1f}", *[f"{r['parts_ms'].get(p, 0.0):.1f}" for p in parts]]
        for name, ranks in profiled["plans"].items()
        for rank, r in enumerate(ranks)
    ]
    return markdown_table(header, rows)


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


def plan_table(summary: dict) -> str:
    header = [
        "plan",
        "DMP step ms",
        "vs lookup",
        "(min-max over tasks)",
        "vs TorchRec table-wise",
        "(95% interval)",
        "paired-ratio spread over rounds",
        "step spread over rounds",
        "fbgemm proxy vs lookup",
        f"{DMP_PROXY} vs lookup",
    ]
    rows = [
        [
            name,
            f"{r['ms']:.2f}",
            f"{r['vs_lookup']:.3f}",
            f"{r['vs_lookup_range'][0]:.3f}-{r['vs_lookup_range'][1]:.3f}",
            f"{r['vs_torchrec_tw']:.3f}",
            f"{r['vs_torchrec_tw_interval'][0]:.3f}-{r['vs_torchrec_tw_interval'][1]:.3f}",
            f"{r['vs_lookup_cv']:.1%}",
            f"{r['cost_cv']:.1%}",
            *[f"{r[f'{p}_vs_lookup']:.3f}" if f"{p}_vs_lookup" in r else "n/a" for p in PROXIES],
        ]
        for name, r in sorted(summary["rows"].items(), key=lambda kv: kv[1]["vs_lookup"])
    ]
    return markdown_table(header, rows)


def agreement(summary: dict) -> str:
    """Each proxy's Spearman figures and the plans on which it and DMP disagree most."""
    rows = summary["rows"]
    lines = []
    for proxy, label in PROXIES.items():
        found = summary["agreement"][proxy]
        key = f"{proxy}_vs_lookup"
        gaps = sorted(
            (abs(np.log(r[key] / r["vs_lookup"])), name) for name, r in rows.items() if key in r
        )[::-1][:3]
        apart = "; ".join(
            f"{name} ({rows[name][key]:.2f}, DMP {rows[name]['vs_lookup']:.2f})" for _, name in gaps
        )
        per_task = ", ".join(f"{r:.2f}" for r in found["spearman_per_task"])
        lines.append(
            f"- {label}: Spearman with DMP pooled over tasks (each cost over its task's lookup) "
            f"**{found['spearman_pooled']:.2f}**; per task {per_task} (mean "
            f"{found['spearman_per_task_mean']:.2f}). Furthest apart, as ratios to lookup: "
            f"{apart}."
        )
    return "\n".join(lines)


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
            found = out[name][clock]
            if found:
                out[name][f"{clock}_bound"] = float(
                    geometric_mean(np.array([f["bound"] for f in found]))
                )
    return out


def bounds_table(bounds: dict) -> str:
    header = [
        "TorchRec plan",
        "task",
        "kernels per rank ms (profiled)",
        "DMP step ms (wall)",
        "balanced bound / its step (wall)",
        "(CPU time)",
        "dreamshard(_split) / it (wall)",
        "(CPU time)",
    ]
    rows = []
    for name in BOUNDED:
        for wall, cpu in zip(bounds[name]["wall"], bounds[name]["cpu"]):
            rows.append(
                [
                    name,
                    wall["task"],
                    " / ".join(f"{k:.1f}" for k in wall["kernels_ms"]),
                    f"{wall['step_ms']:.2f}",
                    f"{wall['bound']:.3f}",
                    f"{cpu['bound']:.3f}",
                    f"{wall['ours']:.3f}",
                    f"{cpu['ours']:.3f}",
                ]
            )
    return markdown_table(header, rows)


def calibration_text(calibration: dict) -> str:
    fitted, fit = calibration["fitted"], calibration["fit"]
    parts = []
    for clock, constants in fitted.items():
        parts.append(
            f"by the {'wall clock' if clock == 'wall' else 'CPU time'}: kernel scale "
            f"{constants['kernel_scale']:.2f}, per step {constants['base_ms']:.2f} ms, per "
            f"sharding group beyond the first {constants['group_ms']:.2f} ms, per column shard "
            f"beyond a table's first {constants['column_shard_ms']:.3f} ms, per bucketized "
            f"row-wise id {constants['row_id_us']:.4f} us (fit over "
            f"{fit[clock]['samples']} plans: RMSE {fit[clock]['rmse_ms']:.2f} ms, R2 "
            f"{fit[clock]['r2']:.2f})"
        )
    header = ["task", "plan", "kernels per rank ms (proxy)", "modeled comm ms", "DMP wall ms"]
    header.append("estimate (wall fit) ms")
    rows = [
        [
            r["task"],
            r["plan"],
            " / ".join(f"{k:.1f}" for k in r["kernels_ms"]),
            f"{max(a + b + c for a, b, c in zip(*[r['terms'][k] for k in TERM_KEYS])):.2f}",
            f"{r['dmp_wall_ms']:.2f}",
            f"{r['model_wall_ms']:.2f}",
        ]
        for r in calibration["plans"]
    ]
    return (
        f"Fitted on designed plans of the training tasks {', '.join(calibration['tasks'])} "
        f"({calibration['rounds']} interleaved DMP rounds, {calibration['proxy_rounds']} proxy "
        f"rounds; `benchmarks/dmp_calibration.py`), never on the held-out tasks below: "
        + "; ".join(parts)
        + ".\n\n"
        + markdown_table(header, rows)
    )


TERM_KEYS = ("ids_ms", "pooled_ms", "row_ms")


def render(result: dict, argv: list[str] | None) -> str:
    args, summary = result["args"], result["summary"]
    tasks = result["tasks"]
    caps = ", ".join(format_bytes(t["cap_bytes"]) for t in tasks)
    kinds = {
        name: sorted({k for t in tasks for k in t["sharding_types"][name]})
        for name in ("dreamshard_split", "torchrec_cw", "torchrec_split", "torchrec_default")
    }
    seconds = result["seconds"]
    targets = "; ".join(
        f"{ours} / {theirs}: **{summary['wall']['rows'][ours][f'vs_{theirs}']:.3f}** by the "
        f"wall clock, **{summary['cpu']['rows'][ours][f'vs_{theirs}']:.3f}** by CPU time"
        for ours, theirs in TARGETS
    )
    lines = [
        f"# Plans in real TorchRec training steps ({time.strftime('%Y-%m-%d')})",
        f"Host: {result['hardware']}, 2 cores shared with other engineers' work (1-minute load "
        f"average {', '.join(f'{x:.1f}' for x in result['loads'])} at the start, after the "
        f"calibration, after the proxy and after each task); {result['versions']}. Command: "
        f"`benchmarks/torchrec_e2e.py {' '.join(argv or [])}`; "
        f"{seconds['all'] / 60:.1f} min in all (model {seconds['model'] / 60:.1f}, "
        f"calibration {seconds['calibration'] / 60:.1f}, proxy {seconds['proxy'] / 60:.1f}, "
        f"DMP {seconds['dmp'] / 60:.1f}, profiles the rest).",
        f"Tasks: {len(tasks)} held-out {args['suite']} tasks ({tasks[0]['tables']} tables on "
        f"2 devices; caps per device {caps}; fp32; global batch {tasks[0]['batch']}, "
        f"{tasks[0]['batch'] // 2} per rank). Model: {result['model']}.",
        f"Costs: {result['dmp']}. Each task's distinct plans trained in one launch, "
        f"{args['rounds']} interleaved rounds of {args['warmup']} warm-up + {args['steps']} "
        "timed steps per plan; ratios paired within rounds (geometric mean over rounds, then "
        "over tasks; the interval bootstraps the tasks). Spreads: the median over tasks of the "
        "coefficient of variation over rounds, of the paired ratio to lookup and of the step.",
        "`torchrec_tw`: TorchRec's planner restricted to table-wise (fused kernel) on our cap "
        "with no reservation; `torchrec_cw`: the same allowed column-wise too (sharding types "
        f"chosen here: {', '.join(kinds['torchrec_cw'])}); `torchrec_split`: allowed column- "
        "and row-wise (`--method torchrec --split auto`; sharding types chosen: "
        f"{', '.join(kinds['torchrec_split'])}); "
        "`dreamshard_split`: dreamshard with `--split auto` (sharding types: "
        f"{', '.join(kinds['dreamshard_split'])}); `torchrec_default`: TorchRec's defaults "
        f"(sharding types: {', '.join(kinds['torchrec_default'])}), memory not capped by ours. "
        f"Proxy: {result['proxy']}, "
        f"{args['proxy_rounds']} interleaved rounds over all tasks' placements "
        "(`torchrec_default` is not a placement of ours: no proxy figure). "
        f"The second proxy, **{DMP_PROXY}** (`dreamshard/costs/dmp_proxy.py`): the same "
        "measured kernels per rank (scaled), plus, **modeled** on the "
        f"{result['topology']} topology, the input all-to-all of ids (a column-split table's "
        "ids to every shard's rank), the pooled all-to-all per sharding group and the row-wise "
        "reduce-scatter, plus **fitted** per-step work: a constant, each sharding group beyond "
        "the first, each column shard beyond a table's first (its feature, the join of its "
        "pooled pieces), each bucketized row-wise id; constants below.",
        f"Against TorchRec's planner on the same memory and sharding types (target at most "
        f"0.95): {targets}.",
        "## The modeled DMP terms' constants (calibration)",
        calibration_text(result["calibration"]),
        "## The step by the wall clock (as trained)",
        plan_table(summary["wall"]),
        agreement(summary["wall"]),
        "## The slowest rank's CPU time in the step (what a busy host disturbs least)",
        "Each rank's CPU time during the step leaves out the time it was preempted by other "
        "work on this shared host and the time it waited in the all-to-alls for the other rank; "
        "the slowest rank's is its own work, the part a placement balances.",
        plan_table(summary["cpu"]),
        agreement(summary["cpu"]),
    ]
    if result["profile"]:
        lines += [
            "## Could any plan be 0.95x TorchRec's? The balanced-kernel bound",
            "A plan moves embedding kernels between ranks; the rest of the step (dense tower, "
            "loss, TorchRec's work, most of the communication) stays. So no plan of the same "
            "kind beats TorchRec's plan by more than its kernels' imbalance: its step less "
            "(slowest rank's kernel time - the ranks' mean), the step of perfectly balanced "
            "kernels with the same total. Kernel times per rank from the profile below (self "
            "CPU time of fbgemm's fused forward and backward), steps from the runs above. "
            "Geometric means over tasks: "
            + "; ".join(
                f"{name} {result['bounds'][name].get('wall_bound', float('nan')):.3f} (wall), "
                f"{result['bounds'][name].get('cpu_bound', float('nan')):.3f} (CPU time)"
                for name in BOUNDED
            )
            + ".",
            bounds_table(result["bounds"]),
        ]
        lines += [
            "## Where a step's time goes",
            "Self CPU time per step of each rank's operators under the PyTorch profiler, by "
            "category (`benchmarks/dmp_step_profile.py`: embedding kernels = fbgemm's fused "
            "forward and backward with the optimizer, what the proxy times; collectives = "
            "TorchRec's all-to-alls of ids and pooled embeddings, the data-parallel all-reduce "
            "and their waits; other = TorchRec's and Python's own work per step). The profiler "
            "slows the step; the shares are what counts.",
        ]
        for profiled in result["profile"]:
            lines += [f"### {profiled['task']}", profile_table(profiled)]
    return "\n\n".join(lines) + "\n"


if __name__ == "__main__":
    try:
        main()
    except DreamshardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
