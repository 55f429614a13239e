"""Hardware files: the shipped ones, bad ones refused in one line, the GPU roofline's behaviour,
which file a command uses and what overrides it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from dreamshard.costs.hardware import (
    CONSTANTS,
    known_hardware,
    load_hardware,
    match_gpu,
)
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.errors import DreamshardError
from dreamshard.placement.tasks import GIB, Placement, PlacementTask
from dreamshard.tables.table import Table
from tests.conftest import error_line, generated_tables

GPUS = ("a100-80gb", "h100-sxm", "h200", "generic-gpu")


def test_the_shipped_files_name_a_source_for_every_constant_and_write_their_envelope():
    assert set(GPUS) | {"cpu"} <= set(known_hardware())
    for name in GPUS:
        hardware = load_hardware(name)
        assert hardware.is_gpu and set(hardware.constants) == set(CONSTANTS)
        for key, constant in hardware.constants.items():
            assert len(constant.source) > 20, (name, key)
            assert constant.low <= constant.central <= constant.high
        corners = hardware.corners()
        assert len(corners) == 16 and len({tuple(c.values()) for c in corners}) == 16
        assert {c["bwd_fwd_ratio"] for c in corners} == {2.0, 5.0}
        assert {c["hbm_efficiency"] for c in corners} == {0.45, 0.90}
        assert {c["call_floor_ms"] for c in corners} == {0.005, 0.3}
        assert {round(c["inter_gbps"], 2) for c in corners} == {13.42, 50.0}
    cpu = load_hardware("cpu")
    assert not cpu.is_gpu and cpu.topology_name() == "cpu-gloo"
    assert SimulatedBackend(hardware="cpu").config() == SimulatedBackend().config()


@pytest.mark.parametrize(
    "device, expected",
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA H200", "h200"),
        ("Tesla T4", "generic-gpu"),
    ],
)
def test_a_cuda_device_name_picks_its_file_and_says_which(device, expected):
    hardware, said = match_gpu(device)
    assert hardware.name == expected and expected in said and device in said
    assert ("no hardware file matches" in said) == (expected == "generic-gpu")


def hardware_file(tmp_path: Path, edit) -> Path:
    data = json.loads(known_file("h100-sxm").read_text())
    edit(data)
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data))
    return path


def known_file(name: str) -> Path:
    from dreamshard.costs.hardware import FOLDER

    return FOLDER / f"{name}.json"


def constant(key: str, field: str, value):
    return lambda data: data["constants"][key].__setitem__(field, value)


BAD_FILES = {
    "unknown-key": (lambda data: data.__setitem__("colour", "green"), "unknown key 'colour'"),
    "unknown-constant": (
        lambda data: data["constants"].__setitem__("tflops", data["constants"]["l2_bytes"]),
        "unknown key 'tflops'",
    ),
    "missing-constant": (
        lambda data: data["constants"].pop("hbm_spec_gbps"),
        "missing constant hbm_spec_gbps",
    ),
    "non-positive": (constant("call_floor_ms", "low", 0), "low must be a number above 0"),
    "not-a-number": (constant("l2_gbps", "central", "fast"), "central must be a number"),
    "out-of-order": (constant("bwd_fwd_ratio", "central", 9.0), "out of order"),
    "no-source": (constant("l2_bytes", "source", " "), "the source is empty"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_hardware_file_is_refused_naming_the_problem(tmp_path, case):
    edit, message = BAD_FILES[case]
    with pytest.raises(DreamshardError, match=re.escape(message)) as refused:
        load_hardware(hardware_file(tmp_path, edit))
    assert "\n" not in str(refused.value) and "mine.json" in str(refused.value)


def test_bad_files_names_and_judge_options_are_one_line_and_write_nothing(cli, tmp_path):
    tables = generated_tables(tmp_path / "tables.json", 6)
    plan = tmp_path / "plan.json"
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    out_of_order = hardware_file(tmp_path, BAD_FILES["out-of-order"][0])
    for spec, message in (
        ("tpu-v9", "unknown hardware 'tpu-v9'"),
        (str(broken), "not readable"),
        (str(out_of_order), "out of order"),
    ):
        words = ["place", "--tables", str(tables), "--devices", "2", "--out", str(plan)]
        result = cli(*words, "--hardware", spec)
        assert result.returncode == 2 and message in result.stderr
        assert "Traceback" not in result.stderr and not plan.exists()
        assert len(result.stderr.strip().splitlines()) == 1
    placed = cli(
        "place", "--tables", str(tables), "--devices", "2", "--mem-gb", "1", "--out", str(plan)
    )
    assert placed.returncode == 0, placed.stderr
    measure = ["measure", "--tables", str(tables), "--plan", str(plan)]
    line = error_line(cli(*measure, "--backend", "fbgemm", "--hardware", "h100-sxm"))
    assert "times this host" in line
    line = error_line(cli(*measure, "--backend", "torchrec-estimator", "--iterations", "3"))
    assert "times nothing; drop --iterations" in line
    line = error_line(cli(*measure, "--backend", "torchrec-estimator", "--hardware", "cpu"))
    assert "models GPUs" in line


def roofline_cost(tables, hardware="h100-sxm", devices=None, precision="fp16") -> float:
    devices = devices or (0,) * len(tables)
    task = PlacementTask(tuple(tables), max(devices) + 1, 80 * GIB, precision=precision)
    return SimulatedBackend(hardware=hardware).measure(task, Placement(tuple(devices))).overall


def test_the_roofline_prices_reuse_fusion_and_the_hardware():
    hot = Table("hot", 10_000_000, 128, 50.0, histogram=tuple([0.0] * 16 + [1.0]))
    cold = Table("cold", 10_000_000, 128, 50.0, histogram=tuple([1.0] + [0.0] * 16))
    # the same lookups on a few hot rows come from the L2, on rows read once each from HBM
    assert roofline_cost([hot]) < 0.9 * roofline_cost([cold])
    h100 = load_hardware("h100-sxm")
    fast, slow = h100.at({"l2_gbps": 7796.0}), h100.at({"l2_gbps": 2271.0})
    assert roofline_cost([hot], fast) < 0.8 * roofline_cost([hot], slow)
    assert roofline_cost([cold], fast) == pytest.approx(roofline_cost([cold], slow))
    # one fused call pays the floor once: two small tables together cost less than apart
    small = [Table(f"s{i}", 1000, 16, 2.0) for i in range(2)]
    assert roofline_cost(small) < 2 * roofline_cost(small[:1])
    heavy = Table("heavy", 10_000_000, 512, 500.0, histogram=cold.histogram)
    slow = h100.at({"hbm_efficiency": 0.45})
    assert roofline_cost([heavy], slow) > 1.5 * roofline_cost(
        [heavy], h100.at({"hbm_efficiency": 0.9})
    )
    assert roofline_cost([heavy], "h200") < roofline_cost([heavy], "a100-80gb")


def test_a_narrow_row_costs_a_whole_memory_transaction():
    h100 = load_hardware("h100-sxm")
    cold = tuple([1.0] + [0.0] * 16)  # every lookup a row of its own, from HBM
    narrow, wide = (Table(f"d{d}", 20_000_000, d, 500.0, histogram=cold) for d in (4, 32))
    fwd = {t.dim: roofline_cost([t], h100) for t in (narrow, wide)}
    # at fp16 a 4-dim and a 32-dim row both cost the file's 64 bytes a read; only their
    # pooled outputs (4 bytes a dim) differ, a sliver of the lookups' bytes
    assert fwd[4] == pytest.approx(fwd[32], rel=0.05)
    at_sector = h100.at({"row_bytes_min": 32.0})
    assert roofline_cost([narrow], at_sector) < 0.8 * fwd[4]
    assert roofline_cost([wide], at_sector) == pytest.approx(fwd[32])


def test_place_plans_for_the_file_and_the_flags_override_it(cli, tmp_path):
    tables = generated_tables(tmp_path / "tables.json", 16)
    plan = tmp_path / "plan.json"
    base = ["place", "--tables", str(tables), "--devices", "16", "--out", str(plan)]
    result = cli(*base, "--hardware", "h100-sxm")
    assert result.returncode == 0, result.stderr
    h100 = load_hardware("h100-sxm")
    assert "hardware: h100-sxm" in result.stdout and h100.topology_name() in result.stdout
    data = json.loads(plan.read_text())
    assert data["hardware"] == {"name": "h100-sxm", "sha256": h100.sha256}
    assert data["memory_cap_bytes"] == int(h100.value("memory_bytes") / GIB * GIB)
    measured = cli(
        "measure", "--tables", str(tables), "--plan", str(plan), "--backend", "simulated"
    )
    assert "roofline" in measured.stdout and "hardware h100-sxm" in measured.stdout
    result = cli(*base, "--hardware", "h100-sxm", "--topology", "nvlink", "--mem-gb", "2")
    assert result.returncode == 0, result.stderr
    assert "topology nvlink)" in result.stdout
    assert json.loads(plan.read_text())["memory_cap_bytes"] == 2 * GIB
    # check judges for the file the plan records; another version of it asks for --hardware
    checked = cli("check", "--tables", str(tables), "--plan", str(plan), "--no-compare")
    assert "GPU kernel roofline of the h100-sxm" in checked.stdout, checked.stderr
    data = json.loads(plan.read_text())
    data["hardware"]["sha256"] = "0" * 64
    plan.write_text(json.dumps(data))
    line = error_line(cli("check", "--tables", str(tables), "--plan", str(plan), "--no-compare"))
    assert "another version of the h100-sxm hardware file" in line
    result = cli("place", "--tables", str(tables), "--devices", "16")
    assert "--mem-gb" in error_line(result)  # cpu states no memory


def test_dreamshard_planner_takes_the_users_topology_over_the_file():
    pytest.importorskip("torchrec")
    from torchrec.distributed.planner import Topology

    from dreamshard.costs.comm import get_topology
    from dreamshard.integrations.dmp_planner import planner_links

    h100 = load_hardware("h100-sxm")
    default = planner_links(
        Topology(world_size=32, compute_device="cuda", local_world_size=8), h100
    )
    links = get_topology(default)
    assert links.devices_per_host == 8
    assert np.isclose(links.bandwidth_gbps, h100.value("intra_gbps"))
    assert np.isclose(links.network_gbps, h100.value("inter_gbps"))
    user = Topology(
        world_size=32, compute_device="cuda", local_world_size=4, inter_host_bw=5e9 / 1000
    )
    links = get_topology(planner_links(user, h100))
    assert links.devices_per_host == 4 and np.isclose(links.network_gbps, 5.0)
    assert np.isclose(links.bandwidth_gbps, h100.value("intra_gbps"))
    cpu_links = planner_links(Topology(world_size=4, compute_device="cuda"), load_hardware("cpu"))
    assert cpu_links is None  # cpu on one host: the planner's own exchange model, as before
