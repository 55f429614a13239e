"""Planners plan for the hosts they are told of: the analytic search, the learned planner's
exchange model, TorchRec's `Topology` both ways, and `place --topology --hosts`."""

from __future__ import annotations

import pytest
import torch
from conftest import error_line, generated_tables, place_command

from dreamshard.costs.comm import get_topology
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.errors import DreamshardError
from dreamshard.learn.costnet import CostNet
from dreamshard.learn.model_file import DreamShardModel
from dreamshard.learn.policy import PlacementPolicy
from dreamshard.placement.planner import PlanOptions
from dreamshard.placement.registry import place
from dreamshard.placement.tasks import GIB, PlacementTask
from dreamshard.planners.dreamshard_planner import DREAMSHARD
from dreamshard.tables.synthetic import generate_tables

SLOW = "per-host=4,intra=150,inter=0.05"  # 2 hosts of 4 GPUs on a slow network


def hosts_task() -> PlacementTask:
    return PlacementTask(tuple(generate_tables("dlrm", 32, 3)), 8, 8 * GIB)


def test_search_analytic_plans_for_the_hosts_it_is_given():
    """Judged on the slow network, the plan made for it beats the plan made for one host."""
    task, judge = hosts_task(), SimulatedBackend(topology=SLOW)
    told = place(task, "search_analytic", split="none", time_budget=3, topology=SLOW)
    untold = place(task, "search_analytic", split="none", time_budget=3)
    assert judge.measure(task, told).overall < judge.measure(task, untold).overall


def test_the_learned_planner_predicts_and_plans_on_the_topology_it_is_given():
    torch.manual_seed(0)
    costnet = CostNet(comm={"topology": "cpu-gloo", "batch": 2048})
    model = DreamShardModel(costnet, PlacementPolicy(lookahead=True))
    task = hosts_task()
    flat = PlanOptions(model=model, split="none", time_budget=3)
    hosts = PlanOptions(model=model, split="none", time_budget=3, topology=SLOW)
    told, untold = DREAMSHARD.place(task, hosts), DREAMSHARD.place(task, flat)
    # the same placement costs more when half the exchange crosses a slow network
    assert DREAMSHARD.predict(task, untold, hosts) > DREAMSHARD.predict(task, untold, flat)
    # and the plan made for the hosts is no dearer there, by its own network
    assert DREAMSHARD.predict(task, told, hosts) <= DREAMSHARD.predict(task, untold, hosts)
    assert model.costnet.comm["topology"] == "cpu-gloo"  # the caller's model is left alone
    learned = DreamShardModel(CostNet(comm=None), PlacementPolicy())
    with pytest.raises(DreamshardError, match="learned its communication"):
        DREAMSHARD.place(task, PlanOptions(model=learned, split="none", topology=SLOW))


def test_torchrec_gets_our_hosts_and_gives_them_back():
    """Our topology into TorchRec's `Topology` (its planner's hosts and bandwidths) and back
    (what `DreamShardPlanner` reads from a TorchRec user's topology)."""
    pytest.importorskip("torchrec")
    from dreamshard.integrations.dmp_planner import links_of
    from dreamshard.integrations.torchrec_planner import torchrec_request

    request = torchrec_request(hosts_task(), topology="nvlink-rdma:4")
    assert request.topology.local_world_size == 4
    assert request.topology.comms_bandwidths.inter_host_bw == pytest.approx(40e9 / 1000)
    back = get_topology(links_of(request.topology))
    assert (back.devices_per_host, back.bandwidth_gbps, back.network_gbps) == (4, 150, 40)
    assert links_of(torchrec_request(hosts_task(), topology="nvlink").topology) is None


def test_place_plans_for_hosts_and_refuses_a_bad_topology(cli, tmp_path):
    tables = generated_tables(tmp_path / "t.json", 40)
    done = cli(*place_command(tables, 16, 1, "--topology", "nvlink-rdma", "--hosts", "2"))
    assert done.returncode == 0, done.stderr
    assert "topology nvlink-rdma:8" in done.stdout
    uneven = error_line(
        cli(*place_command(tables, 16, 1, "--topology", "torchrec", "--hosts", "3"))
    )
    assert "16 devices do not divide evenly over 3 hosts" in uneven
    zero = cli(*place_command(tables, 16, 1, "--topology", "per-host=8,intra=1,inter=0"))
    assert zero.returncode == 2 and "Traceback" not in zero.stderr
    assert "bandwidths must be above 0" in zero.stderr
