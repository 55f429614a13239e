"""Placing tables from the dashboard: the user's table spec, the planner or model, the prediction.

No Streamlit here. A spec given as text (an upload or a pasted CSV) is read by the same
`dreamshard.tables.sources.load_tables` the CLI uses, so both accept and refuse the same files.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from dreamshard.errors import DreamshardError
from dreamshard.learn.costnet import DEVICE_TERMS
from dreamshard.learn.model_file import DreamShardModel
from dreamshard.placement.registry import place, registrations
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.tables.sources import load_tables
from dreamshard.tables.table import Table

EXAMPLE_CSV = """name,rows,dim,pooling_factor
user_id,4000000,64,1
item_id,2500000,64,1
category,1000,16,3.5
query_tokens,500000,32,18
history_items,2500000,64,40
country,250,8,1
"""


def tables_from_text(text: str, filename: str = "tables.csv") -> list[Table]:
    """Tables from the text of a .csv or .json spec; DreamshardError naming `filename`."""
    suffix = ".json" if filename.lower().endswith(".json") else ".csv"
    with tempfile.TemporaryDirectory(prefix="dashboard-") as folder:
        path = Path(folder) / f"tables{suffix}"
        path.write_text(text)
        try:
            return load_tables(path)
        except DreamshardError as exc:
            raise DreamshardError(str(exc).replace(str(path), filename)) from None


def model_free_methods() -> list[str]:
    """The registered methods the page offers beside the registered models: those that need
    no model (read when the page runs, so a planner registered later is offered too)."""
    return [r.name for r in registrations() if not r.needs_model]


def place_tables(
    task: PlacementTask, method: str, model: DreamShardModel | None = None, split: str = "auto"
) -> Placement:
    """A legal placement by a heuristic (`model` None) or by a DreamShard model's policy;
    `split` "auto" lets the planner split tables (`registry.place`), "none" places them whole."""
    if model is None:
        return place(task, method, split=split)
    return place(task, "dreamshard", model=model, split=split)


def predicted_breakdown(
    model: DreamShardModel, task: PlacementTask, placement: Placement
) -> tuple[list[dict], float]:
    """The cost network's per-device terms (no fwd_comm) and its overall cost, in ms."""
    devices, overall = model.costnet.predict_ms(task, placement)
    return [dict(zip(DEVICE_TERMS, map(float, row))) for row in devices], overall
