"""One plan whatever the entry point (issue 49): the registered model served as an MLflow pyfunc,
`dreamshard place --model models:/...` and `DreamShardPlanner` with the same model give the
same plan for the same task and seed, a table split into shards included."""

from __future__ import annotations

import json

import pandas as pd
import pytest

pytest.importorskip("torchrec")  # `make test` installs it

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig  # noqa: E402
from torchrec.distributed.planner import Topology  # noqa: E402

from dreamshard.cli.main import main  # noqa: E402
from dreamshard.integrations.dmp_planner import DreamShardPlanner  # noqa: E402
from dreamshard.integrations.torchrec_export import placement_from_sharding_plan  # noqa: E402
from dreamshard.integrations.torchrec_tables import write_table_spec  # noqa: E402
from dreamshard.learn.train_config import SHIPPED_MODEL  # noqa: E402
from dreamshard.placement.tasks import GIB, placement_task  # noqa: E402
from dreamshard.tables.sources import BIN_COLUMNS, load_tables  # noqa: E402
from dreamshard.tracking import tables_from_frame  # noqa: E402

DEVICES, MEM_GB, SEED, BUDGET = 4, 0.0025, 3, 60.0  # a budget no plan of these runs into
# name, rows, dim: "hot" (2.5 MiB in fp32) fits no device of 2.5 MiB whole
TABLES = [("hot", 12_000, 64), ("a", 2000, 32), ("b", 5000, 16), ("c", 800, 8), ("d", 3000, 32)]


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        configs = [
            EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=[n])
            for n, r, d in TABLES
        ]
        self.embedding_bags = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))


@pytest.fixture
def registered(tmp_path, monkeypatch) -> str:
    """The shipped model registered in a fresh sqlite MLflow store, as train-policy does."""
    import mlflow

    from dreamshard.tracking import POLICY_MODEL, connect, log_registered_model, use_experiment

    monkeypatch.setenv("DREAMSHARD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    connect()
    use_experiment("entry-points")
    with mlflow.start_run():
        version = log_registered_model(SHIPPED_MODEL, POLICY_MODEL, "policy", {})
    return f"models:/{POLICY_MODEL}/{version}"


def test_the_pyfunc_the_cli_and_dreamshard_planner_give_one_plan(registered, tmp_path, capsys):
    import mlflow.pyfunc

    tables_file = tmp_path / "tables.json"
    write_table_spec(Model(), tables_file)  # the tables as DreamShardPlanner sees them
    tables = load_tables(tables_file)
    cap = int(MEM_GB * GIB)

    # 1. the command line
    plan_file = tmp_path / "plan.json"
    flags = ["--devices", str(DEVICES), "--mem-gb", str(MEM_GB), "--precision", "fp32"]
    flags += ["--method", "dreamshard", "--model", registered, "--seed", str(SEED)]
    flags += ["--time-budget", str(BUDGET), "--out", str(plan_file)]
    assert main(["place", "--tables", str(tables_file), *flags]) == 0
    capsys.readouterr()
    cli = json.loads(plan_file.read_text())["placement"]

    # 2. TorchRec's planner interface (a cuda topology: TorchRec's sharder offers every kind
    # there, as the command line may use; planning runs on the meta device)
    topology = Topology(world_size=DEVICES, compute_device="cuda", hbm_cap=cap)
    # the method's own plan: the reference rule (TorchRec's plan kept unless the calibrated
    # gain clears the margin) is off, as it is for the pyfunc and `place` (test_reference_rule)
    planner = DreamShardPlanner(
        topology, model=registered, reserve=False, seed=SEED, time_budget=BUDGET, reference=False
    )
    model = Model()
    task = planner.task(model)
    assert task.memory_cap_bytes == cap and task.precision == "fp32"
    placement = placement_from_sharding_plan(task, planner.plan(model))
    shards = placement_task(task, placement).tables
    dmp = {s.name: int(d) for s, d in zip(shards, placement.devices)}

    # 3. the MLflow model as anyone loads it, histogram columns included
    rows = [
        {"name": t.name, "rows": t.rows, "dim": t.dim, "pooling_factor": t.pooling_factor}
        | dict(zip(BIN_COLUMNS, t.histogram))
        for t in tables
    ]
    served = mlflow.pyfunc.load_model(registered)
    params = {"num_devices": DEVICES, "memory_cap_bytes": cap, "precision": "fp32"}
    params |= {"seed": SEED, "time_budget": BUDGET}
    out = served.predict(pd.DataFrame(rows), params=params)
    pyfunc = dict(zip(out["shard"], (int(d) for d in out["device"])))

    assert cli == dmp == pyfunc, (cli, dmp, pyfunc)
    assert "hot" not in cli and any(name.startswith("hot[") for name in cli)  # split
    assert set(out["name"]) == {t.name for t in tables}
    assert tables_from_frame(pd.DataFrame(rows)) == tuple(tables)  # the histograms read
    # the histogram is optional (these tables have the default one): the same plan without it
    bare = served.predict(pd.DataFrame(rows)[["name", "rows", "dim", "pooling_factor"]], params)
    assert bare.equals(out)
    assert set(out.loc[out["name"] == "hot", "kind"]) <= {"column", "row"}
    # the signature names the histogram (MLflow no longer drops it) and the planning params
    signature = served.metadata.get_input_schema().input_names()
    assert set(BIN_COLUMNS) <= set(signature)
    names = {p.name for p in served.metadata.get_params_schema().params}
    assert {"seed", "split", "time_budget", "constraints", "optimizer", "hardware"} <= names

    # 4. a hardware file: the three plan alike for it too
    assert main(["place", "--tables", str(tables_file), *flags, "--hardware", "h100-sxm"]) == 0
    capsys.readouterr()
    cli = json.loads(plan_file.read_text())["placement"]
    planner = DreamShardPlanner(
        topology,
        model=registered,
        reserve=False,
        seed=SEED,
        time_budget=BUDGET,
        hardware="h100-sxm",
        reference=False,
    )
    placement = placement_from_sharding_plan(task, planner.plan(model))
    shards = placement_task(task, placement).tables
    dmp = {s.name: int(d) for s, d in zip(shards, placement.devices)}
    out = served.predict(pd.DataFrame(rows), params=params | {"hardware": "h100-sxm"})
    pyfunc = dict(zip(out["shard"], (int(d) for d in out["device"])))
    assert cli == dmp == pyfunc, (cli, dmp, pyfunc)
