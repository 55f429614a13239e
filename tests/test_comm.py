import numpy as np
import pytest

from dreamshard.costs.comm import get_topology, modeled_comm, transfer_ms
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
