"""`dreamshard measure`, `collect` and `calibrate` through the real console script."""

import json

import pytest


@pytest.fixture
def plan(cli, tmp_path):
    tables = tmp_path / "tables.json"
    assert (
        cli(
            "tables", "generate", "--profile", "cpu", "--num-tables", "8", "--out", str(tables)
        ).returncode
        == 0
    )
    plan = tmp_path / "plan.json"
    result = cli(
        "place",
        "--tables",
        str(tables),
        "--devices",
        "2",
        "--mem-gb",
        "4",
        "--precision",
        "fp32",
        "--out",
        str(plan),
    )
    assert result.returncode == 0, result.stderr
    return tables, plan


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
    assert data["backend"] == "simulated" and len(data["devices"]) == 2
    assert data["overall"] == pytest.approx(max(d["total"] for d in data["devices"]))
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
    tables, plan_path = plan
    data = json.loads(plan_path.read_text())
    edit(data)
    plan_path.write_text(json.dumps(data))
    result = cli("measure", "--tables", str(tables), "--plan", str(plan_path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in result.stderr


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
