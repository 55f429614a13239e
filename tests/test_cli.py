"""The real `dreamshard` console script, good input and bad."""

import json

import pytest

from dreamshard.placement.plan_file import placement_from_plan, read_plan
from dreamshard.placement.tasks import PlacementTask, is_legal
from dreamshard.tables.sources import load_tables
from tests.conftest import generated_tables, place_command


def test_help_explains_the_commands(cli):
    result = cli("--help")
    assert result.returncode == 0
    for command in ("tables", "suite", "place", "demo"):
        assert command in result.stdout
    assert "--mem-gb" in cli("place", "--help").stdout


def test_generate_show_place(cli, tmp_path):
    tables = generated_tables(tmp_path / "tables.json", 30, "--seed", "2")
    shown = cli("tables", "show", str(tables))
    assert shown.returncode == 0 and "30 tables" in shown.stdout and "pooling" in shown.stdout

    plan_path = tmp_path / "plan.json"
    lookup = place_command(tables, 4, 1, "--method", "lookup", "--out", str(plan_path))
    result = cli(*lookup)
    assert result.returncode == 0, result.stderr
    assert "memory GiB" in result.stdout and "lookup*" in result.stdout
    plan = json.loads(plan_path.read_text())
    assert plan["method"] == "lookup" and plan["num_devices"] == 4
    assert plan["memory_cap_bytes"] == 2**30
    # --split auto (the default): each table is placed whole or as its shards
    split = {s["table"]: s for s in plan["splits"]}
    assert split and all(s["kind"] == "column" for s in split.values())
    names = [f"t{i:04d}" for i in range(30)]
    expected = [n for n in names if n not in split] + [
        shard for n in split for shard in plan["placement"] if shard.startswith(f"{n}[c")
    ]
    assert sorted(plan["placement"]) == sorted(expected)
    assert all(
        sum(s.startswith(f"{n}[c") for s in plan["placement"]) == split[n]["parts"] for n in split
    )
    assert sum(len(d["tables"]) for d in plan["devices"]) == len(plan["placement"])
    assert all(d["memory_bytes"] <= 2**30 for d in plan["devices"])
    assert "split: " in result.stdout
    task = PlacementTask(tuple(load_tables(tables)), 4, 2**30, "fp16")
    assert is_legal(task, placement_from_plan(task, read_plan(plan_path)))

    whole = cli(*lookup, "--split", "none")
    assert whole.returncode == 0, whole.stderr
    assert sorted(json.loads(plan_path.read_text())["placement"]) == names


def test_place_from_csv_spec_with_fp32(cli, tmp_path):
    spec = tmp_path / "spec.csv"
    spec.write_text("name,rows,dim,pooling_factor\na,1000000,64,10\nb,500000,32,3\nc,10,4,1\n")
    plan_path = tmp_path / "plan.json"
    fp32_whole = ["--precision", "fp32", "--split", "none", "--out", str(plan_path)]
    result = cli(*place_command(spec, 2, 0.25, *fp32_whole))
    assert result.returncode == 0, result.stderr
    plan = json.loads(plan_path.read_text())
    assert plan["precision"] == "fp32"
    assert plan["devices"][plan["placement"]["a"]]["memory_bytes"] >= 1_000_000 * 64 * 4


