"""The `dreamshard` planner: the trained policy, greedy, plus a cheap best-of-k refinement.

The paper places with the policy's argmax. Here the argmax placement competes with `samples`
sampled placements and the heuristics' placements, all scored by the cost network; the one
with the lowest predicted overall cost wins. No hardware is touched, and the answer is always
legal (the heuristics' placements are legal whenever the task is feasible).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import torch

from dreamshard.learn.costnet import make_batch
from dreamshard.learn.model_file import DreamShardModel
from dreamshard.learn.policy import fast_rollout
from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place
from dreamshard.placement.tasks import Placement, PlacementTask, is_legal
from dreamshard.tables.features import feature_matrix


@torch.no_grad()
def predicted_overall(model: DreamShardModel, task: PlacementTask, placements) -> list[float]:
    features = feature_matrix(task.tables)
    batch = make_batch([(features, p.devices, task.num_devices) for p in placements])
    _, overall = model.costnet(batch)
    return (overall * model.costnet.scale).tolist()


@contextmanager
def one_thread() -> Iterator[None]:
    """torch on one intra-op thread, then back to what it was. Placing runs thousands of tiny
    ops, which more threads only slow down: 2 threads on 2 busy cores made it 20x slower."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@torch.no_grad()
@one_thread()
def dreamshard_place(
    task: PlacementTask, model: DreamShardModel, samples: int = 8, seed: int = 0
) -> Placement:
    """The policy's greedy placement, improved by best-of-`samples` and the heuristics.

    The winner says where it came from in `candidate`: "policy greedy", "policy sample K", or
    "heuristic NAME". A heuristic's placement keeps that heuristic's name as its `method`, so
    no report credits the policy with it.
    """
    # the greedy episode and the sampled ones side by side, in one pass over the tables
    generator = torch.Generator().manual_seed(seed)
    episodes = fast_rollout(model.policy, task, model.costnet, 1, samples, generator)
    candidates = [
        replace(episodes.placement(e, "dreamshard"), candidate=episode_name(e))
        for e in range(1 + samples)
        if episodes.legal[e]
    ]
    if samples > 0 or not candidates:  # with samples=0 they only stand in for a stuck policy
        for key in HEURISTIC_KEYS:  # raises the infeasibility error when no placement exists
            candidates.append(replace(greedy_place(task, key), candidate=f"heuristic {key}"))
    candidates = [c for c in candidates if is_legal(task, c)]
    scores = predicted_overall(model, task, candidates)
    return candidates[min(range(len(candidates)), key=scores.__getitem__)]


def episode_name(episode: int) -> str:
    """Episode 0 of a rollout is the greedy one; 1.. are the samples."""
    return "policy greedy" if episode == 0 else f"policy sample {episode}"
