"""The reference rule in `DreamShardPlanner`: TorchRec's own plan is kept when the calibrated
predicted gain's lower end does not clear the margin and left when it does; where TorchRec's
planner gives no plan (it declines, or is not given its second), the best whole-table heuristic
is the reference, and the planner says which."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

pytest.importorskip("torchrec")  # `make test` installs it

from benchmarks.parts.user_model import user_model  # noqa: E402
from dreamshard.integrations.plan_reading import placement_from_sharding  # noqa: E402
from dreamshard.integrations.reference_plan import Reference, more_replicas, plan_key  # noqa: E402
from dreamshard.placement.constraints import Constraints  # noqa: E402
from dreamshard.placement.heuristics import greedy_place  # noqa: E402
from dreamshard.placement.reference import Calibration, fit_calibration  # noqa: E402
from dreamshard.placement.suites import make_suite, parse_suite_name  # noqa: E402
from dreamshard.placement.tasks import placement_task  # noqa: E402


def calibration(margin: float, spread: float = 0.0) -> Calibration:
    """A rule that trusts the model's gain as it is, less `spread`, against `margin`."""
    return Calibration(1.0, 0.0, spread, margin, 3, "a test")


@pytest.fixture(scope="module")
def user():
    task = make_suite(parse_suite_name("cpu-24x2", 1, 1)).train_tasks[0]
    return user_model(task)


def read(user, plan):
    return user.placement(plan, "read")


def layout(placement):
    return placement.devices, placement.splits


def test_torchrecs_plan_is_kept_unless_the_lower_end_clears_the_margin(user):
    own = read(user, user.planner(reference=False).plan(user.module, user.sharders))
    torchrec = user.torchrec(4.0)[0]
    assert layout(own) != layout(torchrec)  # the task has a choice to make
    probe = user.planner(calibration=calibration(margin=0.0))
    probe.plan(user.module, user.sharders)
    gain = probe.verdict.predicted_gain
    assert probe.verdict.reference == "torchrec" and gain > 0.01  # the model prefers its own

    # the margin above the predicted gain: TorchRec's plan, as TorchRec's planner makes it
    keeps = user.planner(calibration=calibration(margin=gain + 0.01))
    kept = keeps.plan(user.module, user.sharders)
    assert keeps.verdict.kept_reference and keeps.verdict.lower_gain <= keeps.verdict.margin
    assert layout(read(user, kept)) == layout(torchrec)
    # a spread that takes the lower end under the margin keeps it too
    wary = user.planner(calibration=calibration(margin=0.0, spread=gain))
    assert layout(read(user, wary.plan(user.module, user.sharders))) == layout(torchrec)

    # a margin under the gain: the planner's own plan
    leaves = user.planner(calibration=calibration(margin=gain - 0.01))
    left = leaves.plan(user.module, user.sharders)
    assert not leaves.verdict.kept_reference and leaves.verdict.lower_gain > leaves.verdict.margin
    assert layout(read(user, left)) == layout(own)


def test_without_torchrecs_plan_the_best_heuristic_is_the_reference(user):
    planner = user.planner(calibration=calibration(margin=10.0), time_budget=3.0)
    plan = planner.plan(user.module, user.sharders)
    assert "not run: a quarter of the 3 s budget" in planner.reference_note
    reference = planner.verdict.reference
    assert reference.startswith("heuristic ") and planner.verdict.kept_reference
    task = planner.task(user.module)
    expected = greedy_place(task, reference.split()[1])
    found = placement_from_sharding(task, dict(plan.plan[""]), "read")
    assert layout(found) == layout(expected)


def test_a_declining_torchrec_leaves_the_heuristic_as_reference():
    from torchrec.distributed.planner import Topology

    task = make_suite(parse_suite_name("cpu-24x2", 1, 1)).train_tasks[0]
    user = user_model(task)
    user.topology = Topology(world_size=2, compute_device="cpu", ddr_cap=task.memory_cap_bytes)
    planner = user.planner(calibration=calibration(margin=10.0), reserve=False)
    planner.plan(user.module, user.sharders)  # TorchRec counts inputs too: no room for it
    assert "TorchRec's planner gave no plan (Unable to find a plan" in planner.reference_note
    assert planner.verdict.reference.startswith("heuristic ")


def test_a_calibration_is_the_line_of_measured_on_predicted_gains_and_its_spread():
    predicted = [0.0, 0.1, 0.2, 0.3]
    exact = fit_calibration(predicted, [0.01 + 0.5 * x for x in predicted], 0.01, "a test")
    assert (exact.slope, exact.intercept) == (pytest.approx(0.5), pytest.approx(0.01))
    assert exact.spread == pytest.approx(0.0, abs=1e-12)
    noisy = fit_calibration(predicted, [0.03, 0.04, 0.12, 0.15], 0.01, "a test")
    assert noisy.spread > 0.01 and noisy.lower_gain(0.2) < exact.lower_gain(0.2)
    with pytest.raises(Exception, match="3 pairs or more"):
        fit_calibration(predicted[:2], [0.0, 0.1], 0.01, "a test")


