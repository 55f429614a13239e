"""Which placements the collector measures: the warm start mixes heuristics and random."""

from dreamshard.costs.collect import collect, collection_jobs
from dreamshard.costs.dataset import CostDataset
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.learn.costnet_data import load_examples
from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.placement.tasks import is_legal


def test_a_short_warm_start_mixes_every_planner_across_the_tasks():
    # the main job's warm start: 20 placements of a suite with 50 training tasks
    suite = make_suite(parse_suite_name("cpu-12x2", num_train_tasks=50, num_test_tasks=1))
    jobs = list(collection_jobs(suite, 20))
    assert len(jobs) == 20
    assert {job.placement.method for job in jobs} == {"random", *HEURISTIC_KEYS}
    assert len({job.task.name for job in jobs}) == 20


def test_jobs_are_distinct_and_repeat_exactly():
    suite = make_suite(parse_suite_name("cpu-12x2", num_train_tasks=3, num_test_tasks=1))
    jobs = list(collection_jobs(suite, 12))
    keys = [(job.task.name, job.placement.devices) for job in jobs]
    assert len(set(keys)) == len(keys) == 12
    again = [(job.task.name, job.placement.devices) for job in collection_jobs(suite, 12)]
    assert again == keys


def test_a_heuristic_places_each_task_once_however_many_passes(monkeypatch):
    # a heuristic's whole-table placement is its key's alone: later passes reuse the answer
    import dreamshard.planners.baselines as baselines

    calls = []

    def counted(task, key_name):
        calls.append((task.name, key_name))
        return greedy_place(task, key_name)

    monkeypatch.setattr(baselines, "greedy_place", counted)
    suite = make_suite(parse_suite_name("cpu-12x2", num_train_tasks=3, num_test_tasks=1))
    jobs = list(collection_jobs(suite, 40))
    assert len(jobs) == 40 and {j.placement.method for j in jobs} == {"random", *HEURISTIC_KEYS}
    assert len(calls) == len(set(calls)) <= 3 * len(HEURISTIC_KEYS)


def test_the_warm_start_can_spread_the_tasks_over_other_device_counts():
    suite = make_suite(parse_suite_name("cpu-12x2", num_train_tasks=3, num_test_tasks=1))
    jobs = list(collection_jobs(suite, 18, device_counts=(1, 2, 4)))
    assert {job.task.num_devices for job in jobs} == {1, 2, 4}
    for job in jobs:
        own = next(t for t in suite.train_tasks if job.task.name.startswith(t.name))
        assert job.task.tables == own.tables
        assert is_legal(job.task, job.placement)
        # the same memory in all (rounded up), never too little for the largest table
        total = job.task.memory_cap_bytes * job.task.num_devices
        assert total >= own.memory_cap_bytes * own.num_devices
        assert job.task.memory_cap_bytes >= job.task.table_bytes().max()


def test_the_split_mix_measures_shards_of_every_kind_the_planners_weigh(tmp_path):
    suite = make_suite(parse_suite_name("cpu-24x2", num_train_tasks=5, num_test_tasks=1))
    jobs = list(collection_jobs(suite, 15, "split"))
    assert len(jobs) == 15
    assert {job.placement.method for job in jobs} == {"random", *HEURISTIC_KEYS}
    for job in jobs:
        assert job.placement.splits, "every proposal holds shards"
        assert is_legal(job.task, job.placement)
    kinds = {split.kind for job in jobs for split in job.placement.splits}
    assert kinds == {"column", "row"}
    again = [(j.task.name, j.placement.devices, j.placement.splits) for j in jobs]
    assert again == [
        (j.task.name, j.placement.devices, j.placement.splits)
        for j in collection_jobs(suite, 15, "split")
    ]
    # measured and stored over their shards, they come back as the cost network's examples
    dataset = CostDataset(tmp_path / "costs.sqlite")
    collect(jobs, SimulatedBackend(), dataset, suite.spec.name)
    examples = load_examples(dataset)
    assert len(examples) == 15
    shards = {len(e.features) - len(suite.train_tasks[0].tables) for e in examples}
    assert min(shards) >= 1  # each example has more rows than its task has tables
