"""`dreamshard measure`, `collect` and `calibrate` through the real console script."""

import json
import subprocess

import pytest

from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.costs.types import COST_TERMS
from dreamshard.placement.plan_file import placement_from_plan, read_plan
from dreamshard.placement.tasks import PlacementTask
from dreamshard.tables.sources import load_tables
from tests.conftest import error_line, generated_tables, place_command


@pytest.fixture
def plan(cli, tmp_path):
    tables = generated_tables(tmp_path / "tables.json", 8)
    plan = tmp_path / "plan.json"
    fp32_whole = ["--precision", "fp32", "--split", "none", "--out", str(plan)]
    result = cli(*place_command(tables, 2, 4, *fp32_whole))
    assert result.returncode == 0, result.stderr
    return tables, plan


def measure_edited(cli, plan, edit) -> subprocess.CompletedProcess:
    """`dreamshard measure` of the plan file once `edit` has changed its JSON."""
    tables, plan_path = plan
    data = json.loads(plan_path.read_text())
    edit(data)
    plan_path.write_text(json.dumps(data))
    return cli("measure", "--tables", str(tables), "--plan", str(plan_path))


def test_measure_prints_the_breakdown(cli, plan):
    tables, plan_path = plan
    result = cli("measure", "--tables", str(tables), "--plan", str(plan_path), "--iterations", "3")
    assert result.returncode == 0, result.stderr
    for word in ("fwd_comp", "fwd_comm", "bwd_comm", "bwd_comp", "overall cost", "fbgemm"):
        assert word in result.stdout
    as_json = cli(
        "measure",
        "--tables",
        str(tables),
        "--plan",
        str(plan_path),
        "--json",
        "--backend",
        "simulated",
    )
    data = json.loads(as_json.stdout)
    # the command measures the plan it was given: the same numbers as the backend in process
    plan = read_plan(plan_path)
    task = PlacementTask(tuple(load_tables(str(tables))), 2, plan.memory_cap_bytes, "fp32")
    expected = SimulatedBackend().measure(task, placement_from_plan(task, plan))
    assert data["backend"] == "simulated"
    assert data["overall"] == pytest.approx(expected.overall)
    for device, cost in zip(data["devices"], expected.devices, strict=True):
        assert [device[t] for t in COST_TERMS] == pytest.approx(list(cost.terms()))
    simulated = cli(
        "measure", "--tables", str(tables), "--plan", str(plan_path), "--backend", "simulated"
    )
    assert "simulated: an analytic model" in simulated.stdout


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda p: p["placement"].update({"ghost": 0}), "unknown table ghost"),
        (lambda p: p["placement"].pop("t0000"), "misses table t0000"),
        (lambda p: p["placement"].update({"t0001": 5}), "outside 0..1"),
        (lambda p: p.update({"memory_cap_bytes": 1000}), "over its cap"),
    ],
)
def test_bad_plans_are_refused_before_measuring(cli, plan, edit, words):
    result = measure_edited(cli, plan, edit)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "edit, problem",
    [
        (lambda p: p.pop("num_devices"), "num_devices is missing"),
        (lambda p: p.update(num_devices="two"), "num_devices 'two' is not an integer"),
        (lambda p: p.update(memory_cap_bytes=-5), "memory_cap_bytes must be positive, got -5"),
        (lambda p: p.update(precision="int8"), "precision must be 'fp32' or 'fp16', got 'int8'"),
        (lambda p: p.update(version=3), "version must be 1 or 2, got 3"),
        (lambda p: p["placement"].update({"t0001": "1"}), "placement.t0001 '1' is not an integer"),
        (
            lambda p: p["placement"].update({"t0001": 2}),
            "placement.t0001 is device 2, outside 0..1 (num_devices 2)",
        ),
        (
            lambda p: p["placement"].update({"ghost": 0}),
            "placement names unknown table ghost (1 in all); "
            "it must place exactly the tables of the table file",
        ),
    ],
)
def test_malformed_plan_files_are_one_line_naming_the_field(cli, plan, edit, problem):
    _, plan_path = plan
    assert error_line(measure_edited(cli, plan, edit)) == f"{plan_path}: {problem}"


def test_unreadable_plan_json_is_one_line(cli, plan):
    tables, plan_path = plan
    plan_path.write_text('{"num_devices": 2,')
    result = cli("measure", "--tables", str(tables), "--plan", str(plan_path))
    assert error_line(result).startswith(f"cannot read plan file {plan_path}: ")


def test_collect_then_calibrate(cli, tmp_path):
    dataset = tmp_path / "costs.sqlite"
    result = cli(
        "collect",
        "--suite",
        "cpu-12x2",
        "--placements",
        "10",
        "--train-tasks",
        "5",
        "--iterations",
        "2",
        "--dataset",
        str(dataset),
    )
    assert result.returncode == 0, result.stderr
    assert "10 measured" in result.stdout
    assert "ETA" in result.stderr  # progress on long work
    out = tmp_path / "simulated.json"
    result = cli("calibrate", "--dataset", str(dataset), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "median error" in result.stdout and out.exists()
    missing = cli("calibrate", "--dataset", str(tmp_path / "none.sqlite"))
    assert missing.returncode == 2 and "no cost dataset" in missing.stderr
