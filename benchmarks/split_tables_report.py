"""The report of `split_tables.py`: its markdown sections, from the results it writes as JSON.

Also the plan names the run and its report share: a planner's `--split auto` plan is
`NAME +split`, and ours are held against TorchRec's planner in `TORCHREC_PAIRS`.
"""

from __future__ import annotations

import numpy as np

from benchmarks.parts.ratio_tables import number, placed_note
from dreamshard.report import format_table

SPLIT = " +split"  # the name of a planner's --split auto plan
# Ours against TorchRec's planner on the same memory: (ours, TorchRec's); the first is the
# issue's target (at most TARGET_TORCHREC).
TORCHREC_PAIRS = (
    ("dreamshard" + SPLIT, "torchrec" + SPLIT),
    ("dreamshard", "torchrec"),
    ("dreamshard" + SPLIT, "torchrec"),
)
TARGET_TORCHREC = 0.95


def render(results: dict) -> str:
    load = results["load_average"]
    parts = [
        f"# Split tables on real kernels ({results['date']})",
        f"Host: {results['host']}; {results['versions']}. Costs: {results['costs_made']}; "
        f"row-wise partial sums modeled as a reduce-scatter (the all-to-all volume of a table of "
        f"that width). {results['rounds']} interleaved rounds in one run, "
        f"{results['minutes']:.1f} min in all. Load average (1 min) over the run: "
        f"{load['min']:.1f}-{load['max']:.1f} on 2 cores shared with other engineers; the "
        f"reference group (costs/reference.py) took "
        f"{', '.join(f'{x:.1f}' for x in results['reference_ms_per_round']) or 'no'} ms in the "
        f"rounds (nominal 12.0). Labels: {results['labels']}"
        + (
            " (compute scaled by nominal / the reference's time in the same measurement)"
            if results["labels"] == "normalised"
            else ""
        )
        + f". Noise: a placement's cost varies over the rounds by a median CV of "
        f"{results['noise_cv']:.1%} ({results['noise_cv_raw']:.1%} raw). "
        f"Model of dreamshard: {results['model']}. "
        f"Command: `{results['command'].strip()}`.",
        "\n\n".join(
            render_widths(w, first=k == 0)
            for k, w in enumerate([results["widths"], *results.get("widths_other_profiles", [])])
        ),
        render_suites(results),
        render_tasks(results),
        render_targets(results["targets"]),
        DEFINITIONS,
    ]
    return "\n\n".join(parts) + "\n"


def render_widths(widths: dict, first: bool = True) -> str:
    header = (
        "kernel | rows | widths | lookups/sample | fwd ms | bwd ms | fwd+bwd ms | "
        "vs d (min-max over rounds)"
    ).split(" | ")
    rows = [
        [
            item["label"],
            "+".join(map(str, item["rows"])),
            "+".join(map(str, item["widths"])),
            f"{item['lookups_per_sample']:.1f}",
            item["fwd_ms"],
            item["bwd_ms"],
            item["kernel_ms"],
            f"{item['vs_d']['ratio']:.3f} ({item['vs_d']['min']:.3f}-{item['vs_d']['max']:.3f})",
        ]
        for item in widths["items"]
    ]
    heading = "## (a) One hot table at width d, d/2, d/4 (same trace)\n\n" if first else ""
    return "\n".join(
        [
            f"{heading}{widths['table']} of "
            f"{widths['task']}: {widths['rows']} rows x {widths['dim']}, "
            f"{widths['pooling_factor']:.1f} lookups per sample, lookups x width "
            f"{widths['key_over_mean_load']:.2f}x the task's mean device load. Each kernel "
            "alone on one device (medians over the rounds):",
            "```",
            format_table(header, rows),
            "```",
        ]
    )


