"""Flow `train-cost-model`: fit the cost network on the suite's cost dataset."""

from __future__ import annotations

import mlflow
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from dreamshard.learn.model_file import save_model
from dreamshard.learn.train import train_costnet
from dreamshard.learn.train_config import TrainConfig, default_loss
from dreamshard.report import markdown_table
from flows.common import mlflow_run, publish, work_dir


@task(cache_policy=NO_CACHE)
def fit(config: TrainConfig):
    return train_costnet(config)


@flow(name="train-cost-model", log_prints=True)
def train_cost_model(
    suite: str = "cpu-50x4",
    backend: str = "fbgemm",
    steps: int = 300,
    seed: int = 0,
    out: str | None = None,
    parent_run_id: str | None = None,
    pretrain_steps: int = TrainConfig.pretrain_steps,
) -> str:
    """Fit a fresh cost network (80% of the measurements; the latest 20% scored); its file.
    `pretrain_steps`: the steps of the simulated prior fitted first (`learn/pretrain.py`)."""
    folder = work_dir(suite, out)
    config = TrainConfig(
        suite=suite,
        backend=backend,
        costnet_loss=default_loss(backend),
        out=str(folder),
        costnet_steps=steps,
        seed=seed,
        dataset=str(folder / "costs.sqlite"),
        pretrain_steps=pretrain_steps,
    )
    params = {
        "suite": suite,
        "backend": backend,
        "steps": steps,
        "seed": seed,
        "dataset": config.dataset,
        "pretrain": config.pretrain,  # the simulated prior (learn/pretrain.py)
        "pretrain_steps": config.pretrain_steps,
    }
    with mlflow_run("train-cost-model", suite, params, parent_run_id):
        model, losses, errors = fit(config)
        for step, loss in enumerate(losses):
            mlflow.log_metric("costnet_loss", loss, step=step)
        mlflow.log_metrics({f"heldout_{k}": v for k, v in errors.items()})
        mlflow.log_metric("dataset_size", model.metadata["examples"])
        if model.metadata["prior"]:
            mlflow.log_metric("prior_host_factor", model.metadata["prior"]["host_factor"])
        path = folder / "costnet.pt"
        save_model(model, path)
        mlflow.log_artifact(str(path))
        publish(
            f"train-cost-model-{suite}",
            f"Cost network on {suite} ({backend} costs), held-out errors",
            markdown_table(["metric", "value"], [[k, v] for k, v in errors.items()]),
        )
    return str(path)
