import numpy as np
import pytest

from dreamshard.costs.comm import get_topology, hosts_topology, modeled_comm, transfer_ms
from dreamshard.errors import DreamshardError


def test_one_device_exchanges_nothing():
    fwd, bwd = modeled_comm(np.array([64]), np.array([5.0]), 2048, get_topology("nvlink"))
    assert fwd.tolist() == [0.0] and bwd.tolist() == [0.0]


def test_transfer_grows_with_width_and_batch():
    topo = get_topology("pcie")
    narrow = transfer_ms(np.array([64, 64]), 4096, topo)
    wide = transfer_ms(np.array([512, 64]), 4096, topo)
    assert wide[0] > narrow[0]
    assert (transfer_ms(np.array([64, 64]), 8192, topo) > narrow).all()


def test_forward_comm_absorbs_the_wait_for_the_slowest_device():
    topo = get_topology("cpu-gloo")
    widths, fwd_comp = np.array([64, 64, 64]), np.array([10.0, 4.0, 7.0])
    fwd_comm, bwd_comm = modeled_comm(widths, fwd_comp, 2048, topo)
    # equal widths: every device finishes its forward all-to-all at the same moment
    assert np.allclose(fwd_comp + fwd_comm, fwd_comp.max() + bwd_comm)
    assert (bwd_comm > 0).all()


def test_topology_presets_order_by_speed_and_unknown_names_are_refused():
    # the same exchange is quickest on NVLink and slowest between gloo processes on a CPU
    widths = np.array([256, 64, 128, 32])
    names = ["nvlink", "pcie", "network", "cpu-gloo"]
    times = [transfer_ms(widths, 4096, get_topology(name)) for name in names]
    for faster, slower in zip(times, times[1:]):
        assert (faster < slower).all()
    with pytest.raises(DreamshardError, match="unknown topology"):
        get_topology("carrier-pigeon")


def test_a_topology_whose_hosts_hold_every_device_is_the_flat_model():
    widths = np.array([256, 64, 128, 32, 8, 96, 16, 200])
    flat = transfer_ms(widths, 4096, get_topology("nvlink"))
    for name in ("nvlink-rdma", "nvlink-rdma:16", "per-host=8,intra=150,inter=1,latency=0.015"):
        assert transfer_ms(widths, 4096, get_topology(name)) == pytest.approx(flat, rel=1e-12)


def test_traffic_inside_a_host_costs_less_than_across_hosts():
    """Two hosts of 2: a device whose wide peer shares its host waits less than one whose wide
    peer sits on the other host; the wide device itself sends across the network either way."""
    topology = get_topology("pcie-ethernet:2")
    at_home = transfer_ms(np.array([64, 512, 0, 0]), 4096, topology)
    abroad = transfer_ms(np.array([64, 0, 512, 0]), 4096, topology)
    assert at_home[0] < abroad[0]
    assert at_home.max() == pytest.approx(abroad.max())
    one_host = transfer_ms(np.array([64, 0, 512, 0]), 4096, get_topology("pcie"))
    assert abroad.max() > one_host.max()


def test_hosts_split_the_devices_evenly_and_bad_topologies_are_refused():
    assert hosts_topology("nvlink-rdma", 16, 128) == "nvlink-rdma:8"
    assert hosts_topology("per-host=8,intra=150,inter=40", 4, 16) == (
        "per-host=4,intra=150,inter=40"
    )
    assert get_topology(hosts_topology("torchrec", 4, 64)).host_size(64) == 16
    refused = {
        "devices do not divide": lambda: hosts_topology("nvlink-rdma", 3, 128),
        "is one host": lambda: hosts_topology("nvlink", 2, 16),
        "bandwidths must be above 0": lambda: get_topology("per-host=8,intra=150,inter=0"),
        "lacks inter": lambda: get_topology("per-host=8,intra=150"),
        "unknown key": lambda: get_topology("per-host=8,intra=1,inter=1,speed=3"),
        "whole number": lambda: get_topology("nvlink-rdma:0"),
        "has no devices per host": lambda: get_topology("pcie:4"),
    }
    for message, make in refused.items():
        with pytest.raises(DreamshardError, match=message):
            make()
