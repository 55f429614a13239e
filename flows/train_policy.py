"""Flow `train-policy`: the alternating DreamShard loop (or the policy alone on a fixed cost net).

The trained model is registered in MLflow as `dreamshard-policy` and `dreamshard-costnet`
(new versions, tagged with the suite); `evaluate` decides which alias they get.
"""

from __future__ import annotations

import mlflow
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from dreamshard.learn.train import train
from dreamshard.learn.train_config import TrainConfig, default_loss
from dreamshard.report import markdown_table
from dreamshard.tracking import COSTNET_MODEL, POLICY_MODEL, log_registered_model
from flows.common import mlflow_run, publish, work_dir


@task(cache_policy=NO_CACHE)
def run_training(config: TrainConfig) -> list[dict]:
    def log_iteration(record: dict, losses: list[float], rewards: list[float]) -> None:
        i = record["iteration"]
        for k, loss in enumerate(losses):
            mlflow.log_metric("costnet_loss", loss, step=(i - 1) * max(1, len(losses)) + k)
        for k, reward in enumerate(rewards):
            mlflow.log_metric("policy_reward_ms", reward, step=(i - 1) * len(rewards) + k)
        keep = ("dataset_size", "probe_predicted_ms")
        mlflow.log_metrics({k: record[k] for k in keep}, step=i)

    return train(config, on_iteration=log_iteration).metadata["history"]


def history_figure(history: list[dict]):
    """Per iteration: the policy's mean reward and the cost network's last loss."""
    from plotly.subplots import make_subplots

    figure = make_subplots(
        rows=1, cols=2, subplot_titles=("policy reward (ms, higher is better)", "cost-net loss")
    )
    steps = [h["iteration"] for h in history]
    figure.add_scatter(
        x=steps, y=[h["policy_reward"] for h in history], row=1, col=1, name="reward"
    )
    figure.add_scatter(x=steps, y=[h["costnet_loss"] for h in history], row=1, col=2, name="loss")
    figure.update_xaxes(title_text="iteration")
    return figure


@flow(name="train-policy", log_prints=True)
def train_policy(
    suite: str = "cpu-50x4",
    backend: str = "fbgemm",
    iterations: int = 10,
    placements_per_iteration: int = 10,
    costnet_steps: int = 300,
    policy_updates: int = 10,
    episodes: int = 10,
    warm_start: int = 0,
    init_model: str = "",
    fixed_costnet: bool = False,
    seed: int = 0,
    out: str | None = None,
    parent_run_id: str | None = None,
    cluster: str | None = None,
    train_tasks: int = 50,
) -> dict:
    """Train, register the model; returns its registered versions {"policy", "costnet"}.
    With `cluster` (a Dask scheduler's address, or local / local:N) its measurements fan out
    over the cluster's workers (`train --cluster`).

    `fixed_costnet` trains the policy alone on `init_model`'s cost network: nothing is measured
    and the cost network does not change.
    """
    folder = work_dir(suite, out)
    if fixed_costnet:
        placements_per_iteration, costnet_steps, warm_start = 0, 0, 0
    config = TrainConfig(
        suite=suite,
        backend=backend,
        costnet_loss=default_loss(backend),
        out=str(folder / "policy"),
        iterations=iterations,
        placements_per_iteration=placements_per_iteration,
        costnet_steps=costnet_steps,
        policy_updates=policy_updates,
        episodes=episodes,
        warm_start=warm_start,
        seed=seed,
        dataset=str(folder / "costs.sqlite"),
        init_model=init_model,
        cluster=cluster or "",
        train_tasks=train_tasks,
    )
    params = {k: v for k, v in vars(config).items() if not k.startswith("measure_")}
    with mlflow_run(
        "train-policy", suite, {**params, "fixed_costnet": fixed_costnet}, parent_run_id
    ) as run:
        history = run_training(config)
        model_path = folder / "policy" / "model.pt"
        mlflow.log_dict({"history": history}, "history.json")
        mlflow.log_figure(history_figure(history), "training.html")
        tags = {"suite": suite, "backend": backend, "run_id": run.info.run_id}
        version = log_registered_model(model_path, POLICY_MODEL, "policy", tags)
        costnet_version = log_registered_model(model_path, COSTNET_MODEL, "costnet", tags)
        mlflow.set_tag("registered_version", version)
        rows = [
            [h["iteration"], h["dataset_size"], h["costnet_loss"], h["policy_reward"]]
            for h in history
        ]
        publish(
            f"train-policy-{suite}",
            f"DreamShard training on {suite}: registered version {version} of {POLICY_MODEL}",
            markdown_table(
                ["iteration", "measurements", "cost-net loss", "policy reward ms"], rows
            ),
        )
    return {"policy": version, "costnet": costnet_version}
