"""Settings of a DreamShard training run (kept free of torch so the CLI starts fast)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

COSTNET_LOSSES = ("mse", "relative", "log", "log-ratio")  # learn/costnet_fit.py, costnet_loss
# "auto": the loss a run's start network was fitted with (fitting_loss)
LOSS_CHOICES = ("auto", *COSTNET_LOSSES)
SHIPPED = "shipped"  # the name --model and --init-model know the package's own model by
# learn/costnet.py, CostNet (kept here free of torch)
COSTNET_ENCODERS = ("relu", "exp", "hybrid", "quantities")
# learn/costnet_data.py, load_examples ("step-split": DMP steps, each rank's own CPU work apart)
LABELS = ("raw", "normalised", "per-term", "step-split")
# what of a pre-trained cost network the measurements fit (learn/costnet_fit.py,
# fitted_parameters): "all" of it, only its "quantities" (what a unit of each kernel quantity
# costs: 18 positive weights), or "auto" (quantities_fitted)
FINETUNE_CHOICES = ("auto", "all", "quantities")


@dataclass
class TrainConfig:
    suite: str = "cpu-50x4"
    backend: str = "fbgemm"
    out: str = ".dreamshard/train"
    iterations: int = 10
    placements_per_iteration: int = 10
    costnet_steps: int = 300
    costnet_batch: int = 64
    # the cost network's loss, one of LOSS_CHOICES: "mse" on costs divided by the median cost
    # (the paper's), "relative" (squared relative error), "log" (log space), "log-ratio" (the
    # shipped network's pre-training loss) or "auto" (fitting_loss); docs/learning.md
    costnet_loss: str = "mse"
    # the cost network's design, one of COSTNET_ENCODERS: "relu" (the paper's table encoder) or
    # "exp" (positive encodings and per-head linear terms: per-table costs add up; costnet.py),
    # "hybrid" (exp on top of the analytic model) or "quantities" (exp with kernel quantities)
    costnet_encoder: str = "quantities"
    # the cost network's labels: "raw" costs, or "normalised" by the reference group timed with
    # each fbgemm measurement, or "per-term": forward and backward each by the reference's own
    # (costs/reference.py; measurements without one are left out); "step-split": a DMP step
    # per rank as its own CPU work (forward head) and the rest of its wall-clock step (waits,
    # exchanges; the communication heads)
    labels: str = "raw"
    policy_updates: int = 10
    episodes: int = 10
    learning_rate: float = 5e-4
    entropy_weight: float = 1e-3
    warm_start: int = 20  # heuristic and random placements measured first (0: none)
    # placements of split tables measured in the warm start too (costs.collect's "split" mix;
    # 0: none): whole-table training data never shows the network the shards --split auto weighs
    warm_start_split: int = 0
    # on real hardware, the cost network is first fitted on this many placements labelled by
    # the simulated backend, scaled to this host (0: none; never on the simulated backend)
    pretrain: int = 2000
    # of which this many place split tables (costs.collect's "split" mix): labels for the
    # shards --split auto weighs, free on the simulated backend (0: whole tables only)
    pretrain_split: int = 0
    pretrain_steps: int = 3000
    # fine-tuning the shipped network on real hardware: this many tasks of its pre-training
    # family (learn/pretrain_data.py, 8 placements each, labelled by their own drawn models)
    # replayed beside the measurements (rehearsal_share of every batch), so it keeps what it
    # knew (0: none; 200, half of each batch, with the pre-training loss kept the shipped
    # network's wins on tables unlike the suite's but lost 7% on the suite's own at the main
    # job's 3 iterations: docs/learning.md)
    rehearsal: int = 0
    # the share of every batch those replayed tasks make (the rest: the measurements)
    rehearsal_share: float = 0.5
    # what of the network the measurements fit, one of FINETUNE_CHOICES ("auto": only the
    # quantity weights when a run on fbgemm starts from a pre-trained network, the prior fitted
    # whole before them; fitted whole on a few dozen placements of one suite, a network once
    # predicted negative compute for crowded devices: docs/learning.md, "Fine-tuning on a
    # host")
    finetune: str = "auto"
    # device counts the warm start cycles the training tasks through (empty: the suite's own)
    warm_start_devices: tuple[int, ...] = ()
    table_aware: bool = False
    lookahead: bool = True  # the policy also weighs the cost network's one-step lookahead
    train_tasks: int = 50
    measure_iterations: int | None = None  # fbgemm timed iterations (None: the backend's)
    measure_rounds: int | None = None  # dmp interleaved rounds a launch (None: the backend's)
    # the all-to-all model where it is modeled (costs/comm.py TOPOLOGIES); "auto": cpu-gloo on
    # the simulated backend, the device's own on fbgemm
    topology: str = "auto"
    # the hardware file the simulated backend labels for (costs/hardware.py; "": cpu, the
    # calibrated model); fbgemm and dmp time this host and take cpu only
    hardware: str = ""
    seed: int = 0
    dataset: str = ""  # cost dataset (default OUT/costs.sqlite)
    # the model the run starts from: "shipped" (the package's pre-trained cost network, for the
    # "quantities" design; "" too), "none" (from scratch) or a model file
    init_model: str = "shipped"
    # a Dask cluster the run's measurements fan out over (costs/fanout.py: a scheduler's
    # address, or local / local:N); "" : this process, or $DREAMSHARD_DASK_ADDRESS
    cluster: str = ""


def starts_from_shipped(config: TrainConfig) -> bool:
    """Whether a run starts from the package's pre-trained network (learn/train.py,
    start_model: the default, for the "quantities" design)."""
    return config.init_model in ("", SHIPPED) and config.costnet_encoder == "quantities"


def quantities_fitted(config: TrainConfig) -> bool:
    """Whether the measurements fit only the cost network's quantity weights: "quantities",
    or "auto" on fbgemm from a pre-trained network (the shipped one or a model file; not
    "none", from scratch, where every weight has to be learned)."""
    if config.finetune != "auto":
        return config.finetune == "quantities"
    return (
        config.backend == "fbgemm"
        and config.init_model != "none"
        and (config.init_model not in ("", SHIPPED) or starts_from_shipped(config))
    )


def default_loss(backend: str) -> str:
    """The cost network's loss a run on `backend` takes unless told: "auto" on `dmp`, whose
    whole training steps (10-100 ms here) sit under 1% of the shipped network's cost scale,
    where mse on scaled costs hardly moves it; the config's own default ("mse") otherwise."""
    return "auto" if backend == "dmp" else TrainConfig.costnet_loss