def test_place_format_torchrec_records_the_verdict_and_writes_the_plan_it_kept(tmp_path):
    from dreamshard.cli.main import main
    from tests.conftest import generated_tables, place_command

    tables = generated_tables(tmp_path / "tables.json", 20)
    made = place_command(tables, 4, 8, "--split", "auto", "--format", "torchrec")
    files = {}
    for name, extra in [
        ("weighed", ["--method", "dreamshard"]),
        ("own", ["--method", "dreamshard", "--no-reference"]),
        ("torchrec", ["--method", "torchrec"]),
    ]:
        files[name] = tmp_path / f"{name}.json"
        assert main([*made, *extra, "--out", str(files[name])]) == 0
    data = {name: json.loads(path.read_text()) for name, path in files.items()}
    verdict = data["weighed"]["reference"]
    assert verdict["reference"] == "torchrec" and "reference" not in data["own"]
    kept = "torchrec" if verdict["kept_reference"] else "own"
    assert data["weighed"]["plan"] == data[kept]["plan"]
    assert (verdict["lower_gain"] > verdict["margin"]) != verdict["kept_reference"]


def test_the_tunes_candidates_include_plans_on_torchrecs_layout(user):
    """TorchRec makes some tables data-parallel; the candidates after its plan keep that layout
    with the other tables placed again, beside the method's own plans, all distinct plans."""
    torchrec = user.torchrec(4.0)[0]
    replicated = {s.table for s in torchrec.splits if s.kind == "replica"}
    assert replicated  # TorchRec's CPU plan replicates the small tables
    plans = user.planner().candidate_plans(user.module, user.sharders, k=9)
    names = [name for name, _ in plans]
    found = [read(user, plan) for _, plan in plans]
    assert names[0] == "torchrec" and layout(found[0]) == layout(torchrec)
    assert len(plans) == 9 and len({plan_key(user.task, p) for p in found}) == 9
    on_layout = [p for name, p in zip(names, found) if name.endswith("on torchrec's layout")]
    assert on_layout and len(on_layout) < 5  # taken in turn with the method's own
    for placement in on_layout:
        assert {s.table for s in placement.splits} == replicated


def test_the_tunes_candidates_make_more_of_torchrecs_smallest_tables_data_parallel(user):
    """After TorchRec's plan come its plan with a fifth, 30% and 40% of its whole tables, the
    smallest by rows x dim, data-parallel too, every other table where TorchRec put it; a table
    the user keeps whole stays whole."""
    torchrec = user.torchrec(4.0)[0]
    replicated = {s.table for s in torchrec.splits}
    where = dict(
        zip((t.name for t in placement_task(user.task, torchrec).tables), torchrec.devices)
    )
    whole = sorted(
        (t for t in user.task.tables if t.name not in replicated), key=lambda t: t.rows * t.dim
    )
    plans = user.planner().candidate_plans(user.module, user.sharders, k=6)
    more = [(name, read(user, plan)) for name, plan in plans if "data-parallel" in name]
    counts = [round(share * len(whole)) for share in (0.2, 0.3, 0.4)]
    assert [name for name, _ in more] == [f"torchrec + {n} tables data-parallel" for n in counts]
    for (_, placement), count in zip(more, counts):
        made = {s.table for s in placement.splits} - replicated
        assert made == {t.name for t in whole[:count]}  # the smallest, and only they
        assert all(s.kind == "replica" and s.parts == 2 for s in placement.splits)
        for shard, device in zip(placement_task(user.task, placement).tables, placement.devices):
            if shard.name in where:  # every table TorchRec placed stays where it put it
                assert device == where[shard.name]
    smallest = whole[0].name
    kept = replace(user.task, constraints=Constraints(no_split=(smallest,)))
    reference = Reference("torchrec", torchrec, None, "", 0.0)
    for placement in more_replicas(kept, reference):
        assert smallest not in {s.table for s in placement.splits}


def test_the_tunes_candidates_have_distinct_names():
    """On this held-out task the method's best heuristic plan (one table data-parallel) and
    the whole-table heuristic of the same key are two different "heuristic dim" plans; a
    tune's report must tell every candidate apart."""
    task = make_suite(parse_suite_name("cpu-24x2", 1, 9)).test_tasks[8]
    other = user_model(task)
    plans = other.planner().candidate_plans(other.module, other.sharders, k=9)
    names = [name for name, _ in plans]
    keys = {plan_key(other.task, read(other, plan)) for _, plan in plans}
    assert len(keys) == len(plans) == 9  # nine different plans
    assert sum(name.startswith("heuristic dim") and "layout" not in name for name in names) == 2
    assert len(set(names)) == 9, names
