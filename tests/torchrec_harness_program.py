"""The program `test_torchrec_harness.py` runs on 2 gloo ranks under torchrun: TorchRec's own
correctness harness, `torchrec.distributed.test_utils.test_sharding.
sharding_single_rank_test_single_process` (one training step of the sharded model compared with
the unsharded one), with `DreamShardPlanner` where the harness builds its
`EmbeddingShardingPlanner`, for each case of the job in one launch.

    python -m torch.distributed.run --nproc_per_node 2 \
        -m tests.torchrec_harness_program --job J --out R

(from the repository root, or with it on PYTHONPATH).

The model and tables are the ones TorchRec's own model-parallel tests use (`TestSparseNN`, six
tables, two of them sharing features, and two weighted tables; `ModelParallelTestShared.
_build_tables_and_groups`). A case names its sharders (TorchRec's default
`EmbeddingBagCollectionSharder`, or its `TestEBCSharder` that offers one sharding type and
kernel), TorchRec `ParameterConstraints` forcing a table's sharding type, the split mode and
the fused learning rate (the harness's unsharded model steps SGD at 0.1: any other rate is a
mismatch it must catch). Each rank reports, per case, whether the harness passed (or its
error's first line) and the sharding type of every table in the plan it trained with.

The installed torchrec wheel lacks `torchrec.distributed.tests`, which `test_sharding` imports
for one name used on its 2D-parallel path only (`TestEmbeddingCollectionSharder`, a sharder for
`submodule_configs`); that module is registered here as one whose class refuses to be made, so
the 2D path fails loudly if anything took it. Nothing else of the harness is replaced.
"""

from __future__ import annotations

import sys
import types

import torch
import torch.distributed as dist


class MissingSharder:
    """Stands where the wheel's missing 2D-path sharder would be; refuses to be made."""

    def __init__(self, *args, **kwargs) -> None:
        raise RuntimeError(
            "torchrec.distributed.tests is not in the installed wheel: the harness's 2D path "
            "(submodule_configs) cannot run here"
        )


def register_missing_module() -> None:
    name = "torchrec.distributed.tests.test_sequence_model"
    if name in sys.modules:
        return
    package = types.ModuleType("torchrec.distributed.tests")
    package.__path__ = []
    module = types.ModuleType(name)
    module.TestEmbeddingCollectionSharder = MissingSharder
    sys.modules.setdefault("torchrec.distributed.tests", package)
    sys.modules[name] = module


register_missing_module()

from fbgemm_gpu.split_embedding_configs import EmbOptimType  # noqa: E402
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder  # noqa: E402
from torchrec.distributed.planner import ParameterConstraints  # noqa: E402
from torchrec.distributed.test_utils import test_sharding  # noqa: E402
from torchrec.distributed.test_utils.emb_sharder import TestEBCSharder  # noqa: E402
from torchrec.distributed.test_utils.test_model import TestSparseNN  # noqa: E402
from torchrec.modules.embedding_configs import EmbeddingBagConfig  # noqa: E402

from dreamshard.integrations.dmp_planner import DreamShardPlanner  # noqa: E402
from gpu_tasks.distributed import rank_main  # noqa: E402

NUM_FEATURES, NUM_SHARED, NUM_WEIGHTED = 4, 2, 2  # as TorchRec's ModelParallelTestShared


def harness_tables() -> tuple[list, list, dict]:
    """TorchRec's test tables, weighted tables and embedding groups
    (`ModelParallelTestShared._build_tables_and_groups`, sum pooling, fp32)."""
    names = [f"table_{i}" for i in range(NUM_FEATURES + NUM_SHARED)]
    tables = [
        EmbeddingBagConfig(
            num_embeddings=(i + 1) * 10,
            embedding_dim=(i + 2) * 8,
            name=names[i],
            feature_names=[f"feature_{i}"],
        )
        for i in range(NUM_FEATURES)
    ]
    tables += [
        EmbeddingBagConfig(
            num_embeddings=(i + 1) * 10,
            embedding_dim=(i + 2) * 8,
            name=names[i + NUM_FEATURES],
            feature_names=[f"feature_{i}"],
        )
        for i in range(NUM_SHARED)
    ]
    weighted = [
        EmbeddingBagConfig(
            num_embeddings=(i + 1) * 10,
            embedding_dim=(i + 2) * 4,
            name=f"weighted_table_{i}",
            feature_names=[f"weighted_feature_{i}"],
        )
        for i in range(NUM_WEIGHTED)
    ]
    shared = [f"feature_{i}" for i in range(NUM_SHARED)]
    groups = {
        "group_0": [
            f"{feature}@{table.name}" if feature in shared else feature
            for table in tables
            for feature in table.feature_names
        ]
    }
    return tables, weighted, groups


def sharders_of(case: dict) -> list:
    fused = {"learning_rate": case.get("learning_rate", 0.1)}
    if case.get("only"):
        kernel = "dense" if case["only"] == "data_parallel" else "fused"
        return [TestEBCSharder(case["only"], kernel, fused)]
    return [EmbeddingBagCollectionSharder(fused_params=fused)]


class RecordingPlanner(DreamShardPlanner):
    """DreamShardPlanner that keeps the sharding type of each table of its last plan."""

    kinds: dict[str, str] = {}

    def collective_plan(self, module, sharders=None, pg=None):
        plan = super().collective_plan(module, sharders, pg)
        self.kinds = {n: s.sharding_type for m in plan.plan.values() for n, s in m.items()}
        return plan


def run_case(case: dict, rank: int, world: int) -> dict:
    planners: list[RecordingPlanner] = []

    def planner(topology, constraints=None, **_):
        """DreamShardPlanner where the harness makes TorchRec's planner, on its topology."""
        planners.append(
            RecordingPlanner(
                topology, constraints=constraints, split=case.get("split", "auto"), reserve=False
            )
        )
        return planners[-1]

    constraints = {
        name: ParameterConstraints(sharding_types=[kind])
        for name, kind in case.get("constraints", {}).items()
    }
    tables, weighted, groups = harness_tables()
    test_sharding.EmbeddingShardingPlanner = planner
    try:
        test_sharding.sharding_single_rank_test_single_process(
            pg=dist.group.WORLD,
            device=torch.device("cpu"),
            rank=rank,
            world_size=world,
            model_class=TestSparseNN,
            embedding_groups=groups,
            tables=tables,
            weighted_tables=weighted,
            sharders=sharders_of(case),
            optim=EmbOptimType.EXACT_SGD,
            constraints=constraints or None,
        )
        outcome = "passed"
    except AssertionError as exc:  # the harness's comparison failed
        outcome = "failed: " + (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    kinds = planners[-1].kinds if planners else {}
    return {"name": case["name"], "outcome": outcome, "kinds": kinds, "planners": len(planners)}


def run_rank(job: dict) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    return {"cases": [run_case(case, rank, world) for case in job["cases"]]}


if __name__ == "__main__":
    rank_main(run_rank, __doc__.splitlines()[0], lambda job: "cpu")
