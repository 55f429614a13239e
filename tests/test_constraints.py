"""Constraints (issue 30): every method honours pins, together, apart and no-split on random
tasks, a set that cannot hold is one line, and the plan file records what it held."""

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from benchmarks.parts.milp import solve_milp
from benchmarks.parts.milp_simulated import solve_simulated_milp
from dreamshard.errors import DreamshardError, InfeasibleError
from dreamshard.learn.rnn import RnnPlacer
from dreamshard.placement.constraints import Constraints, conflict
from dreamshard.placement.heuristics import heuristic_keys
from dreamshard.placement.planner import PlanOptions
from dreamshard.placement.registry import method_names, place, registration
from dreamshard.placement.tasks import PlacementTask, device_memory, placement_task
from tests.conftest import error_line, generated_tables, place_command, random_tables

SEEDS = range(20)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def constrained_task(seed: int, num_devices: int | None = None) -> PlacementTask:
    """12-40 tables on 3-6 devices, each cap 1.3 x an even split (at least twice the largest
    table), with 2 pins, a group of 2-3 together, a set of 2-3 apart, 2 tables kept whole and
    one sharded (column-wise, row-wise or data-parallel by seed), drawn until they can hold
    together."""
    rng = np.random.default_rng(seed)
    num_tables = int(rng.integers(12, 41))
    d = num_devices or int(rng.integers(3, 7))
    tables = random_tables(rng, num_tables, (2_000, 400_000), [8, 16, 32, 64, 128, 256])
    sizes = [t.bytes("fp16") for t in tables]
    cap = int(max(max(sizes) * 2, 1.3 * sum(sizes) / d))
    task = PlacementTask(tables, d, cap, "fp16", f"constrained-{seed}")
    names = [t.name for t in tables]
    while True:
        picks = [str(n) for n in rng.permutation(names)[:10]]
        constraints = Constraints(
            pins=((picks[0], int(rng.integers(d))), (picks[1], int(rng.integers(d)))),
            together=(tuple(picks[2 : 4 + int(rng.integers(2))]),),
            apart=((picks[0], *picks[5 : 6 + int(rng.integers(2))]),),
            no_split=(picks[7], picks[8]),
            sharding=((picks[9], ("column_wise", "row_wise", "data_parallel")[seed % 3], 0),),
        )
        if conflict(task, constraints) is None:
            return PlacementTask(tables, d, cap, "fp16", task.name, constraints=constraints)


def assert_held(task: PlacementTask, placement) -> None:
    """Each constraint, checked on the plan's own devices (not through the planners' code)."""
    constraints = task.constraints
    shards = placement_task(task, placement)
    device = {t.name: int(d) for t, d in zip(shards.tables, placement.devices)}
    for name, pinned in constraints.pins:
        assert device[name] == pinned, (task.name, name)
    for group in constraints.together:
        assert len({device[name] for name in group}) == 1, (task.name, group)
    for group in constraints.apart:
        assert len({device[name] for name in group}) == len(group), (task.name, group)
    split = {s.table: s.kind for s in placement.splits}
    kinds = {"column_wise": "column", "row_wise": "row", "data_parallel": "replica"}
    for name, kind, _ in constraints.sharding:
        assert split.pop(name) == kinds[kind], (task.name, name)
    assert not set(split) & constraints.named(), (task.name, split)
    assert device_memory(task, placement).max() <= task.memory_cap_bytes


@pytest.fixture(scope="module")
def tasks():
    return [constrained_task(seed) for seed in SEEDS]


@pytest.mark.parametrize(
    "method", [m for m in method_names() if registration(m).kind != "external" and m != "rnn"]
)
def test_every_method_honours_every_constraint(tasks, method):
    model = "shipped" if registration(method).needs_model else None
    for seed, task in enumerate(tasks):
        options = PlanOptions(seed, model, split="auto", time_budget=0.5)
        assert_held(task, place(task, method, options=options))


def test_the_rnn_honours_every_constraint_on_its_device_count():
    torch.manual_seed(0)
    placer = RnnPlacer(num_devices=4)
    placer.eval()
    placed = 0
    for seed in SEEDS:
        task = constrained_task(seed, num_devices=4)
        try:
            placement = place(task, "rnn", seed, model=placer)
        except InfeasibleError:  # an untrained placer's episodes may all get stuck
            continue
        assert_held(task, placement)
        placed += 1
    assert placed >= 10


