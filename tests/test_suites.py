import json

import pytest

from dreamshard.errors import DreamshardError
from dreamshard.placement.registry import method_names, place
from dreamshard.placement.suites import (
    load_suite,
    make_suite,
    parse_suite_name,
    save_suite,
    split_pool,
)
from dreamshard.placement.tasks import is_legal
from tests.conftest import error_line


@pytest.fixture(scope="module")
def suite():
    return make_suite(parse_suite_name("dlrm-50x4", num_train_tasks=20, num_test_tasks=20))


def test_train_and_test_tables_are_disjoint(suite):
    train = {t.name for task in suite.train_tasks for t in task.tables}
    test = {t.name for task in suite.test_tasks for t in task.tables}
    assert train and test and not train & test
    train_pool, test_pool = split_pool(suite.spec)
    assert len(train_pool) == len(test_pool) == 428


def test_other_suites_share_the_pool_split(suite):
    other = make_suite(parse_suite_name("dlrm-100x8", num_train_tasks=3, num_test_tasks=3))
    test = {t.name for task in suite.test_tasks for t in task.tables}
    other_train = {t.name for task in other.train_tasks for t in task.tables}
    assert not test & other_train  # zero-shot suites never test on trained tables
    assert all(len(t.tables) == 100 and t.num_devices == 8 for t in other.test_tasks)


def test_memory_caps_bind_and_some_are_tight(suite):
    fills = [t.table_bytes().sum() / (t.memory_cap_bytes * t.num_devices) for t in suite.test_tasks]
    assert sorted(fills)[len(fills) // 2] > 0.6 and max(fills) > 0.85
    # a cap either holds only the largest table or is at most 1.5x an even split
    for task in suite.test_tasks:
        sizes = task.table_bytes()
        even = sizes.sum() / task.num_devices
        assert task.memory_cap_bytes <= max(1.5 * even, sizes.max()) + 2**20
    for task in suite.test_tasks:
        for method in method_names("baseline", "heuristic"):
            assert is_legal(task, place(task, method))


def test_suites_repeat_and_round_trip(suite, tmp_path):
    again = make_suite(parse_suite_name("dlrm-50x4", num_train_tasks=20, num_test_tasks=20))
    assert again == suite
    save_suite(suite, tmp_path / "suite.json")
    back = load_suite(tmp_path / "suite.json")
    assert back == suite
    for a, b in zip(back.test_tasks, suite.test_tasks):
        assert [t.trace for t in a.tables] == [t.trace for t in b.tables]


@pytest.mark.parametrize("name", ["dlrm50x4", "gpu-50x4", "dlrm-0x4", "dlrm-500x4"])
def test_bad_suite_names(name):
    with pytest.raises(DreamshardError):
        parse_suite_name(name)


def test_bad_suite_file(tmp_path):
    (tmp_path / "s.json").write_text('{"format": "something else"}')
    with pytest.raises(DreamshardError, match="not a dreamshard suite"):
        load_suite(tmp_path / "s.json")
    with pytest.raises(DreamshardError, match="does not exist"):
        load_suite(tmp_path / "none.json")


@pytest.mark.parametrize(
    "edit, problem",
    [
        (
            lambda s: s["train"][0].update(memory_cap_bytes="lots"),
            "train.0.memory_cap_bytes 'lots' is not an integer",
        ),
        (lambda s: s["spec"].update(num_devices=-2), "spec.num_devices must be positive, got -2"),
        (lambda s: s["tables"][1].pop("rows"), "tables.1.rows is missing"),
        (lambda s: s.update(test={}), "test must be a list, got dict"),
        (
            lambda s: s["test"][0]["tables"].append("ghost"),
            "test.0.tables names table 'ghost', not in the file's tables",
        ),
    ],
)
def test_malformed_suite_files_are_one_line_naming_the_field(cli, tmp_path, edit, problem):
    path = tmp_path / "suite.json"
    save_suite(make_suite(parse_suite_name("cpu-10x2", 2, 1)), path)
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    assert error_line(cli("suite", "show", str(path))) == f"{path}: {problem}"