def fitting_loss(config: TrainConfig) -> str:
    """The cost network's loss for `config`: its own, or for "auto" the shipped network's
    pre-training loss ("log-ratio") when the run fine-tunes that network, so its costs that
    span orders of magnitude keep counting, and the paper's "mse" otherwise."""
    if config.costnet_loss != "auto":
        return config.costnet_loss
    return PretrainConfig.loss if starts_from_shipped(config) else "mse"


SHIPPED_DIR = Path(__file__).with_name("shipped")
SHIPPED_MODEL = SHIPPED_DIR / "model.pt"  # the pre-trained model the package ships


@dataclass
class PretrainConfig:
    out: str = ".dreamshard/pretrain/model.pt"  # `make shipped-model`: SHIPPED_MODEL
    seed: int = 0
    tasks: int = 2000  # tasks of the family, each with its own drawn analytic model
    placements: int = 8  # labelled placements of each
    steps: int = 8000  # Adam steps (4000: held-out Spearman within a task 0.976, 8000: 0.981)
    batch: int = 32  # placements a step
    learning_rate: float = 1e-3
    loss: str = "log-ratio"  # relative errors: the family's costs span orders of magnitude
    heldout: int = 100  # further tasks (seeds after the training ones) to report errors on
    pool: int = 2500  # tables of the family per batch size that tasks draw from
    members: int = 5  # networks fitted from seeds seed..: the first, and its ensemble
