"""Which placements the collector measures: the warm start mixes heuristics and random."""

from dreamshard.costs.collect import collection_jobs
from dreamshard.placement.heuristics import HEURISTIC_KEYS
from dreamshard.placement.suites import make_suite, parse_suite_name


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
