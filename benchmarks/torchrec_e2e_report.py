"""The markdown report of `torchrec_e2e.py`, from the figures it writes as JSON."""

from __future__ import annotations

import time

import numpy as np

from benchmarks.torchrec_e2e_figures import BOUNDED, DMP_PROXY, PROXIES, TARGETS
from dreamshard.report import format_bytes, markdown_table

TERM_KEYS = ("ids_ms", "pooled_ms", "row_ms")  # the modeled communication terms of a DMP step


def plan_table(summary: dict) -> str:
    header = (
        "plan | DMP step ms | vs lookup | (min-max over tasks) | vs TorchRec table-wise | "
        "(95% interval) | paired-ratio spread over rounds | step spread over rounds | "
        "fbgemm proxy vs lookup"
    ).split(" | ") + [f"{DMP_PROXY} vs lookup"]
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


def bounds_table(bounds: dict) -> str:
    header = (
        "TorchRec plan | task | kernels per rank ms (profiled) | DMP step ms (wall) | "
        "balanced bound / its step (wall) | (CPU time) | dreamshard(_split) / it (wall) | "
        "(CPU time)"
    ).split(" | ")
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
    header += ["estimate (wall fit) ms"]
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
        f"rounds; `dreamshard/benchmarks/parts/dmp_calibration.py`), never on the held-out tasks "
        "below: " + "; ".join(parts) + ".\n\n" + markdown_table(header, rows)
    )


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
        f"The second proxy, **{DMP_PROXY}** (`dreamshard/benchmarks/parts/dmp_proxy.py`): the same "
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
            "category (`gpu_tasks/dmp_step_profile.py`: embedding kernels = fbgemm's fused "
            "forward and backward with the optimizer, what the proxy times; collectives = "
            "TorchRec's all-to-alls of ids and pooled embeddings, the data-parallel all-reduce "
            "and their waits; other = TorchRec's and Python's own work per step). The profiler "
            "slows the step; the shares are what counts.",
        ]
        for profiled in result["profile"]:
            lines += [f"### {profiled['task']}", profile_table(profiled)]
    return "\n\n".join(lines) + "\n"


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
