"""An evaluation's results and every ratio computed from them: the one definition of each.

Costs are [round, task, planner]; rounds are interleaved, so a ratio is taken round by round
(paired) and then summarised by a geometric mean. The references:
- `strongest_heuristic`: the one heuristic with the best mean cost over all the tasks;
- `per_task_best_heuristic`: on each task, the heuristic with the lowest mean cost there;
- `best_known`: on each task, the placement with the lowest mean cost in these rounds, whoever
  made it. The rounds re-measure every placement independently of any search that found it,
  so a search's lucky measurement (the winner's curse) never becomes the reference.
A planner that declined a task has NaN costs there and is compared only where it placed.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from dreamshard.evaluation.rounds import geometric_mean
from dreamshard.placement.registry import method_names
from dreamshard.placement.tasks import Placement, PlacementTask, device_memory
from dreamshard.tables.shards import Split
from dreamshard.tables.sources import table_from_record, table_to_dict

REFERENCES = ("strongest_heuristic", "per_task_best_heuristic", "best_known")


@dataclass
class Evaluation:
    """Costs of every planner's placement of every task, per interleaved round."""

    tasks: list[PlacementTask]
    planners: list[str]
    placements: list[list[Placement | None]]  # [task][planner]; None where it declined
    costs: np.ndarray  # [round, task, planner] overall ms; NaN where it declined
    breakdowns: list[list[list[dict]]]  # [task][planner][device] mean ms per term over rounds
    plan_seconds: np.ndarray  # [task, planner]
    backend: str
    declined: dict[tuple[int, int], str] = field(default_factory=dict)  # (task, planner): why
    costs_made: str = ""  # how the costs were made: hardware, precision, communication

    @property
    def heuristics(self) -> list[str]:
        """The planners that are registered heuristics: what the references are made of."""
        heuristics = method_names("heuristic")
        return [p for p in self.planners if p in heuristics]

    def mean_costs(self) -> np.ndarray:
        """[task, planner]: mean cost over rounds (NaN where declined)."""
        return self.costs.mean(axis=0)

    def strongest_heuristic(self) -> str:
        """The fixed heuristic with the best mean cost over the tasks (the paper's baseline)."""
        means = {h: np.nanmean(self.costs[:, :, self.planners.index(h)]) for h in self.heuristics}
        return min(means, key=means.__getitem__)

    def per_task_best(self, among: list[str] | None = None) -> list[str]:
        """Per task, the planner (of `among`, default all) with the lowest mean cost there."""
        columns = [self.planners.index(p) for p in (among or self.planners)]
        means = self.mean_costs()[:, columns]
        means = np.where(np.isnan(means), np.inf, means)
        return [self.planners[columns[int(k)]] for k in means.argmin(axis=1)]

    def reference_costs(self, reference: str) -> np.ndarray:
        """[round, task]: the cost of a reference (one of REFERENCES, or a planner's name)."""
        if reference == "strongest_heuristic":
            names = [self.strongest_heuristic()] * len(self.tasks)
        elif reference == "per_task_best_heuristic":
            names = self.per_task_best(self.heuristics)
        elif reference == "best_known":
            names = self.per_task_best()
        else:
            names = [reference] * len(self.tasks)
        return np.stack(
            [self.costs[:, t, self.planners.index(n)] for t, n in enumerate(names)], axis=1
        )

    def ratios(self, reference: str) -> np.ndarray:
        """[task, planner]: geometric mean over rounds of cost / reference, paired per round."""
        return geometric_mean(self.costs / self.reference_costs(reference)[:, :, None], axis=0)

    def paired_ratio(self, planner: str, reference: str) -> float:
        """Geometric mean over the tasks both placed of `planner`'s ratio to `reference`."""
        column = self.ratios(reference)[:, self.planners.index(planner)]
        return float(geometric_mean(column[~np.isnan(column)]))

    def log_ratios(self, planner: str, reference: str) -> np.ndarray:
        """[round, task]: the log of `planner`'s cost over the reference's in the same round."""
        j = self.planners.index(planner)
        return np.log(self.costs[:, :, j] / self.reference_costs(reference))

    def pair(self, ours: str, theirs: str) -> dict:
        """`ours` against `theirs` (a planner or a reference): the paired ratio (geometric mean
        over rounds per task, then over the tasks both placed), its range and per-task values
        (None where either declined), and on how many of the tasks both placed."""
        column = self.ratios(theirs)[:, self.planners.index(ours)]  # [task]
        placed = ~np.isnan(column)
        return {
            "ratio": float(geometric_mean(column[placed])) if placed.any() else None,
            "min": float(column[placed].min()) if placed.any() else None,
            "max": float(column[placed].max()) if placed.any() else None,
            "per_task": [None if np.isnan(x) else float(x) for x in column],
            "tasks_placed": int(placed.sum()),
            "tasks": len(column),
        }

    def groups(self, labels: Sequence[Hashable]) -> dict[Hashable, Evaluation]:
        """The evaluation cut by a label per task (its suite, its device count), in the order
        the labels first appear."""
        return {
            label: self.subset([t for t, x in enumerate(labels) if x == label])
            for label in dict.fromkeys(labels)
        }

    def summary_rows(self) -> list[dict]:
        """Per planner: mean cost, ratio to each reference (mean and worst task), wins."""
        ratios = {reference: self.ratios(reference) for reference in REFERENCES}
        means = np.where(np.isnan(self.mean_costs()), np.inf, self.mean_costs())
        winner = means.argmin(axis=1)
        rows = []
        for j, planner in enumerate(self.planners):
            placed = ~np.isnan(self.costs[0, :, j])
            row = {"planner": planner, "tasks_placed": int(placed.sum())}
            row["mean_cost_ms"] = float(self.costs[:, placed, j].mean()) if placed.any() else None
            for reference, values in ratios.items():
                ok = values[placed, j]
                row[f"vs_{reference}"] = float(geometric_mean(ok)) if ok.size else None
                row[f"vs_{reference}_worst"] = float(ok.max()) if ok.size else None
            row["best_on_tasks"] = int((winner == j).sum())
            row["picked"] = self.picked(j)
            row["plan_ms"] = float(self.plan_seconds[:, j].mean() * 1000)
            rows.append(row)
        return rows

    def picked(self, j: int) -> str:
        """For a planner that picks among candidates: which ones won, e.g. "policy 3, lookup 1".

        A heuristic's placement that won is counted under the heuristic's name, so a report
        never credits the policy with it.
        """
        counts: dict[str, int] = {}
        for row in self.placements:
            if row[j] is not None and row[j].candidate:
                kind = candidate_kind(row[j].candidate)
                counts[kind] = counts.get(kind, 0) + 1
        return ", ".join(f"{k} {n}" for k, n in counts.items())

    def subset(self, indices: list[int]) -> Evaluation:
        """The part of the evaluation that holds the given tasks (one suite of several)."""
        where = {t: k for k, t in enumerate(indices)}
        return Evaluation(
            [self.tasks[t] for t in indices],
            self.planners,
            [self.placements[t] for t in indices],
            self.costs[:, indices],
            [self.breakdowns[t] for t in indices],
            self.plan_seconds[indices],
            self.backend,
            {(where[t], j): why for (t, j), why in self.declined.items() if t in where},
            self.costs_made,
        )

    def to_dict(self) -> dict:
        """Everything a report or the dashboard needs, as plain JSON."""
        return {
            "backend": self.backend,
            "costs_made": self.costs_made,
            "planners": self.planners,
            "rounds": int(self.costs.shape[0]),
            "strongest_heuristic": self.strongest_heuristic(),
            "summary": self.summary_rows(),
            "tasks": [
                {
                    "name": task.name,
                    "num_devices": task.num_devices,
                    "memory_cap_bytes": task.memory_cap_bytes,
                    "precision": task.precision,
                    "tables": [table_to_dict(t) for t in task.tables],
                    "results": {
                        planner: self._result(t, j) for j, planner in enumerate(self.planners)
                    },
                }
                for t, task in enumerate(self.tasks)
            ],
        }

    def _result(self, t: int, j: int) -> dict:
        placement = self.placements[t][j]
        if placement is None:
            return {
                "declined": self.declined[(t, j)],
                "plan_seconds": float(self.plan_seconds[t, j]),
            }
        return {
            "placement": list(placement.devices),  # of the shards when `splits` is not empty
            "splits": [asdict(s) for s in placement.splits],
            "method": placement.method,
            "candidate": placement.candidate,
            "memory_bytes": device_memory(self.tasks[t], placement).tolist(),
            "costs_ms": self.costs[:, t, j].tolist(),
            "devices": self.breakdowns[t][j],
            "plan_seconds": float(self.plan_seconds[t, j]),
        }

    def csv_rows(self) -> list[list]:
        """One row per measurement: task, planner, round, overall ms (declined: none)."""
        return [
            [task.name, planner, r, self.costs[r, t, j]]
            for t, task in enumerate(self.tasks)
            for j, planner in enumerate(self.planners)
            if self.placements[t][j] is not None
            for r in range(self.costs.shape[0])
        ]

    @classmethod
    def from_dict(cls, data: dict) -> Evaluation:
        """An evaluation back from `to_dict`'s JSON (older files lack `costs_made`, `method`,
        `splits`)."""
        planners = list(data["planners"])
        tasks, placements, breakdowns, declined = [], [], [], {}
        measured = [r for t in data["tasks"] for r in t["results"].values() if "costs_ms" in r]
        rounds = max((len(r["costs_ms"]) for r in measured), default=0)
        costs = np.full((rounds, len(data["tasks"]), len(planners)), np.nan)
        seconds = np.zeros((len(data["tasks"]), len(planners)))
        for t, item in enumerate(data["tasks"]):
            where = f"evaluation task {item['name']}"
            tables = tuple(table_from_record(record, where) for record in item["tables"])
            tasks.append(
                PlacementTask(
                    tables,
                    int(item["num_devices"]),
                    int(item["memory_cap_bytes"]),
                    item["precision"],
                    item["name"],
                )
            )
            row, parts = [], []
            for j, planner in enumerate(planners):
                result = item["results"][planner]
                seconds[t, j] = result.get("plan_seconds", 0.0)
                if "declined" in result:
                    row.append(None)
                    parts.append([])
                    declined[(t, j)] = result["declined"]
                    continue
                method = result.get("method", planner)
                devices = tuple(int(d) for d in result["placement"])
                splits = tuple(Split(**s) for s in result.get("splits", []))
                row.append(Placement(devices, method, result.get("candidate", ""), splits))
                parts.append(result["devices"])
                costs[:, t, j] = result["costs_ms"]
            placements.append(row)
            breakdowns.append(parts)
        return cls(
            tasks,
            planners,
            placements,
            costs,
            breakdowns,
            seconds,
            data["backend"],
            declined,
            data.get("costs_made", ""),
        )


def candidate_kind(candidate: str) -> str:
    """A winner's source for counting: "policy", "costnet greedy", a heuristic's name, each
    with " + search" when the planner's final search improved it ("policy greedy + 3 search
    steps" -> "policy + search"); "search" for `dreamshard_search`'s own results."""
    kind = candidate.split(";")[0]
    if kind[:1].isdigit():  # "12 search steps from ...": dreamshard_search's multi-start
        return "search"
    source, _, searched = kind.partition(" + ")
    source = source.removeprefix("heuristic ")
    source = "policy" if source.startswith("policy") else source
    return f"{source} + search" if "search steps" in searched else source
