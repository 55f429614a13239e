"""Flow `evaluate`: every planner on held-out tasks, measured; promotes the candidate or not.

Planners: random (unless `random_baseline` is off), the four heuristics, the candidate model
and the current champion; with
`refine_backend`, also `candidate_refined`, the candidate's placement refined by measurement
(`dreamshard.evaluation.refine`; it never counts as the candidate's own). The
candidate becomes `champion` (in both registered models) only when its measured cost beats the
champion's on these tasks (paired geometric mean ratio below 1); otherwise it is `candidate`.
With `eval_backend` (for example "dmp": real TorchRec training steps,
`integrations/dmp_backend.py`), the placements are measured, and the promotion decided, on that
backend instead of the one the models were trained on.
"""

from __future__ import annotations

import mlflow
from prefect import flow

from dreamshard.costs.dataset import CostDataset
from dreamshard.costs.fanout import BackendSpec
from dreamshard.evaluation.evaluate import evaluate, evaluation_note, summary_table
from dreamshard.evaluation.refine import REFINE_SECONDS, refined_planner
from dreamshard.evaluation.results import Evaluation
from dreamshard.placement.registry import baseline_planners, named_planner
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.report import markdown_table
from dreamshard.tracking import (
    CANDIDATE,
    CHAMPION,
    COSTNET_MODEL,
    POLICY_MODEL,
    alias_version,
    load_registered_model,
    set_alias,
    tag_version,
)
from flows.common import TaskFanout, backend_for, mlflow_run, publish, work_dir

KINDS = ("baseline", "heuristic")  # the registered planners an evaluation runs (baseline: random)


def predictions(evaluation: Evaluation, model) -> list[dict]:
    """The candidate cost network's prediction beside the measured mean, per placement."""
    rows = []
    for t, task in enumerate(evaluation.tasks):
        for j, planner in enumerate(evaluation.planners):
            placement = evaluation.placements[t][j]
            devices, overall = model.costnet.predict_ms(task, placement)
            rows.append(
                {
                    "task": task.name,
                    "planner": planner,
                    "candidate": placement.candidate,
                    "predicted_overall_ms": overall,
                    "measured_overall_ms": float(evaluation.costs[:, t, j].mean()),
                    "predicted_devices_ms": devices.tolist(),
                    "measured_devices_ms": evaluation.breakdowns[t][j],
                }
            )
    return rows


def ratio_figure(evaluation: Evaluation):
    """Each planner's cost relative to the per-task best heuristic, one point per task."""
    import plotly.express as px

    ratios = evaluation.ratios("per_task_best_heuristic")
    rows = [
        {"planner": p, "task": task.name, "ratio": float(ratios[t, j])}
        for t, task in enumerate(evaluation.tasks)
        for j, p in enumerate(evaluation.planners)
    ]
    figure = px.box(
        rows,
        x="planner",
        y="ratio",
        points="all",
        hover_data=["task"],
        title=f"{evaluation.backend} cost / per-task best heuristic (lower is better)",
    )
    figure.add_hline(y=1.0, line_dash="dot")
    return figure


