"""`dreamshard check` (issue 30): a plan's legality, memory (ours and TorchRec's), predicted
cost and dreamshard's plan beside it, for our plans, TorchRec's own planner's and live ones."""

import json

import pytest

from dreamshard.cli.main import main
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.integrations.plan_check import check_plan, read_any_plan
from dreamshard.placement.registry import place
from dreamshard.placement.tasks import GIB, Placement, PlacementTask, device_memory
from dreamshard.tables.shards import Split
from dreamshard.tables.sources import load_tables
from dreamshard.tables.table import Table
from tests.conftest import generated_tables, place_command

pytest.importorskip("torchrec")


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    return generated_tables(tmp_path_factory.mktemp("check") / "tables.json", 20)


def test_a_plan_of_torchrecs_own_planner_round_trips_through_check(tables, tmp_path, capsys):
    plan = tmp_path / "torchrec.json"
    made = place_command(tables, 4, 8, "--method", "torchrec", "--split", "auto")
    assert main([*made, "--format", "torchrec", "--out", str(plan)]) == 0
    kinds = {
        e["sharding_type"]
        for m in json.loads(plan.read_text())["plan"].values()
        for e in m.values()
    }
    assert len(kinds) >= 2, kinds  # TorchRec split some tables: not our export's table-wise
    capsys.readouterr()
    flags = ["--mem-gb", "8", "--format", "json", "--no-compare"]
    assert main(["check", "--plan", str(plan), "--tables", str(tables), *flags]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["legal"] and report["num_devices"] == 4
    # the plan read back as our placement of the same task: the same memory and cost
    task = PlacementTask(tuple(load_tables(tables)), 4, 8 * 2**30)
    again = read_any_plan(plan, task, "embedding_bags")
    assert again.splits  # TorchRec's shards, as our splits
    # each device's memory read from TorchRec's shards themselves, not through our reader: the
    # elements of every shard on the rank (a replicated table's whole on each of its ranks)
    per_element = task.tables[0].bytes() / (task.tables[0].rows * task.tables[0].dim)
    elements = [0] * 4
    by_name = {t.name: t for t in task.tables}
    for name, entry in json.loads(plan.read_text())["plan"]["embedding_bags"].items():
        for shard in entry.get("shards") or []:
            rank = int(shard["placement"].split("/")[0].removeprefix("rank:"))
            elements[rank] += shard["sizes"][0] * shard["sizes"][1]
        if not entry.get("shards"):  # data-parallel: the whole table on every rank it names
            for rank in entry["ranks"]:
                elements[rank] += by_name[name].rows * by_name[name].dim
    memory = [d["memory_bytes"] for d in report["devices"]]
    assert memory == pytest.approx([per_element * e for e in elements], rel=1e-9)
    assert memory == device_memory(task, again).tolist()
    assert report["overall_ms"] == pytest.approx(SimulatedBackend().measure(task, again).overall)
    # TorchRec counts its input and output buffers beside the weights: more on every busy device
    for device in report["devices"]:
        if device["tables"]:
            assert device["torchrec_memory_bytes"] > device["memory_bytes"]


def test_an_illegal_plan_is_reported_with_exit_code_1(tables, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    assert main(place_command(tables, 4, 1, "--method", "size", "--out", str(plan))) == 0
    used = max(d["memory_bytes"] for d in json.loads(plan.read_text())["devices"])
    tight = f"{used / 2**30 * 0.9:.6f}"
    capsys.readouterr()
    assert main(["check", "--plan", str(plan), "--tables", str(tables), "--mem-gb", tight]) == 1
    out = capsys.readouterr().out
    assert "legal: no: device" in out and "over its cap" in out
    assert main(["check", "--plan", str(plan), "--tables", str(tables)]) == 0
    out = capsys.readouterr().out
    assert "legal: yes" in out and "dreamshard's plan of the same tables" in out


def test_what_check_cannot_read_is_one_line(tables, tmp_path, capsys):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "something"}))
    assert main(["check", "--plan", str(other), "--tables", str(tables)]) == 2
    assert "it records no device count" in capsys.readouterr().err
    flags = ["--devices", "2", "--mem-gb", "1"]
    assert main(["check", "--plan", str(other), "--tables", str(tables), *flags]) == 2
    assert "neither a dreamshard plan" in capsys.readouterr().err


def test_the_report_predicts_what_the_judges_predict(tables):
    task = PlacementTask(tuple(load_tables(tables)), 4, 2**30)
    plan = place(task, "lookup")
    report = check_plan(task, plan, "shipped")
    from dreamshard.learn.model_file import resolve_model

    per_device, overall = resolve_model("shipped").costnet.predict_ms(task, plan)
    assert report.overall_ms == pytest.approx(overall)
    assert [d.fwd_comp_ms for d in report.devices] == pytest.approx(per_device[:, 0].tolist())
    mine = place(task, "dreamshard", model="shipped")
    assert report.dreamshard_candidate == mine.candidate
    assert report.ratio == pytest.approx(
        resolve_model("shipped").costnet.predict_ms(task, mine)[1] / overall
    )