def render_suites(results: dict) -> str:
    out = ["## (b) `--split auto` beside `--split none`, per suite"]
    header = (
        "planner | auto/none (per task) | worse|better beyond noise | tasks split | "
        "tables split/task | none vs strongest | auto vs strongest | none vs bound | "
        "auto vs bound"
    ).split(" | ")
    for name, suite in results["suites"].items():
        rows = [
            [
                p + placed_note(r["tasks_placed"], r["tasks"]),
                f"{number(r['auto_vs_none'])} ("
                + " ".join(f"{x:.2f}" for x in r["auto_vs_none_tasks"])
                + ")",
                f"{r['worse_beyond_noise']}|{r['better_beyond_noise']}",
                r["tasks_split"],
                number(r["tables_split_per_task"], 2),
                number(r["vs_strongest_none"]) + placed_note(r["tasks_placed_none"], r["tasks"]),
                number(r["vs_strongest_auto"]),
                number(r["vs_bound_none"]) + placed_note(r["tasks_placed_none"], r["tasks"]),
                number(r["vs_bound_auto"]),
            ]
            for p, r in suite["planners"].items()
        ]
        out += [
            f"**{name}** (strongest table-wise heuristic: {suite['strongest_heuristic']}; the "
            f"best split plan of each task vs it: {suite['best_split_vs_strongest']:.3f})",
            "```",
            format_table(header, rows),
            "```",
        ]
        if suite["vs_torchrec"]:
            out.append(render_torchrec(suite["vs_torchrec"]))
    return "\n".join(out)


def render_torchrec(pairs: dict) -> str:
    """Ours against TorchRec's planner, one line per pair."""
    return "\n".join(f"- {torchrec_line(name, r)}" for name, r in pairs.items())


def torchrec_line(name: str, r: dict) -> str:
    """`ours` vs `theirs`: the paired ratio, its range over tasks, [k/n] tasks TorchRec placed."""
    ours, theirs = name.split(" / ")
    per_task = " ".join("declined" if x is None else f"{x:.2f}" for x in r["per_task"])
    figure = (
        f"{r['ratio']:.3f} ({r['min']:.3f}-{r['max']:.3f} over tasks)"
        if r["ratio"] is not None
        else "no task placed"
    )
    return (
        f"`{ours}` vs `{theirs}`: {figure} [{r['tasks_placed']}/{r['tasks']} tasks TorchRec "
        f"placed; per task: {per_task}]"
    )


def render_tasks(results: dict) -> str:
    header = (
        "task | best table-wise bound by one table | table-wise plans bound by one table | "
        "best table-wise | best split (splits) | split/table-wise (rounds) | bound ms | "
        "tables alone ms | best split vs bound | dreamshard +split vs best table-wise | "
        "vs bound"
    ).split(" | ")
    rows = []
    for task in results["tasks"]:
        best_w, best_s = (
            task["planners"][task["best_tablewise"]],
            task["planners"][task["best_split"]],
        )
        ratio = task["best_split_vs_best_tablewise"]
        ds = task["planners"].get("dreamshard" + SPLIT)
        rows.append(
            [
                task["task"],
                ("yes" if task["single_table_bound"] else "no")
                + f" ({best_w['devices']['slowest_shards']} on slowest)",
                ", ".join(task["single_table_bound_plans"]) or "-",
                f"{task['best_tablewise']} {np.mean(best_w['costs_ms']):.1f}",
                f"{task['best_split']} {np.mean(best_s['costs_ms']):.1f} ({len(best_s['splits'])})",
                f"{ratio['ratio']:.3f} ({ratio['min']:.3f}-{ratio['max']:.3f})",
                f"{np.mean(task['bound_ms']):.1f}",
                f"{np.mean(task['tables_alone_bound_ms']):.1f}",
                f"{best_s['vs_bound']['ratio']:.3f}",
                f"{ds['vs_best_tablewise']['ratio']:.3f}" if ds else "-",
                f"{ds['vs_bound']['ratio']:.3f}" if ds else "-",
            ]
        )
    return "\n".join(["## Per task", "```", format_table(header, rows), "```"])