def test_suite_make_and_show(cli, tmp_path):
    out = tmp_path / "suite.json"
    result = cli(
        "suite", "make", "cpu-20x2", "--train-tasks", "3", "--test-tasks", "2", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    shown = cli("suite", "show", str(out))
    assert "3 tasks" in shown.stdout and "2 tasks" in shown.stdout


@pytest.mark.parametrize("backend", ["fbgemm", "simulated"])
def test_demo_measures_every_planner(cli, backend):
    result = cli(
        "demo",
        "--suite",
        "cpu-20x2",
        "--tasks",
        "2",
        "--rounds",
        "1",
        "--iterations",
        "2",
        "--backend",
        backend,
    )
    assert result.returncode == 0, result.stderr
    for method in ("random", "dim", "size", "lookup", "size_lookup"):
        assert method in result.stdout
    assert f"{backend} backend" in result.stdout and "ETA" in result.stderr


GOOD = "name,rows,dim,pooling_factor\na,2000,16,2\nb,2000,16,4\nc,2000,16,1\n"  # 62.5 KiB each


@pytest.mark.parametrize(
    "content, args, words",
    [
        (None, [], "does not exist"),
        ("name,rows,dim\na,10,4\n", [], "missing column pooling_factor"),
        ("name,rows,dim,pooling_factor\na,abc,4,1\n", [], "is not a number"),
        ("name,rows,dim,pooling_factor\na,0,4,1\n", [], "rows must be positive"),
        ("name,rows,dim,pooling_factor\na,10,4,-2\n", [], "pooling_factor must be positive"),
        ("name,rows,dim,pooling_factor\na,10,6,1\n", [], "multiple of 4"),
        (GOOD, ["--devices", "0"], "must be positive"),
        (GOOD, ["--devices", "-3"], "must be positive"),
        (GOOD, ["--mem-gb", "0"], "must be positive"),
        (GOOD, ["--mem-gb", "-1"], "must be positive"),
        (GOOD, ["--devices", "2", "--mem-gb", "0.00007"], "in total"),
        (
            "name,rows,dim,pooling_factor\na,100000000,128,1\nb,10,4,1\n",
            ["--split", "none"],
            "more than one device",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_plan(cli, tmp_path, content, args, words):
    spec = tmp_path / "spec.csv"
    if content is not None:
        spec.write_text(content)
    plan = tmp_path / "plan.json"
    base = {"--devices": "4", "--mem-gb": "1"}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    flags = [x for pair in base.items() for x in pair]
    result = cli("place", "--tables", str(spec), *flags, "--out", str(plan))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not plan.exists() and list(tmp_path.iterdir()) == ([spec] if content else [])


def test_rounds_on_a_backend_without_rounds_is_refused_before_any_dataset(cli, tmp_path):
    dataset = tmp_path / "costs.sqlite"
    args = ["--suite", "cpu-20x2", "--placements", "1", "--dataset", str(dataset)]
    result = cli("collect", *args, "--backend", "simulated", "--rounds", "3")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "dmp backend only" in lines[0]
    assert not dataset.exists()


def test_unreadable_file(cli, tmp_path):
    folder = tmp_path / "spec.csv"
    folder.mkdir()  # a folder where a file should be: unreadable as a file
    result = cli(*place_command(folder, 2, 1))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "cannot read" in result.stderr


def test_optimizer_state_counts_in_memory(cli, tmp_path):
    """Adam keeps two fp32 numbers per weight: a table that fits whole under SGD is split."""
    spec = tmp_path / "spec.csv"
    spec.write_text("name,rows,dim,pooling_factor\na,1000000,64,10\nb,1000,16,2\n")
    plan_path = tmp_path / "plan.json"
    args = place_command(spec, 2, 0.5)
    sgd = cli(*args, "--method", "random", "--out", str(plan_path))  # splits for memory only
    assert sgd.returncode == 0, sgd.stderr
    plan = json.loads(plan_path.read_text())
    assert plan["optimizer"] == "sgd" and plan["splits"] == []
    assert sum(d["memory_bytes"] for d in plan["devices"]) == 1_000_000 * 64 * 2 + 1000 * 16 * 2
    adam = cli(*args, "--method", "random", "--optimizer", "adam", "--out", str(plan_path))
    assert adam.returncode == 0, adam.stderr
    plan = json.loads(plan_path.read_text())
    assert plan["optimizer"] == "adam" and plan["splits"][0]["table"] == "a"
    weights_and_state = (1_000_000 * 64 + 1000 * 16) * (2 + 2 * 4)
    assert sum(d["memory_bytes"] for d in plan["devices"]) == weights_and_state
    assert all(d["memory_bytes"] <= 2**29 for d in plan["devices"])
    refused = cli(*args, "--optimizer", "adam", "--split", "none")
    assert refused.returncode == 2 and "more than one device" in refused.stderr


def test_place_piped_into_a_closed_reader_still_writes_its_plan(tmp_path):
    import shlex
    import subprocess

    from tests.conftest import SCRIPT

    # a reader gone before the first line (`true`), and more than a pipe buffer of device rows
    tables = generated_tables(tmp_path / "tables.json", 200)
    plan = tmp_path / "plan.json"
    words = [str(SCRIPT), *place_command(tables, 128, 1, "--out", str(plan))]
    shell = f"{shlex.join(words)} | true"
    result = subprocess.run(shell, shell=True, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "Traceback" not in result.stderr
    assert is_legal(*_plan_of(tables, plan))


def _plan_of(tables, plan):
    data = read_plan(plan)
    task = PlacementTask(tuple(load_tables(tables)), data.num_devices, data.memory_cap_bytes)
    return task, placement_from_plan(task, data)