def test_the_tables_column_counts_each_table_once_a_device_not_its_shards():
    big = Table("big", 1000, 64, 2.0)  # four column shards: two on each device
    task = PlacementTask((big, Table("s0", 100, 16, 1.0), Table("s1", 100, 16, 1.0)), 2, GIB)
    plan = Placement((0, 0, 1, 1, 0, 1), "by hand", splits=(Split("big", "column", 4),))
    report = check_plan(task, plan, compare=False)
    assert [d.tables for d in report.devices] == [2, 2]  # big and s0; big and s1


def test_a_live_sharding_plan_is_checked_against_its_model():
    from dreamshard.integrations.dmp_planner import DreamShardPlanner
    from dreamshard.integrations.plan_check import check_sharding_plan
    from tests.test_dmp_planner import TwoTowers, cpu_topology

    model = TwoTowers()
    planner = DreamShardPlanner(cpu_topology(memory=2**20), method="size", reserve=False)
    plan = planner.plan(model)
    report = check_sharding_plan(model, plan, cpu_topology(memory=2**20), reserve=False)
    task = planner.task(model)
    assert report.legal and report.num_devices == 2
    assert [d.memory_bytes for d in report.devices] == device_memory(
        task, place(task, "size")
    ).tolist()


def test_explain_prints_the_models_own_predictions(tables, tmp_path, capsys):
    from dreamshard.evaluation.explain import explain_plan
    from dreamshard.learn.model_file import resolve_model
    from dreamshard.placement.tasks import Placement
    from dreamshard.planners.dreamshard_planner import ranked_candidates

    task = PlacementTask(tuple(load_tables(tables)), 4, 2**30)
    plan = place(task, "dreamshard", model="shipped", split="none")
    found = explain_plan(task, plan, "shipped", seed=0)
    costnet = resolve_model("shipped").costnet
    per_device, overall = costnet.predict_ms(task, plan)
    assert found.overall_ms == pytest.approx(overall)
    shown = [x for d in found.devices for x in (d.fwd_ms, d.comm_ms, d.bwd_ms)]
    assert shown == pytest.approx(per_device[:, :3].ravel().tolist())
    for why in found.tables[:3]:  # a table's next-best device: the plan with it moved there
        i = [t.name for t in task.tables].index(why.table)
        for device, ms in why.next_best:
            moved = list(plan.devices)
            moved[i] = device
            assert ms == pytest.approx(
                costnet.predict_ms(task, Placement(tuple(moved)))[1], rel=1e-4
            )
    ranked = ranked_candidates(task, resolve_model("shipped"), 8, 0)
    assert [c.predicted_ms for c in found.candidates] == pytest.approx([ms for _, ms in ranked])
    assert found.plan_is_winner
    # the analytic judge, through the command
    out = tmp_path / "plan.json"
    assert main(place_command(tables, 4, 1, "--method", "lookup", "--out", str(out))) == 0
    capsys.readouterr()
    assert main(["explain", "--plan", str(out), "--tables", str(tables), "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    lookup = place(task, "lookup")
    assert shown["overall_ms"] == pytest.approx(SimulatedBackend().measure(task, lookup).overall)
    assert shown["key"] == "lookup" and not shown["candidates"]


def test_check_holds_a_plan_to_the_constraints_it_records(tables, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    flags = ["--pin", "t0000=2", "--apart", "t0000,t0001", "--out", str(plan)]
    assert main(place_command(tables, 4, 1, *flags)) == 0
    data = json.loads(plan.read_text())
    data["placement"]["t0000"] = 1  # moved off its pin
    plan.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["check", "--plan", str(plan), "--tables", str(tables), "--no-compare"]) == 1
    assert "legal: no: table t0000 is pinned to device 2, not on 1" in capsys.readouterr().out


def test_explain_keeps_the_plans_constraints_and_fixed_shards(tables, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    flags = ["--method", "dreamshard", "--pin", "t0000=2", "--apart", "t0000,t0003"]
    flags += ["--sharding", "t0005=row_wise", "--out", str(plan)]
    assert main(place_command(tables, 4, 1, *flags)) == 0
    capsys.readouterr()
    why = ["explain", "--plan", str(plan), "--tables", str(tables), "--model", "shipped"]
    assert main([*why, "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["plan_is_winner"]  # re-run under the same constraints, it is the winner
    rows = {t["table"]: t for t in shown["tables"]}
    assert rows["t0000"]["next_best"] == []  # pinned: no other device
    assert all(not r["next_best"] for name, r in rows.items() if name.startswith("t0005["))
    assert 2 not in [d for d, _ in rows["t0003"]["next_best"]]  # t0000's device: apart
    assert [r["overall_ms"] for r in rows.values()] == pytest.approx(
        [shown["overall_ms"]] * len(rows), rel=1e-4
    )