def test_the_milps_honour_pins_together_and_apart(tasks):
    solved = 0
    for task in tasks[:3]:  # references of whole tables: the sharding asked for left out
        task = replace(task, constraints=replace(task.constraints, sharding=()))
        for result in (
            solve_milp(task, heuristic_keys(task, "size_lookup"), time_limit_s=0.5),
            solve_simulated_milp(task, time_limit_s=0.5),
        ):
            if result.placement is not None:
                assert_held(task, result.placement)
                solved += 1
    assert solved >= 4


def test_without_the_constraints_the_plans_break_them(tasks):
    """Not vacuous: without them the heuristics break some pin or apart set on most tasks."""
    broken = 0
    for task in tasks:
        free = PlacementTask(task.tables, task.num_devices, task.memory_cap_bytes)
        placement = place(free, "size_lookup", split="none")
        try:
            assert_held(task, placement)
        except AssertionError:
            broken += 1
    assert broken >= len(tasks) // 2


def test_torchrec_refuses_pins_in_one_line(tasks):
    with pytest.raises(DreamshardError, match="TorchRec's planner has no pin"):
        place(tasks[0], "torchrec")


def test_each_conflict_is_named(tasks):
    task = PlacementTask(tasks[0].tables[:6], 4, tasks[0].memory_cap_bytes)
    cases = {
        Constraints(pins=(("t0", 1), ("t1", 2)), together=(("t0", "t1"),)): (
            "tables t0 and t1 must be together but are pinned to devices 1 and 2"
        ),
        Constraints(together=(("t2", "t3"),), apart=(("t3", "t2"),)): (
            "tables t3 and t2 must be apart but are together"
        ),
        Constraints(pins=(("t0", 1), ("t1", 1)), apart=(("t0", "t1"),)): (
            "tables t0 and t1 must be apart but are pinned to device 1"
        ),
        Constraints(pins=(("t0", 9),)): "table t0 is pinned to device 9, outside 0..3",
        Constraints(pins=(("t0", 1), ("t0", 2))): "pinned to both device 1 and device 2",
        Constraints(apart=(("t0", "t1", "t2", "t3", "t4"),)): "5 tables must be apart on only 4",
        Constraints(no_split=("nope",)): "no table is named 'nope'",
    }
    for constraints, message in cases.items():
        assert message in conflict(task, constraints)
    # pairwise apart sets that hold one by one but not together (an odd cycle on 2 devices,
    # a together group in it); a path of them holds
    two = PlacementTask(task.tables, 2, task.memory_cap_bytes)
    cycle = (("t0", "t1"), ("t1", "t2"), ("t2", "t3"), ("t3", "t4"), ("t4", "t0"))
    assert "apart sets of tables t0, t1, t2, t3, t4 cannot all hold on 2" in conflict(
        two, Constraints(apart=cycle)
    )
    grouped = Constraints(
        together=(("t0", "t5"),), apart=(("t5", "t1"), ("t1", "t2"), ("t2", "t0"))
    )
    assert "cannot all hold on 2 devices" in conflict(two, grouped)
    assert conflict(two, Constraints(apart=cycle[:4])) is None
    assert conflict(task, Constraints(apart=cycle)) is None  # 4 devices
    tight = PlacementTask(task.tables, 4, int(task.table_bytes().max()))
    biggest = tuple(task.tables[i].name for i in np.argsort(-task.table_bytes())[:2])
    assert "more than one device's" in conflict(tight, Constraints(together=(biggest,)))


def test_a_conflict_is_one_line_and_writes_nothing(cli, tmp_path):
    tables = generated_tables(tmp_path / "tables.json", 12)
    out = tmp_path / "plan.json"
    triangle = ("--apart", "t0000,t0001", "--apart", "t0001,t0002", "--apart", "t0002,t0000")
    cases = {
        (
            4,
            "--together",
            "t0002,t0003",
            "--apart",
            "t0003,t0002",
        ): "must be apart but are together",
        (4, "--method", "torchrec", "--apart", "t0000,t0001"): "TorchRec's planner has no pin",
        (2, *triangle): "cannot all hold on 2 devices",
    }
    for (devices, *flags), message in cases.items():
        result = cli(*place_command(tables, devices, 1, *flags, "--out", str(out)))
        assert message in error_line(result), flags
        assert not out.exists()


