"""The device-level search scores exactly what the cost models say, and only improves."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from dreamshard.costs.hardware import load_hardware
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.learn.costnet import CostNet
from dreamshard.learn.model_file import DreamShardModel
from dreamshard.learn.policy import PlacementPolicy
from dreamshard.learn.train_config import COSTNET_ENCODERS
from dreamshard.placement.heuristics import random_place
from dreamshard.placement.suites import make_suite
from dreamshard.placement.tasks import is_legal
from dreamshard.planners.device_search import (
    analytic_model,
    blended_model,
    costnet_model,
    device_search,
)
from dreamshard.planners.dreamshard_planner import costnet_scorer
from dreamshard.planners.search import apply_neighbours, legal_neighbours

TASKS = [make_suite("cpu-16x3").test_tasks[0], make_suite("cpu-50x4").test_tasks[1]]


def untrained(comm: dict | None, seed: int, encoder: str = "relu") -> DreamShardModel:
    torch.manual_seed(seed)
    costnet = CostNet(comm=comm, encoder=encoder)
    costnet.scale.fill_(2.5)
    return DreamShardModel(costnet, PlacementPolicy())


HOSTS = "per-host=2,intra=0.7,inter=0.05"  # the 4-device task on 2 hosts (the 3-device on one)


@pytest.mark.parametrize("topology", ["cpu-gloo", HOSTS])
@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_the_analytic_model_is_the_simulated_backend(task, topology):
    """On one host and across hosts of 2."""
    if task.num_devices % 2:
        topology = "per-host=3,intra=0.7,inter=0.05"
    backend = SimulatedBackend(topology=topology)
    model = analytic_model(task, backend)
    placements = [random_place(task, seed) for seed in range(6)]
    exact = backend.overall_many(task, placements)
    ours = [model.cost(task, np.array(p.devices)) for p in placements]
    assert ours == pytest.approx(exact.tolist(), rel=1e-9)
    found, cost, steps = device_search(task, placements[0], model)
    assert is_legal(task, found)
    assert cost == pytest.approx(backend.measure(task, found).overall, rel=1e-9)
    assert steps > 0 and cost < exact[0]


@pytest.mark.parametrize("devices", [4, 32], ids=["one-host", "hosts"])
def test_a_blend_of_views_is_their_weighted_sum(devices):
    """One hardware file's centre and corners (hosts of 8): the blended model's exchange, its
    bytes worked out once, is each view's own weighted (`blended_model`)."""
    hardware = load_hardware("h100-sxm")
    points = [hardware, *(hardware.at(c) for c in hardware.corners()[::6])]
    views = [SimulatedBackend(hardware=point) for point in points]
    task = replace(TASKS[1], num_devices=devices)
    weights = [0.5, 1.5, 0.25, 2.0]
    assert len(views) == len(weights)
    blend = blended_model(task, views, weights)
    alone = [analytic_model(task, view) for view in views]
    rng = np.random.default_rng(0)
    widths = rng.uniform(0, 400, size=(6, devices))
    host = widths + rng.uniform(0, 2000, size=(6, devices))
    expected = sum(w * model.transfer(widths, host) for w, model in zip(weights, alone))
    assert blend.transfer(widths, host) == pytest.approx(expected, rel=1e-12)
    sums = rng.uniform(0, 50, size=(6, alone[0].vectors.shape[1]))
    expected = sum(w * model.terms(sums)[0] for w, model in zip(weights, alone))
    assert blend.terms(sums)[0] == pytest.approx(expected, rel=1e-12)
    if devices > 8:  # across hosts the corners' links differ
        assert len({float(m.transfer(widths, host)[0, 0]) for m in alone}) > 1


@pytest.mark.parametrize("encoder", COSTNET_ENCODERS)
@pytest.mark.parametrize(
    "comm",
    [
        None,
        {"topology": "cpu-gloo", "batch": 2048},
        {"topology": HOSTS, "batch": 2048},
    ],
    ids=["learned", "one-host", "hosts"],
)
@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_the_costnet_model_is_the_cost_network(task, comm, encoder):
    """Learned or modeled communication alike: the same numbers as the network's own scorer,
    and a search that ends at a legal placement no worse than where it began, where no move
    and no swap at all (not only those touching a critical device) is cheaper."""
    if comm and comm["topology"] == HOSTS and task.num_devices % 2:
        comm = {**comm, "topology": "per-host=1,intra=0.7,inter=0.05"}  # 3 hosts of 1
    model = untrained(comm, seed=len(task.tables), encoder=encoder)
    placements = [random_place(task, seed) for seed in range(6)]
    scorer = costnet_scorer(model, task)
    reference = np.array(scorer(placements)) / 2.5
    searched = costnet_model(model.costnet, task)
    ours = [searched.cost(task, np.array(p.devices)) for p in placements]
    assert ours == pytest.approx(reference.tolist(), rel=1e-4, abs=1e-6)
    found, cost, _ = device_search(task, placements[0], searched)
    assert is_legal(task, found)
    assert cost * 2.5 == pytest.approx(scorer([found])[0], rel=1e-4, abs=1e-5)
    assert cost <= ours[0] + 1e-9
    neighbours = apply_neighbours(
        np.array(found.devices), legal_neighbours(task, np.array(found.devices))
    )
    assert min(scorer(neighbours)) >= cost * 2.5 - 1e-4 * abs(cost * 2.5) - 1e-6


def test_the_search_scores_its_neighbours_in_chunks_alike(monkeypatch):
    # the neighbours are scored in chunks to bound memory at 10,000 tables on 1,024 devices;
    # the steps, the answer and its cost do not depend on the chunk's size
    task = TASKS[1]
    start = random_place(task, np.random.default_rng(0))
    model = analytic_model(task, SimulatedBackend(topology=HOSTS))
    whole = device_search(task, start, model)
    monkeypatch.setattr("dreamshard.planners.device_search.SCORE_CHUNK", 7)
    chunked = device_search(task, start, model)
    assert whole[2] > 0 and chunked == whole


def test_a_first_improving_search_stops_where_no_neighbour_is_better():
    # taking the first chunk's best better neighbour, not the best of all, it still ends at a
    # placement none of the neighbours betters (the same local optimum test as a full search)
    task = replace(make_suite("cpu-50x4").test_tasks[2], num_devices=8)
    start = random_place(task, np.random.default_rng(1))
    model = analytic_model(task, SimulatedBackend(topology=HOSTS))
    found, cost, steps = device_search(task, start, model, first_improving=16)
    assert steps > 0 and is_legal(task, found)
    assert cost == pytest.approx(model.cost(task, np.array(found.devices)))
    assert cost < model.cost(task, np.array(start.devices))
    _, after, more = device_search(task, found, model)
    assert more == 0 and after == pytest.approx(cost)
