"""Plotly figures of placements, costs, comparisons and training; plain functions of DataFrames.

No Streamlit here: every function returns a `plotly.graph_objects.Figure`, so tests build them
directly.
"""

from __future__ import annotations

import itertools

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from dreamshard.costs.types import COST_TERMS
from dreamshard.placement.registry import kind_of

TERM_COLOURS = {
    "fwd_comp": "#4C78A8",
    "fwd_comm": "#9ECAE9",
    "bwd_comm": "#F58518",
    "bwd_comp": "#E45756",
}
TERM_NAMES = {
    "fwd_comp": "forward compute",
    "fwd_comm": "forward all-to-all",
    "bwd_comm": "backward all-to-all",
    "bwd_comp": "backward compute + update",
}
HEIGHT = 380
# a split table's shards: strong colours, hatched, apart from the whole tables' Viridis scale
SHARD_COLOURS = ["#E45756", "#F58518", "#B279A2", "#FF9DA6", "#9D755D", "#54A24B", "#4C78A8"]


def mib_text(mib: float) -> str:
    return f"{mib:.0f} MiB" if mib >= 100 else f"{mib:.1f} MiB"


def device_labels(num_devices: int) -> list[str]:
    return [f"device {d}" for d in range(num_devices)]


def table_bars(tables: pd.DataFrame, labels: list[str], marker: dict, **trace) -> go.Bar:
    """One bar segment per row of `tables` on its device, labelled inside (a shard by its
    range alone, `[c0:16]`: its colour names the table), its name and features on hover."""
    inside = [
        name.removeprefix(of) if name != of else name
        for name, of in zip(tables["table"], tables["of"])
    ]
    return go.Bar(
        x=[labels[d] for d in tables["device"]],
        y=tables["memory_mib"],
        text=inside,
        hovertext=tables["table"],
        textposition="inside",
        insidetextanchor="middle",
        marker=marker,
        customdata=tables[["rows", "dim", "pooling_factor", "lookups"]].to_numpy(),
        hovertemplate=(
            "<b>%{hovertext}</b> on %{x}<br>%{y:.1f} MiB<br>rows %{customdata[0]:,}"
            "<br>dim %{customdata[1]}<br>pooling factor %{customdata[2]:.2f}"
            "<br>lookups per sample %{customdata[3]:.0f}<extra></extra>"
        ),
        **trace,
    )