def test_place_holds_a_constraints_file_and_the_flags_and_records_them(cli, tmp_path):
    tables = generated_tables(tmp_path / "tables.json", 16)
    spec = tmp_path / "constraints.json"
    spec.write_text(json.dumps({"pin": {"t0003": 2}, "together": [["t0000", "t0005"]]}))
    out = tmp_path / "plan.json"
    flags = ("--constraints", str(spec), "--apart", "t0003,t0000", "--out", str(out))
    result = cli(*place_command(tables, 4, 1, "--method", "lookup", *flags))
    assert result.returncode == 0, result.stderr
    assert "constraints held: 1 pinned table, 1 group together, 1 set apart" in result.stdout
    plan = json.loads(out.read_text())
    where = {name: d["device"] for d in plan["devices"] for name in d["tables"]}
    assert where["t0003"] == 2 and where["t0000"] == where["t0005"] != 2
    assert plan["constraints"]["pin"] == {"t0003": 2}
    spec.write_text(json.dumps({"pins": {"t0003": 2}}))
    assert "pins" in error_line(cli(*place_command(tables, 4, 1, "--constraints", str(spec))))


def test_dreamshard_planner_reads_torchrecs_sharding_types():
    pytest.importorskip("torchrec")
    from torchrec.distributed.planner import ParameterConstraints

    from dreamshard.integrations.dmp_planner import DreamShardPlanner
    from tests.test_dmp_planner import TwoTowers, cpu_topology

    given = {
        "shared": ParameterConstraints(sharding_types=["column_wise"]),
        "clicks": ParameterConstraints(sharding_types=["table_wise", "column_wise"]),
    }
    model = TwoTowers()
    planner = DreamShardPlanner(cpu_topology(), "lookup", reserve=False, constraints=given)
    task = planner.task(model)
    # a key reaches the table of that name in every collection
    assert sorted(n for n, _, _ in task.constraints.sharding) == ["item.shared", "user.bags.shared"]
    assert task.constraints.no_split == ("user.bags.clicks",)
    plan = planner.plan(model)
    kinds = {name: s.sharding_type for m in plan.plan.values() for name, s in m.items()}
    assert kinds == {"shared": "column_wise", "clicks": "table_wise"}


def test_a_pin_holds_where_memory_binds_and_split_candidates_shrink_the_cap(tmp_path):
    """Under --split auto a candidate with row shards leaves each device less room; where a
    pinned table no longer fits it, that candidate is skipped, not the whole plan refused."""
    from dreamshard.cli.main import main

    tables = generated_tables(tmp_path / "tables.json", 30)
    for method in ("size_lookup", "dreamshard"):
        out = tmp_path / f"{method}.json"
        flags = ("--method", method, "--pin", "t0026=0", "--out", str(out))
        assert main(place_command(tables, 4, 0.0105, *flags)) == 0
        plan = json.loads(out.read_text())
        assert plan["placement"]["t0026"] == 0


def test_refinement_measures_only_plans_that_hold_the_constraints(tmp_path, capsys):
    from dreamshard.cli.main import main

    tables = generated_tables(tmp_path / "tables.json", 16)
    out = tmp_path / "plan.json"
    flags = ["--method", "dreamshard", "--sharding", "t0005=row_wise", "--pin", "t0001=3"]
    refine = ["--refine", "simulated", "--refine-seconds", "1", "--out", str(out)]
    assert main(place_command(tables, 4, 1, *flags, *refine)) == 0
    plan = json.loads(out.read_text())
    assert {"table": "t0005", "kind": "row", "parts": 4} in plan["splits"]
    assert plan["placement"]["t0001"] == 3
    capsys.readouterr()
    assert main(["check", "--plan", str(out), "--tables", str(tables), "--no-compare"]) == 0
