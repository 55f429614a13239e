"""Flow `pipeline`: collect costs, fit the cost network, train the policy, evaluate; the main job.

`python -m flows.pipeline` runs it in Prefect's ephemeral mode (no server) with MLflow in
sqlite under the state folder, then prints the evaluation table and how to look at the runs.
"""

from __future__ import annotations

import argparse
import sys
import time

from prefect import flow

from dreamshard.errors import DreamshardError
from dreamshard.report import format_table
from dreamshard.tracking import connect
from flows.collect_costs import collect_costs
from flows.common import mlflow_run, on_cluster, work_dir
from flows.evaluate import evaluate_models
from flows.train_cost_model import train_cost_model
from flows.train_policy import train_policy


@flow(name="pipeline", log_prints=True)
def pipeline(
    suite: str = "cpu-50x4",
    backend: str = "fbgemm",
    warm_start: int = 20,
    iterations: int = 3,
    placements_per_iteration: int = 5,
    costnet_steps: int = 300,
    policy_updates: int = 10,
    episodes: int = 10,
    eval_tasks: int = 4,
    rounds: int = 3,
    seed: int = 0,
    out: str | None = None,
    eval_backend: str | None = None,
    cluster: str | None = None,
    train_tasks: int = 50,
    pretrain_steps: int = 1500,
    eval_random: bool = False,
) -> dict:
    """The four flows in a row, each an MLflow run nested under this one.

    `backend` measures what the models learn from; `eval_backend` (default: the same) measures
    the evaluation, for example "dmp" for real TorchRec training steps. `cluster` (a Dask
    scheduler's address, or local / local:N) measures the cost collection, the policy's
    training and the evaluation (a task's rounds a job) on its workers. `train_tasks`: the
    suite's training tasks the collection and the policy's training spread over (on `dmp`, a
    few, so that a launch measures several placements of one task). `pretrain_steps`: the
    steps of the cost network's simulated prior (`learn/pretrain.py`): half of `dreamshard
    train`'s 3000, which keeps the main job within five minutes here. `eval_random`: the
    random placement in the evaluation too (it is no reference of any ratio, nor of the
    promotion; off, the evaluation measures a sixth less).
    """
    params = dict(locals())
    with mlflow_run("pipeline", suite, {k: v for k, v in params.items() if v is not None}) as run:
        parent = run.info.run_id
        on_cluster(collect_costs, cluster)(
            suite,
            backend,
            warm_start,
            out=out,
            parent_run_id=parent,
            cluster=cluster,
            train_tasks=train_tasks,
        )
        costnet = train_cost_model(
            suite,
            backend,
            costnet_steps,
            seed,
            out,
            parent_run_id=parent,
            pretrain_steps=pretrain_steps,
        )
        versions = train_policy(
            suite,
            backend,
            iterations,
            placements_per_iteration,
            costnet_steps,
            policy_updates,
            episodes,
            init_model=costnet,
            seed=seed,
            out=out,
            parent_run_id=parent,
            cluster=cluster,
            train_tasks=train_tasks,
        )
        result = on_cluster(evaluate_models, cluster)(
            suite,
            backend,
            versions,
            eval_tasks,
            rounds,
            out=out,
            parent_run_id=parent,
            eval_backend=eval_backend,
            cluster=cluster,
            random_baseline=eval_random,
        )
    return {**result, "run_id": parent, "work_dir": str(work_dir(suite, out))}


def main(argv: list[str] | None = None) -> int:
    defaults = pipeline.fn.__defaults__
    names = pipeline.fn.__code__.co_varnames[: len(defaults)]
    parser = argparse.ArgumentParser(
        prog="python -m flows.pipeline",
        description="Collect costs, fit the cost network, train the DreamShard policy and "
        "evaluate it against the heuristics on held-out tasks, as one Prefect flow run with "
        "MLflow tracking (state in .dreamshard/ or $DREAMSHARD_HOME).",
    )
    for name, default in zip(names, defaults):
        flag = f"--{name.replace('_', '-')}"
        if isinstance(default, bool):  # --eval-random / --no-eval-random
            parser.add_argument(
                flag, dest=name, action=argparse.BooleanOptionalAction, default=default
            )
            continue
        kind = type(default) if default is not None else str
        parser.add_argument(flag, dest=name, type=kind, default=default, help=f"default {default}")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        connect()  # an unusable tracking URI stops here, before any work
        result = pipeline(**vars(args))
    except DreamshardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    header, rows = result["table"]
    print()
    print(format_table(header, rows))
    print(
        f"\ncandidate model version {result['candidate']['policy']} is now "
        f"{result['alias']}; pipeline took {time.monotonic() - start:.0f} s "
        f"(files in {result['work_dir']})"
    )
    print(
        "Cost: the slowest device's fwd_comp + fwd_comm + bwd_comm + bwd_comp per step. "
        + result["note"]
    )
    print("\nLook at the runs:   make mlflow-ui   (http://127.0.0.1:5000)")
    print("Open the dashboard: make dashboard   (http://127.0.0.1:8501)")
    print(
        "Place with the champion: .venv/bin/dreamshard place --tables TABLES --devices 4 "
        "--mem-gb 1 --method dreamshard --model models:/dreamshard-policy@champion"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
