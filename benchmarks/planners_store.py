"""What `compare_planners.py` keeps between sessions, so `--resume` measures nothing twice.

Two stores in the script's state folder, emptied unless `--resume`:
- its cost dataset (`evaluation.stored`): every measurement under a key that includes its
  round. The interleaved rounds are rounds 1000+ (`evaluate`), the best-known screening and
  search 2000, the measured refinement 3000+ (the n-th time it measures a placement). A resumed
  run reads them back.
- `PlanStore`: each planner's placement of each task (or why it declined), its planning time
  and the searches' logs, written after every planner. A resumed run returns them as they
  were: time-limited searches and measured ones would not repeat placements exactly, and a
  changed placement is a new measurement.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from dreamshard.errors import DreamshardError
from dreamshard.files import write_text_atomic
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.tables.shards import Split

SEARCH_ROUND = 2000  # best-known screening and search: each placement measured once
REFINE_ROUND = 3000  # measured refinement: REFINE_ROUND + n for a placement's n-th measurement


def placement_record(placement: Placement) -> dict:
    return {
        "devices": list(placement.devices),
        "method": placement.method,
        "candidate": placement.candidate,
        "splits": [asdict(s) for s in placement.splits],
    }


def placement_from(record: dict) -> Placement:
    return Placement(
        tuple(record["devices"]),
        record["method"],
        record["candidate"],
        tuple(Split(**s) for s in record["splits"]),
    )


class PlanStore:
    """Per task, each planner's placement or decline and its seconds, and the searches' logs.

    `settings` are what the placements depend on; resuming with other settings is refused.
    """

    def __init__(self, path: Path, settings: dict, resume: bool):
        self.path = path
        self.data = {"settings": settings, "plans": {}, "logs": {}}
        if resume and path.exists():
            stored = json.loads(path.read_text())
            if stored["settings"] != settings:
                old = stored["settings"]
                changed = sorted(k for k in settings | old if settings.get(k) != old.get(k))
                raise DreamshardError(
                    f"--resume: the stored plans in {path} were made with other "
                    f"{', '.join(changed)}; rerun with the same options, or without --resume"
                )
            self.data = stored
        self.seconds: dict[tuple[str, str], float] = {}

    def log(self, kind: str) -> dict:
        """The live per-task log of a kind ("best_known", "milp", "refine"), saved with the
        plans: a planner writes its task's entry before it returns."""
        return self.data["logs"].setdefault(kind, {})

    def planner(self, name: str, plan):
        """`plan` wrapped: a stored placement (or decline) as it was, else planned and stored."""

        def stored(task: PlacementTask, seed: int) -> Placement:
            plans = self.data["plans"].setdefault(task.name, {})
            if name not in plans:
                plans[name] = self._plan(plan, task, seed)
                write_text_atomic(self.path, json.dumps(self.data, indent=1) + "\n")
            record = plans[name]
            self.seconds[(task.name, name)] = record["seconds"]
            if "declined" in record:
                raise DreamshardError(record["declined"])
            return placement_from(record)

        return stored

    @staticmethod
    def _plan(plan, task: PlacementTask, seed: int) -> dict:
        start = time.perf_counter()
        try:
            placement = plan(task, seed)
        except DreamshardError as exc:  # a decline: kept, so a resumed run declines alike
            return {"declined": str(exc), "seconds": time.perf_counter() - start}
        return placement_record(placement) | {"seconds": time.perf_counter() - start}