def render_targets(found: dict) -> str:
    lines = ["## The issue's targets (measured figures; met or not)"]
    for which, entry in found["bound_sets"].items():
        lines.append(
            f"- Tasks where {which} is bound by a single table (its slowest device holds one "
            f"table): {', '.join(entry['tasks']) or 'none'}."
        )
        for name in ("dreamshard", "best split plan"):
            if name not in entry or not entry["tasks"]:
                continue
            item = entry[name]
            figures = "; ".join(
                f"{r['task']} ({', '.join(r['bound_plans'])} bound): {r['planner']} "
                f"{r['vs_best_tablewise']:.3f}x the best table-wise plan, "
                f"{r['vs_bound']:.3f}x the bound"
                for r in item["rows"]
            )
            lines.append(
                f"  - {name} with splitting there (target <= 0.92x the best table-wise plan, "
                f"within 3% of the balanced bound): {figures}; 0.92x "
                f"{'met' if item['met_0.92'] else 'not met'}, bound "
                f"{'met' if item['met_bound_3pct'] else 'not met'}."
            )
    every = ", ".join(
        f"{k} {number(v)}" + (" (met)" if found["met_0.95"][k] else "")
        for k, v in found["vs_strongest_tablewise_heuristic"].items()
    )
    lines.append(
        f"- Over all suites vs the strongest table-wise heuristic of each suite "
        f"(target <= 0.95): {every}."
    )
    name = " / ".join(TORCHREC_PAIRS[0])
    target = found.get("vs_torchrec", {}).get(name)
    if target is not None:
        met = target["ratio"] is not None and target["ratio"] <= TARGET_TORCHREC
        lines.append(
            f"- Over all suites vs TorchRec's planner with column-/row-wise sharding allowed, on "
            f"the same memory (target <= {TARGET_TORCHREC}): {torchrec_line(name, target)}; "
            f"{'met' if met else 'not met'}."
        )
    worse = ", ".join(f"{k} {v}" for k, v in found["worse_than_none_beyond_noise"].items())
    lines.append(
        f"- Tasks where `--split auto` is worse than `--split none` beyond the noise "
        f"(target: none): {worse}."
    )
    return "\n".join(lines)


DEFINITIONS = """## How the figures are made
- Every placement (deduplicated: a planner whose `auto` plan equals its `none` plan is measured
  once), every task's tables alone, and the hot table's kernels are measured once per round, in
  a fresh random order each round (`evaluation.rounds.measure_interleaved`). Ratios are paired
  within a round, then a geometric mean over the rounds (range over the rounds in brackets) and
  over the tasks. Best table-wise / best split: the planner with the lowest mean cost among the
  `none` / the `auto` plans of the task (a choice on the same rounds: slightly optimistic).
- Strongest table-wise heuristic: `Evaluation.strongest_heuristic` over the suite's `none` plans.
- Balanced bound of a task: per round, the least mean device load among all the task's plans
  measured (a plan's mean device load: per device its kernels' time and its modeled exchange,
  without the wait for the slowest forward, averaged over the devices: what the plan would
  take were its work spread evenly). A plan's ratio to it says how far it is from the best
  balance of the least work measured; a column split adds work (each shard repeats its
  table's lookups), so a split plan's own mean load is higher than a whole-table plan's.
- Tables alone ms: the task's tables each timed alone in its own kernel in the same rounds,
  summed, over the devices, plus the exchange of a perfectly balanced plan. Shown, not used
  as the bound: a small table timed alone keeps its rows in this CPU's cache between calls
  and under-states its cost inside a fused group (by up to 2x, seen on this host).
- Worse (better) beyond noise: the auto/none ratio is above (below) 1 in every round and its
  mean beyond the run's median CV of a placement's cost over the rounds.
- `tables split/task`: how many tables the `auto` plan splits, mean over the suite's tasks.
- A heuristic's `+split` plan is the library's `--split auto`: its balance rule's column
  halvings, or the same tables cut row-wise over all devices (TorchRec's layout), kept only
  where the calibrated analytic model (the `simulated` backend) rates the heuristic's
  placement of the shards cheaper (`placement.splitting.checked_balance_splits`).
  Variants beside it, placed by the same heuristic (not planners of the library, and not
  counted in "best split plan", the best `--split auto` plan): `+rule unchecked`, the rule's
  column halvings as they come (`placement.splitting.balance_splits`, the heuristics'
  `--split auto` before the check); `+row rule`, the same tables and parts cut into row ranges
  (not pinned).
- `torchrec` / `torchrec +split`: TorchRec's planner (`integrations.torchrec_planner`) on the
  task's memory cap with no storage reservation, table-wise / allowed column- and row-wise as it
  chooses; both are planners here (they count in the best table-wise and best split plans). A
  task it declines is not measured: its figures are over the tasks it placed, `[k/n]`. Ours
  vs TorchRec's: cost / TorchRec's cost paired within each round, geometric mean over the
  rounds per task, then over the tasks TorchRec placed."""
