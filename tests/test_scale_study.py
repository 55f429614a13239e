"""The scale study's tasks, its time limit and its two judges (benchmarks/scale_study.py)."""

from __future__ import annotations

import time

import pytest

from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.errors import DreamshardError
from dreamshard.evaluation.scale_study import (
    TOPOLOGY,
    StudyRows,
    judge_plan,
    memory_split_place,
    study_task,
    within,
)
from dreamshard.placement.splitting import memory_splits


def test_loose_memory_holds_whole_tables_and_binding_memory_forces_splits():
    loose = study_task("wide-856", 0, 64, "loose")
    binding = study_task("wide-856", 0, 64, "binding")
    assert len(loose.tables) == len(binding.tables) == 856
    assert loose.tables == binding.tables and binding.memory_cap_bytes < loose.memory_cap_bytes
    assert memory_splits(loose) == ()
    assert memory_splits(binding)  # a table larger than a device at 1.2x the even share
    rows = [t.rows for t in loose.tables]
    pooling = [t.pooling_factor for t in loose.tables]
    assert 1e3 <= min(rows) < 1e4 and 1e7 < max(rows) <= 5e7  # the wide family's ranges
    assert 1 <= min(pooling) < 2 and 100 < max(pooling) <= 200
    assert {t.dim for t in loose.tables} == {8, 16, 32, 64, 128, 256}
    assert len(study_task("dlrm-428", 1, 16, "loose").tables) == 428
    assert {t.name for t in study_task("dlrm-856", 1, 16, "loose").tables} >= {
        t.name for t in study_task("dlrm-428", 1, 16, "loose").tables
    }


def test_a_planner_past_its_time_is_declined_not_waited_for():
    start = time.perf_counter()
    with pytest.raises(DreamshardError, match="no plan in 0.2 s"), within(0.2):
        time.sleep(5)
    assert time.perf_counter() - start < 2


def test_a_plan_is_judged_by_both_judges():
    pytest.importorskip("torchrec")
    task = study_task("dlrm-428", 0, 16, "binding")
    backend = SimulatedBackend(topology=TOPOLOGY)
    from dreamshard.integrations.torchrec_judge import torchrec_judge

    planner = lambda t: memory_split_place(t, "size_lookup")  # noqa: E731
    record = judge_plan(task, planner, backend, None, torchrec_judge)
    assert not record.declined and record.seconds > 0
    assert sum(record.split.values()) == len(memory_splits(task)) > 0
    assert record.simulated > 0 and record.torchrec > 0
    slow = judge_plan(task, lambda t: time.sleep(5), backend, seconds=0.2)
    assert slow.declined == "no plan in 0.2 s"


def test_a_rerun_takes_the_rows_stored_under_its_settings_only(tmp_path):
    """A study too long for one sitting goes on over reruns (`--rows`): a task stored under the
    same settings is taken, under other settings (another model, other limits) planned again;
    the file survives a reopen and a damaged one is refused in one line."""
    path = tmp_path / "study.rows.json"
    cell = ("dlrm-428", 0, 16, "loose")
    row = dict(set="dlrm-428", seed=0, devices=16, memory="loose", plans={"x": {"simulated": 1}})
    first = StudyRows(path, {"model": "a", "torchrec_seconds": 20.0})
    assert first.stored(cell) is None
    first.add(row)
    again = StudyRows(path, {"model": "a", "torchrec_seconds": 20.0})
    assert again.stored(cell)["plans"] == row["plans"]
    assert again.stored(("dlrm-428", 1, 16, "loose")) is None
    assert StudyRows(path, {"model": "b", "torchrec_seconds": 20.0}).stored(cell) is None
    # two sittings on one file at once: neither loses the other's rows, a task is kept once
    other = StudyRows(path, {"model": "a", "torchrec_seconds": 20.0})
    second = {**row, "seed": 1}
    other.add(second)
    first.add({**row, "seed": 2})
    first.add(second)
    assert [r["seed"] for r in StudyRows(path, first.settings).all] == [0, 1, 2]
    assert other.stored(("dlrm-428", 2, 16, "loose")) is not None
    # a planner re-planned on a stored task: its record replaced, the others kept, the note
    # kept beside it, and what another sitting reads
    note = {"commit": "abc1234", "host": "here", "made": "2026-12-05"}
    fresh = {"dreamshard auto": {"simulated": 1.0}}
    updated = other.replace_plans(cell, fresh, note)
    assert updated["plans"] == {**row["plans"], **fresh}
    assert StudyRows(path, first.settings).stored(cell)["replanned"] == {"dreamshard auto": note}
    assert [r["seed"] for r in StudyRows(path, first.settings).all] == [0, 1, 2]
    with pytest.raises(DreamshardError, match="no stored row"):
        other.replace_plans(("dlrm-428", 7, 16, "loose"), fresh, note)
    path.write_text("{not json")
    with pytest.raises(DreamshardError, match="not a study's rows file"):
        StudyRows(path, {"model": "a"})


def test_a_models_fingerprint_follows_its_weights():
    import torch

    from dreamshard.learn.model_file import model_fingerprint, shipped_model

    model, same = shipped_model(), shipped_model()
    assert model_fingerprint(model) == model_fingerprint(same)
    with torch.no_grad():
        next(same.costnet.parameters()).view(-1)[0] += 1e-3
    assert model_fingerprint(model) != model_fingerprint(same)
