"""Run artifacts (`evaluation.json`, `predictions.json`) as the tables the dashboard plots.

Plain functions over plain JSON: no Streamlit, no MLflow, so tests call them directly.
"""

from __future__ import annotations

import pandas as pd

from dreamshard.evaluation.results import Evaluation
from dreamshard.learn.costnet import DEVICE_TERMS
from dreamshard.placement.registry import kind_of
from dreamshard.placement.tasks import Placement, PlacementTask, shard_view
from dreamshard.tables.shards import Split

MIB = 2**20


def cost_source(backend: str) -> str:
    """How to call a backend's costs: "measured" on real kernels, else the backend's name."""
    return "measured" if backend == "fbgemm" else backend


def cost_title(backend: str, costs_made: str) -> str:
    """A per-device cost chart's title: what in it was measured and what modeled. On fbgemm
    the kernels are timed but the all-to-all is modeled unless torchrun measured it."""
    if backend == "fbgemm" and "all-to-all modeled" in costs_made:
        return "Cost per device (kernels measured, all-to-all modeled)"
    return f"{cost_source(backend).capitalize()} cost per device"


def placement_tables(task: PlacementTask, placement: Placement) -> pd.DataFrame:
    """One row per shard placed (an unsplit table is its own shard): its name (a split table's
    shards are `name[c0:c1]` or `name[r0:r1]`), the table it is `of`, how that table is split
    (`split`, empty when whole), its device and features (rows, dim, pooling factor, MiB and
    lookups per sample). DreamshardError when the shards cannot be made (a row split whose
    trace cannot be read)."""
    shards, plan = shard_view(task, placement)
    kinds = {s.table: split_text(s) for s in placement.splits}
    frame = pd.DataFrame(
        [
            {
                "table": t.name,
                "of": t.shard.of if t.shard else t.name,
                "split": kinds.get(t.shard.of, "") if t.shard else "",
                "device": int(d),
                "rows": int(t.rows),
                "dim": int(t.dim),
                "pooling_factor": float(t.pooling_factor),
            }
            for t, d in zip(shards.tables, plan.devices)
        ]
    )
    frame["memory_mib"] = shards.table_bytes() / MIB
    frame["lookups"] = frame["dim"] * frame["pooling_factor"]  # floats read per sample
    return frame


def split_text(split: Split) -> str:
    """How a table is split, as "column-wise into 4 shards"."""
    return f"{split.kind}-wise into {split.parts} shards"


def split_summary(placement: Placement, num_tables: int) -> str:
    """How many of the task's `num_tables` tables the placement splits, and how; "" if none."""
    if not placement.splits:
        return ""
    each = "; ".join(f"{s.table} {split_text(s)}" for s in placement.splits)
    count = len(placement.splits)
    return f"Split {count} of {num_tables} table{'s' if num_tables != 1 else ''}: {each}."


def evaluated_placement(
    evaluation: dict, task_name: str, planner: str
) -> tuple[PlacementTask, Placement]:
    """The task and the placement `planner` made of it in an `evaluation.json` (with its
    splits; results written before splits existed have none)."""
    result = Evaluation.from_dict(evaluation)
    t = [task.name for task in result.tasks].index(task_name)
    return result.tasks[t], result.placements[t][result.planners.index(planner)]


def planner_order(planners: list[str]) -> list[str]:
    """Learned planners first, then the heuristics, random last."""
    last = {"heuristic": 1, "baseline": 2}  # by kind; every other planner comes first
    return sorted(planners, key=lambda p: last.get(kind_of(p), 0))


def ratios_to_best_heuristic(evaluation: dict) -> pd.DataFrame:
    """task, planner, ratio: cost / the task's best heuristic, geometric mean over rounds.

    The ratios are `Evaluation.ratios("per_task_best_heuristic")`, the library's one
    definition. A planner that declined a task (no placement) has no row for it; `picked` says
    which candidate a picking planner chose (a heuristic's plan keeps the heuristic's name).
    """
    result = Evaluation.from_dict(evaluation)
    columns = ["task", "planner", "ratio", "mean_cost_ms", "best_heuristic", "picked"]
    if not result.heuristics:
        return pd.DataFrame(columns=columns)
    ratios = result.ratios("per_task_best_heuristic")
    best = result.per_task_best(result.heuristics)
    means = result.mean_costs()
    rows = [
        {
            "task": task.name,
            "planner": planner,
            "ratio": float(ratios[t, j]),
            "mean_cost_ms": float(means[t, j]),
            "best_heuristic": best[t],
            "picked": result.placements[t][j].candidate,
        }
        for t, task in enumerate(result.tasks)
        for j, planner in enumerate(result.planners)
        if result.placements[t][j] is not None
    ]
    return pd.DataFrame(rows, columns=columns)


def prediction_points(rows: list[dict]) -> pd.DataFrame:
    """task, planner, head, device, predicted_ms, measured_ms, error_pct for every head.

    Heads: `overall` (one point per placement) and the per-device fwd_comp, bwd_comm, bwd_comp
    (one point per device); fwd_comm is not predicted per device (it depends on the others).
    """
    points = []
    for row in rows:
        base = {"task": row["task"], "planner": row["planner"]}
        points.append(
            {
                **base,
                "head": "overall",
                "device": None,
                "predicted_ms": row["predicted_overall_ms"],
                "measured_ms": row["measured_overall_ms"],
            }
        )
        for d, (predicted, measured) in enumerate(
            zip(row["predicted_devices_ms"], row["measured_devices_ms"])
        ):
            for k, term in enumerate(DEVICE_TERMS):
                points.append(
                    {
                        **base,
                        "head": term,
                        "device": d,
                        "predicted_ms": predicted[k],
                        "measured_ms": measured[term],
                    }
                )
    frame = pd.DataFrame(
        points, columns=["task", "planner", "head", "device", "predicted_ms", "measured_ms"]
    )
    measured = frame["measured_ms"].where(frame["measured_ms"] > 0)
    frame["error_pct"] = 100 * (frame["predicted_ms"] - frame["measured_ms"]) / measured
    return frame


def error_summary(points: pd.DataFrame) -> pd.DataFrame:
    """Per head: points, MAE in ms, MAPE in %, and the mean signed error (bias) in %."""
    grouped = points.groupby("head", sort=False)
    return pd.DataFrame(
        {
            "points": grouped.size(),
            "MAE ms": grouped.apply(lambda g: (g["predicted_ms"] - g["measured_ms"]).abs().mean()),
            "MAPE %": grouped["error_pct"].apply(lambda e: e.abs().mean()),
            "bias %": grouped["error_pct"].mean(),
        }
    ).reset_index()


def explanation_frames(found) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """`evaluation.explain`'s explanation as three tables: devices (predicted terms, bottleneck,
    critical), tables (key, load before, next-best devices) and the candidates weighed."""
    devices = pd.DataFrame(
        [
            {
                "device": d.device,
                "tables": d.tables,
                "fwd ms": d.fwd_ms,
                "all-to-all ms": d.comm_ms,
                "bwd ms": d.bwd_ms,
                "bottleneck": d.bottleneck,
                "critical": d.critical or "-",
            }
            for d in found.devices
        ]
    )
    tables = pd.DataFrame(
        [
            {
                "table": t.table,
                "device": t.device,
                "key": t.key,
                "load before": t.load_before,
                "next best": ", ".join(f"{d}: {ms:.3f} ms" for d, ms in t.next_best) or "-",
            }
            for t in found.tables
        ]
    )
    candidates = pd.DataFrame(
        [{"candidate": c.name, "predicted ms": c.predicted_ms} for c in found.candidates]
    )
    return devices, tables, candidates
