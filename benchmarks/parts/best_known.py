"""The best known placement of a task: every planner's placement screened, then measured search.

`BestKnown` is the `best_known` arm of `benchmarks/planners.py`. The search starts from
`search_analytic`'s placement (local search on the calibrated analytic model, which already
finds most of the room on real kernels) and from the cheapest placement of the screening, when
that is another; the budget is shared between the starts. The search's own measurements never
enter a ratio (the winner's curse): its result is measured again, with everything else, in the
study's interleaved rounds (the best known reference is the cheapest plan there).
"""

from __future__ import annotations

import numpy as np

from dreamshard.learn.model_file import DreamShardModel
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.planners.dreamshard_planner import costnet_scorer
from dreamshard.planners.search import local_search
from dreamshard.progress import Progress

SEARCH_BATCH = 64  # neighbours ranked by the cost network per batch ...
SEARCH_SHORTLIST = 2  # ... of which this many are measured
BEST_KNOWN = "best_known"
STARTS = ("search_analytic",)  # planners whose placement the search always starts from


class BestKnown:
    """The best known placement of a task: screen the others' placements, then measured search.

    `recorded(name, planner)` wraps every other planner so its placements are kept (it may
    return `(placement, figures)`, as a study's arm does); the study plans a task with all of
    them in order, this one last, so they are all there. `log` receives one entry per task
    (what was screened, searched and found).
    """

    def __init__(
        self, backend, model: DreamShardModel, budget: int, seed: int, log: dict | None = None
    ):
        self.backend, self.model, self.budget, self.seed = backend, model, budget, seed
        self.proposals: dict[str, dict[str, Placement]] = {}
        self.log: dict[str, dict] = {} if log is None else log

    def recorded(self, name: str, planner):
        def plan(task: PlacementTask, seed: int):
            found = planner(task, seed)
            placement = found[0] if isinstance(found, tuple) else found
            if not placement.splits:  # the search moves whole tables: split plans start none
                self.proposals.setdefault(task.name, {})[name] = placement
            return found

        return plan

    def __call__(self, task: PlacementTask, seed: int = 0) -> Placement:
        proposals = self.proposals[task.name]
        unique = {p.devices: name for name, p in reversed(proposals.items())}  # first name wins
        progress = Progress(len(unique) + self.budget, f"best known {task.name}")
        known: dict[tuple[int, ...], float] = {}
        rng = np.random.default_rng(self.seed)
        for i in rng.permutation(len(unique)):
            devices = list(unique)[i]
            known[devices] = self.backend.measure(task, Placement(devices)).overall
            progress.step(f"screening {unique[devices]}: {known[devices]:.2f} ms")
        names = {proposals[name].devices: name for name in STARTS if name in proposals}
        cheapest = min(known, key=known.__getitem__)
        names.setdefault(cheapest, unique[cheapest])
        starts = list(names)
        predict = costnet_scorer(self.model, task)
        searches = []
        for k, start in enumerate(starts):
            share = self.budget // len(starts) + (k < self.budget % len(starts))
            scorer = MeasuredScorer(self.backend, task, predict, known, share, progress)
            found = local_search(task, Placement(start), scorer, seed=self.seed, batch=SEARCH_BATCH)
            searches.append((found, start, scorer.used))
        progress.close()
        found, start, _ = min(searches, key=lambda s: s[0].cost)
        self.log[task.name] = {
            "start": names[start],
            "start_ms": known[start],
            "starts": ", ".join(names.values()),
            "steps": found.steps,
            "measured": sum(used for _, _, used in searches),
            "search_ms": found.cost,
            "screened": len(unique),
        }
        return Placement(
            found.placement.devices,
            BEST_KNOWN,
            f"{found.steps} measured search steps from {names[start]}'s placement",
        )


class MeasuredScorer:
    """A `local_search` scorer: real measurements, at most `budget`, on the cost network's picks.

    Of each batch, the `SEARCH_SHORTLIST` placements with the lowest predicted cost are measured
    (once each: `known` remembers); the rest score infinity, so only measured ones are accepted.
    """

    def __init__(self, backend, task, predict, known: dict, budget: int, progress: Progress):
        self.backend, self.task, self.predict, self.known = backend, task, predict, known
        self.budget, self.progress, self.used = budget, progress, 0

    def __call__(self, placements: list[Placement]) -> list[float]:
        costs = [self.known.get(p.devices, float("inf")) for p in placements]
        if self.used >= self.budget:
            return costs
        fresh = [i for i, p in enumerate(placements) if p.devices not in self.known]
        predicted = self.predict([placements[i] for i in fresh]) if fresh else []
        for k in np.argsort(predicted, kind="stable")[:SEARCH_SHORTLIST]:
            if self.used >= self.budget:
                break
            i = fresh[int(k)]
            costs[i] = self.backend.measure(self.task, placements[i]).overall
            self.known[placements[i].devices] = costs[i]
            self.used += 1
            best = min(self.known.values())
            self.progress.step(f"search: {costs[i]:.2f} ms (best so far {best:.2f})")
        return costs