@flow(name="evaluate", log_prints=True)
def evaluate_models(
    suite: str = "cpu-50x4",
    backend: str = "fbgemm",
    candidate: dict | None = None,
    tasks: int = 5,
    rounds: int = 3,
    samples: int = 8,
    out: str | None = None,
    parent_run_id: str | None = None,
    refine_backend: str | None = None,
    refine_seconds: float = REFINE_SECONDS,
    eval_backend: str | None = None,
    cluster: str | None = None,
    random_baseline: bool = True,
) -> dict:
    """Measure every planner on `tasks` held-out tasks in `rounds` interleaved rounds.

    `candidate`: registered versions {"policy": "3", "costnet": "3"} (default: the latest
    `candidate` alias). `refine_backend` ("fbgemm", "simulated"): add the row
    `candidate_refined`, each task's placement refined on that backend for `refine_seconds`
    (placing time, reported as plan ms); the evaluation's rounds re-measure it like any other.
    Promotion compares the plain candidate only. `eval_backend` measures the evaluation
    (default: `backend`, whose costs the models were trained on). Each task's rounds are one
    retried Prefect task (`flows.common.measure_in_order`), here or, with `cluster` (run it
    through `flows.common.on_cluster`), on one Dask worker; this flow stores what comes back.
    `random_baseline` False leaves the random placement out (no ratio, and not the promotion,
    uses it; the main job saves a sixth of its evaluation). Returns the summary and the
    decision.
    """
    eval_backend = eval_backend or backend
    folder = work_dir(suite, out)
    dataset = str(folder / "costs.sqlite")
    if candidate is None:
        candidate = {
            "policy": alias_version(POLICY_MODEL, CANDIDATE),
            "costnet": alias_version(COSTNET_MODEL, CANDIDATE),
        }
    params = {
        "suite": suite,
        "backend": backend,
        "eval_backend": eval_backend,
        "tasks": tasks,
        "rounds": rounds,
        "samples": samples,
        "candidate_version": candidate["policy"],
        "random_baseline": random_baseline,
    }
    if refine_backend:
        params |= {"refine_backend": refine_backend, "refine_seconds": refine_seconds}
    with mlflow_run("evaluate", suite, params, parent_run_id):
        candidate_model = load_registered_model(f"models:/{POLICY_MODEL}/{candidate['policy']}")
        champion = alias_version(POLICY_MODEL, CHAMPION)
        planners = baseline_planners(kinds=KINDS if random_baseline else ("heuristic",))
        planners["candidate"] = named_planner("dreamshard", candidate_model, samples)
        if refine_backend:
            planners["candidate_refined"] = refined_planner(
                "dreamshard", backend_for(refine_backend), refine_seconds, candidate_model, samples
            )
        if champion is not None and champion != candidate["policy"]:
            champion_model = load_registered_model(f"models:/{POLICY_MODEL}@{CHAMPION}")
            planners["champion"] = named_planner("dreamshard", champion_model, samples)
        spec = parse_suite_name(suite, num_train_tasks=1, num_test_tasks=tasks)
        test_tasks = make_suite(spec).test_tasks
        evaluation = evaluate(
            test_tasks,
            planners,
            backend_for(eval_backend),
            CostDataset(dataset),
            rounds,
            suite,
            # its rounds are paired within this run: no reference group (`BackendSpec`)
            fanout=TaskFanout(BackendSpec(eval_backend, reference=False), bool(cluster)),
        )
        promote = (
            "champion" not in planners or evaluation.paired_ratio("candidate", "champion") < 1.0
        )
        alias = CHAMPION if promote else CANDIDATE
        summary = evaluation.summary_rows()
        mine = next(r for r in summary if r["planner"] == "candidate")
        figures = {
            "eval.suite": suite,
            "eval.tasks": len(test_tasks),
            "eval.backend": eval_backend,
            "eval.vs_strongest_heuristic": f"{mine['vs_strongest_heuristic']:.4f}",
            "eval.vs_per_task_best_heuristic": f"{mine['vs_per_task_best_heuristic']:.4f}",
            "eval.costs": evaluation.costs_made,
        }
        for name in (POLICY_MODEL, COSTNET_MODEL):
            kind = "policy" if name == POLICY_MODEL else "costnet"
            set_alias(name, alias, candidate[kind])
            tag_version(name, candidate[kind], figures)
        for row in summary:
            for key in ("vs_strongest_heuristic", "vs_per_task_best_heuristic", "mean_cost_ms"):
                mlflow.log_metric(f"{row['planner']}.{key}", row[key])
            if row["picked"]:  # which candidates the cost network picked (policy or heuristic)
                mlflow.set_tag(f"{row['planner']}.picked", row["picked"])
        mlflow.set_tags(
            {
                "strongest_heuristic": evaluation.strongest_heuristic(),
                "costs": evaluation.costs_made,
                "promoted": str(promote),
                "alias": alias,
            }
        )
        mlflow.log_dict(evaluation.to_dict(), "evaluation.json")
        mlflow.log_figure(ratio_figure(evaluation), "ratios.html")
        if eval_backend == backend:  # the cost network predicts costs of the backend it learnt
            mlflow.log_dict({"rows": predictions(evaluation, candidate_model)}, "predictions.json")
        header, rows = summary_table(evaluation)
        table = markdown_table(header, rows)
        verdict = f"candidate version {candidate['policy']} is now **{alias}**" + (
            f" (champion was version {champion})" if champion else ""
        )
        publish(
            f"evaluate-{suite}",
            f"Evaluation on {len(test_tasks)} held-out {suite} tasks, "
            f"{rounds} interleaved rounds, {eval_backend}",
            f"{table}\n\n{evaluation_note(evaluation)}\n\n{verdict}",
        )
    return {
        "summary": summary,
        "alias": alias,
        "promoted": promote,
        "champion_before": champion,
        "candidate": candidate,
        "table": (header, rows),
        "note": evaluation_note(evaluation),
    }
