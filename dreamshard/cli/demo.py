"""The quick demo: make a suite, place its test tasks with every baseline planner, compare."""

from __future__ import annotations

from dreamshard.costs.types import CostBackend
from dreamshard.evaluation.evaluate import evaluate, evaluation_note, summary_table
from dreamshard.placement.registry import baseline_planners
from dreamshard.placement.suites import SuiteSpec, make_suite
from dreamshard.report import format_table


def run_demo(spec: SuiteSpec, rounds: int, backend: CostBackend) -> None:
    print(f"making suite {spec.name} ({spec.num_test_tasks} test tasks)...", flush=True)
    suite = make_suite(spec)
    planners = baseline_planners()
    print(
        f"placing with {len(planners)} planners and measuring in {rounds} interleaved rounds "
        f"on {backend.name}...",
        flush=True,
    )
    evaluation = evaluate(suite.test_tasks, planners, backend, rounds=rounds)
    header, rows = summary_table(evaluation)
    print(format_table(header, rows))
    print(
        "cost: the slowest device's fwd_comp + fwd_comm + bwd_comm + bwd_comp per training "
        f"step. {evaluation_note(evaluation)} Every placement is memory-legal."
    )