def tables_figure(tables: pd.DataFrame, num_devices: int, cap_mib: float) -> go.Figure:
    """Tables stacked on each device, height = memory, colour = lookups per sample; cap line.

    `tables`: one row per shard as `frames.placement_tables` gives it. A split table's shards
    are hatched in one colour of their own (one legend entry per split table), stacked above
    the whole tables of their device.
    """
    labels = device_labels(num_devices)
    ordered = tables.sort_values(["device", "memory_mib"], ascending=[True, False])
    whole = ordered[ordered["table"] == ordered["of"]]
    fig = go.Figure(
        table_bars(
            whole,
            labels,
            {
                "color": whole["lookups"],
                "colorscale": "Viridis",
                "line": {"color": "white", "width": 1},
                "colorbar": {"title": {"text": "lookups<br>per sample<br>(dim × pooling)"}},
            },
            showlegend=False,
        )
    )
    shards = ordered[ordered["table"] != ordered["of"]]
    colours = itertools.cycle(SHARD_COLOURS)
    for (of, split), group in shards.groupby(["of", "split"], sort=False):
        fig.add_trace(
            table_bars(
                group,
                labels,
                {
                    "color": next(colours),
                    # overlay: the colour fills the bar, white hatching over it
                    "pattern": {
                        "shape": "/",
                        "fillmode": "overlay",
                        "fgcolor": "white",
                        "fgopacity": 0.4,
                        "solidity": 0.15,
                    },
                    "line": {"color": "white", "width": 1},
                },
                name=f"{of}: {split}",
                legendgroup=of,
            )
        )
    used = tables.groupby("device")["memory_mib"].sum().reindex(range(num_devices), fill_value=0)
    counts = tables.groupby("device").size().reindex(range(num_devices), fill_value=0)
    unit = "shard" if len(shards) else "table"
    # each device's use under its name (labels above the bars collide with the cap line)
    ticks = [
        f"{label}<br>{mib_text(mib)} ({100 * mib / cap_mib:.0f}%)<br>{n} {unit}{'s' * (n != 1)}"
        for label, mib, n in zip(labels, used, counts)
    ]
    fig.add_hline(y=cap_mib, line={"dash": "dash", "color": "firebrick"})
    fig.add_trace(
        go.Scatter(
            x=[None],
            y=[None],
            mode="lines",
            name=f"memory cap per device: {mib_text(cap_mib)}",
            line={"dash": "dash", "color": "firebrick"},
        )
    )
    fig.update_layout(
        barmode="stack",
        height=HEIGHT + 60,
        margin={"t": 50},
        title="Tables per device (height = memory)",
        xaxis={
            "categoryorder": "array",
            "categoryarray": labels,
            "tickvals": labels,
            "ticktext": ticks,
        },
        yaxis={"title": "memory (MiB)", "range": [0, max(cap_mib, used.max()) * 1.1]},
        uniformtext={"minsize": 9, "mode": "hide"},
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def cost_figure(
    devices: list[dict], title: str, overall_ms: float | None = None, overall_label: str = ""
) -> go.Figure:
    """Stacked per-device cost terms (ms) with the overall cost as a line.

    `devices`: one dict per device with any of fwd_comp, fwd_comm, bwd_comm, bwd_comp.
    `overall_ms` defaults to the slowest device's sum (the measured definition).
    """
    labels = device_labels(len(devices))
    fig = go.Figure()
    for term in COST_TERMS:
        if not any(term in d for d in devices):
            continue
        values = [d.get(term, 0.0) for d in devices]
        fig.add_trace(
            go.Bar(
                x=labels,
                y=values,
                name=TERM_NAMES[term],
                marker_color=TERM_COLOURS[term],
                hovertemplate=f"{term}: %{{y:.2f}} ms<extra>%{{x}}</extra>",
            )
        )
    totals = [sum(d.values()) for d in devices]
    if overall_ms is None:
        overall_ms = max(totals)
        overall_label = overall_label or "overall = slowest device"
    fig.add_hline(
        y=overall_ms,
        line={"dash": "dash", "color": "black"},
        annotation_text=f"{overall_label}: {overall_ms:.2f} ms",
        annotation_position="top left",
    )
    fig.update_layout(
        barmode="stack",
        title=title,
        height=HEIGHT,
        margin={"t": 50},
        yaxis={"title": "ms per training step", "range": [0, max(max(totals), overall_ms) * 1.15]},
        legend={"orientation": "h", "y": -0.15, "traceorder": "normal"},
    )
    return fig


def planner_colours(planners: list[str]) -> dict[str, str]:
    """Learned planners in strong colours; the heuristics grey; random light grey."""
    strong = iter(["#E45756", "#4C78A8", "#F58518", "#54A24B", "#B279A2", "#9D755D"] * 4)
    greys = {"baseline": "#BBBBBB", "heuristic": "#7F7F7F"}
    return {p: greys.get(kind_of(p)) or next(strong) for p in planners}


def compare_figure(ratios: pd.DataFrame, planners: list[str]) -> go.Figure:
    """Box and points of each planner's cost / best heuristic per held-out task, one panel per
    evaluation (`ratios` has columns evaluation, task, planner, ratio)."""
    fig = px.box(
        ratios,
        x="planner",
        y="ratio",
        color="planner",
        points="all",
        facet_col="evaluation",
        facet_col_wrap=1,
        hover_data=["task", "mean_cost_ms"],
        category_orders={"planner": planners},
        color_discrete_map=planner_colours(planners),
        height=max(HEIGHT, 330 * ratios["evaluation"].nunique()),
    )
    # every task's point on its planner's box, not beside it
    fig.update_traces(pointpos=0, jitter=0.3, marker={"size": 9, "line": {"width": 1}})
    fig.for_each_annotation(lambda a: a.update(text=a.text.split("=", 1)[-1]))
    fig.add_hline(
        y=1.0,
        line={"dash": "dash", "color": "grey"},
        annotation_text="best heuristic of each task = 1.0",
        annotation_position="bottom right",
    )
    fig.update_layout(
        showlegend=False,
        margin={"t": 40},
        title="Cost relative to each task's best heuristic (lower is better)",
    )
    fig.update_yaxes(title="cost / best heuristic")
    return fig


def prediction_figure(points: pd.DataFrame, truth: str = "measured") -> go.Figure:
    """Predicted against the true overall cost, one point per placement, identity line.

    `truth` names where the true costs came from ("measured", or "simulated")."""
    overall = points[points["head"] == "overall"]
    fig = px.scatter(
        overall,
        x="measured_ms",
        y="predicted_ms",
        color="planner",
        hover_data=["task", "error_pct"],
        height=HEIGHT + 40,
    )
    low = float(min(overall["measured_ms"].min(), overall["predicted_ms"].min()) * 0.9)
    high = float(max(overall["measured_ms"].max(), overall["predicted_ms"].max()) * 1.1)
    fig.add_trace(
        go.Scatter(
            x=[low, high],
            y=[low, high],
            mode="lines",
            name=f"predicted = {truth}",
            line={"dash": "dash", "color": "grey"},
        )
    )
    fig.update_layout(
        title=f"Overall cost: predicted vs {truth}",
        margin={"t": 50},
        xaxis={"title": f"{truth} ms", "range": [low, high]},
        yaxis={"title": "predicted ms", "range": [low, high], "scaleanchor": "x"},
    )
    return fig


def error_figure(points: pd.DataFrame, truth: str = "measured") -> go.Figure:
    """Distribution of the signed percentage error of each head."""
    fig = px.box(
        points.dropna(subset=["error_pct"]),
        x="head",
        y="error_pct",
        color="head",
        points="all",
        hover_data=["task", "planner", "device"],
        height=HEIGHT,
    )
    fig.add_hline(y=0, line={"dash": "dash", "color": "grey"})
    fig.update_layout(
        title="Prediction error per head",
        showlegend=False,
        margin={"t": 50},
        yaxis={"title": f"(predicted − {truth}) / {truth}, %"},
    )
    return fig


def curve_figure(
    curves: pd.DataFrame, x: str, y: str, title: str, x_title: str, y_title: str
) -> go.Figure:
    """Lines of `y` over `x`, one per `run` (a column naming the run)."""
    fig = px.line(curves, x=x, y=y, color="run", markers=len(curves) <= 60, height=HEIGHT - 40)
    fig.update_layout(
        title=title,
        margin={"t": 50},
        xaxis={"title": x_title},
        yaxis={"title": y_title},
        legend={"orientation": "h", "y": -0.25},
    )
    if curves[x].nunique() <= 20:  # iterations and updates: whole numbers only
        fig.update_xaxes(dtick=1)
    return fig
