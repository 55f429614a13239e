"""The planner registry: a planner registered once is offered everywhere, and nothing outside a
planner's own file picks methods by name."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest

from dreamshard.cli.main import main
from dreamshard.errors import DreamshardError
from dreamshard.placement.packing import assign_within_memory, largest_first
from dreamshard.placement.planner import BasePlanner, PlanOptions
from dreamshard.placement.registry import (
    method_names,
    place,
    register,
    registration,
    registrations,
    unregister,
)
from dreamshard.placement.tasks import Placement, PlacementTask, is_legal
from dreamshard.tables.synthetic import generate_tables

ROOT = Path(__file__).resolve().parents[1]
TOY = "emptiest_first"


class EmptiestFirst(BasePlanner):
    """A toy: largest table first, each to the device with the fewest bytes so far."""

    name = TOY

    def place_tables(self, task: PlacementTask, options: PlanOptions) -> Placement:
        def emptiest(_table, _load, used):
            return np.argsort(used, kind="stable")

        devices = assign_within_memory(task, largest_first(task), emptiest, self.name)
        return Placement(tuple(devices), self.name)


@pytest.fixture
def toy():
    register(TOY, EmptiestFirst(), "baseline", "a toy: the emptiest device first")
    yield TOY
    unregister(TOY)


def test_a_registered_planner_is_a_cli_choice_and_listed(toy, tmp_path, capsys):
    tables = tmp_path / "tables.json"
    assert main(["tables", "generate", "--num-tables", "9", "--out", str(tables)]) == 0
    plan = tmp_path / "plan.json"
    argv = ["place", "--tables", str(tables), "--devices", "3", "--mem-gb", "4"]
    assert main([*argv, "--method", toy, "--out", str(plan)]) == 0
    written = json.loads(plan.read_text())
    assert written["method"] == toy
    assert main(["methods"]) == 0
    assert any(line.startswith(toy) for line in capsys.readouterr().out.splitlines())
    unregister(toy)
    with pytest.raises(SystemExit) as exc:  # no longer a choice
        main([*argv, "--method", toy])
    assert exc.value.code == 2


def test_a_registered_planner_is_in_the_dashboards_list(toy, tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("DREAMSHARD_HOME", str(tmp_path))  # an empty store: no models
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=120)
    at.run()
    at = at.switch_page("views/place_tables.py").run()
    box = at.selectbox(key="place_planner")
    assert toy in box.options
    at = box.set_value(toy).run()
    assert not at.exception and not at.error
    plan = json.loads(at.get("code")[0].value)
    assert plan["method"] == toy


def test_place_uses_the_planners_split_choice_and_memory():
    tables = generate_tables("dlrm", 10, seed=4)  # its largest table: 64% of the bytes
    total = sum(t.bytes("fp16") for t in tables)
    planner = EmptiestFirst()
    register(TOY, planner, "baseline", "a toy")
    try:
        # the largest table fits no device whole: the default split choice cuts it
        task = PlacementTask(tuple(tables), 4, int(total * 0.4))
        split = place(task, TOY)
        assert split.splits and is_legal(task, split)
        with pytest.raises(DreamshardError, match="needs"):
            place(task, TOY, split="none")
    finally:
        unregister(TOY)


def test_unknown_methods_and_options_are_one_clear_error():
    task = PlacementTask(tuple(generate_tables("dlrm", 4, seed=0)), 2, 2**40)
    with pytest.raises(DreamshardError, match="unknown method 'nope'; choose one of random"):
        place(task, "nope")
    with pytest.raises(DreamshardError, match="unknown split mode 'some'"):
        place(task, "lookup", split="some")
    with pytest.raises(DreamshardError, match="time budget must be positive"):
        PlanOptions(time_budget=0)


def test_every_registration_loads_the_planner_it_names():
    for entry in registrations():
        if entry.needs and "torchrec" in entry.needs:
            pytest.importorskip("torchrec")
        assert entry.load().name == entry.name
    assert registration("lookup").kind == "heuristic"
    assert set(method_names("learned")) >= {"dreamshard", "dreamshard_search", "rnn"}


# --- no dispatch by method name -------------------------------------------------------------

SCANNED = ("dreamshard", "flows", "dashboard", "benchmarks", "gpu_tasks")


def own_file(target: object) -> Path | None:
    """The file of a registration's "module:attribute" target."""
    if not isinstance(target, str):
        return None
    return ROOT / (target.partition(":")[0].replace(".", "/") + ".py")


def named_in(node: ast.AST) -> set[str]:
    """String constants a comparison operand holds, directly or in a tuple, list or set."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return set().union(*(named_in(e) for e in node.elts)) if node.elts else set()
    return set()


def method_comparisons(path: Path, names: set[str], base: Path = ROOT) -> list[str]:
    """Each comparison in `path` against a method's name (`method == "rnn"`,
    `m in ("dreamshard", ...)`): an `if` over method names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            compared = set().union(*(named_in(n) for n in [node.left, *node.comparators]))
            if compared & names:
                found.append(f"{path.relative_to(base)}:{node.lineno} {sorted(compared & names)}")
    return sorted(found)


def test_no_code_picks_a_method_by_name_outside_its_planners_file():
    owners: dict[str, Path | None] = {r.name: own_file(r.planner) for r in registrations()}
    found = []
    for root in SCANNED:
        for path in (ROOT / root).rglob("*.py"):
            own = {name for name, file in owners.items() if file == path}
            found += method_comparisons(path, set(owners) - own)
    assert found == []


def test_the_scan_finds_a_planted_special_case(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "def pick(method):\n"
        "    if method == 'rnn':\n"
        "        return 1\n"
        "    return 2 if method in ('dreamshard', 'x') else 3\n"
    )
    found = method_comparisons(planted, set(method_names()), tmp_path)
    assert found == ["planted.py:2 ['rnn']", "planted.py:4 ['dreamshard']"]
