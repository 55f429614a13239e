"""`dreamshard train`: the alternating DreamShard loop from the command line."""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

from dreamshard.cli.args import hardware_name, positive, share, topology_name
from dreamshard.costs.comm import TOPOLOGY_HELP
from dreamshard.errors import DreamshardError
from dreamshard.learn.rnn_config import RnnTrainConfig
from dreamshard.learn.train_config import (
    COSTNET_ENCODERS,
    COSTNET_LOSSES,
    FINETUNE_CHOICES,
    LABELS,
    LOSS_CHOICES,
    PretrainConfig,
    TrainConfig,
    default_loss,
)


def cmd_train(args: argparse.Namespace) -> None:
    from dreamshard.learn.train import train

    if args.costnet_only:
        fit_costnet_only(config_from(args), args.holdout)
        return
    train(config_from(args))


def fit_costnet_only(config: TrainConfig, holdout: float) -> None:
    """`train --costnet-only`: the cost network alone on DIR/costs.sqlite, no measuring."""
    from dreamshard.learn.model_file import save_model
    from dreamshard.learn.train import dataset_path, train_costnet
    from dreamshard.planners.dreamshard_planner import one_thread

    if not dataset_path(config).exists():
        raise DreamshardError(
            f"no cost dataset at {dataset_path(config)}; fill it first (dreamshard collect, or "
            f"dreamshard merge --dataset {dataset_path(config)} OTHER.sqlite)"
        )
    with one_thread():  # a small network: a second thread only waits on the first
        model, _, errors = train_costnet(config, holdout=holdout)
    path = Path(config.out) / "costnet.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_model(model, path)
    print(
        f"wrote {path} (an untrained policy: judge or place with its cost network only); "
        f"held-out fwd_comp MAPE {errors['fwd_comp_mape']:.1%}, bwd_comp "
        f"{errors['bwd_comp_mape']:.1%}, overall {errors['overall_mape']:.1%}"
    )


def device_counts(text: str) -> tuple[int, ...]:
    """An argparse type: device counts such as 2,4,8 (empty: none)."""
    return tuple(positive(int)(x) for x in text.split(",") if x)


# `dreamshard train`'s options, one per TrainConfig field: argparse's settings but the default,
# which is the config's (the benchmarks that train a model take some of them, `training_options`)
COUNTS = (
    ("iterations", "alternating iterations"),
    ("placements_per_iteration", "placements measured per iteration"),
    ("costnet_steps", "cost-network steps per iteration"),
    ("costnet_batch", "cost-network batch"),
    ("policy_updates", "policy updates per iteration"),
    ("episodes", "episodes per policy update"),
    ("warm_start", "heuristic and random placements measured first (0: none)"),
    (
        "warm_start_split",
        "placements of split tables measured in the warm start too (0: none), so the cost "
        "network has seen the shards --split auto weighs (collect --mix split)",
    ),
    (
        "pretrain",
        "on real hardware, placements labelled by the simulated backend (scaled to this host) "
        "that the cost network is fitted on first (0: none)",
    ),
    (
        "pretrain_split",
        "of those, placements of split tables (0: whole tables only), so the prior shows the "
        "network the shards --split auto weighs",
    ),
    ("pretrain_steps", "cost-network steps on those"),
    (
        "rehearsal",
        "on real hardware, from the shipped network: tasks of its pre-training family replayed "
        "beside the measurements (--rehearsal-share of every batch), so it keeps what it knew "
        "(0: none)",
    ),
    ("train_tasks", "training tasks of the suite"),
)
# the options of how a run fine-tunes its cost network, which the benchmarks that train a
# model also take
FINE_TUNING = ("rehearsal", "rehearsal_share", "costnet_loss", "finetune")
MAY_BE_ZERO = ("warm_start", "warm_start_split", "pretrain", "pretrain_split", "rehearsal")
TRAIN_OPTIONS: dict[str, dict] = {
    "suite": {"help": "suite"},
    "backend": {
        "choices": ["fbgemm", "simulated", "dmp"],
        "help": "where placements are measured: fbgemm (fused kernels), simulated (the analytic "
        "model) or dmp (real TorchRec training steps, one rank per device: the cost network "
        "learns each rank's step, the slowest rank's as the overall cost; docs/learning.md)",
    },
    "out": {"help": "run folder"},
    "seed": {"type": int},
    **{
        name: {"type": int if name in MAY_BE_ZERO else positive(int), "help": text}
        for name, text in COUNTS
    },
    "costnet_loss": {
        "choices": LOSS_CHOICES,
        "help": "the cost network's loss: mse on costs scaled by the median cost (the paper's), "
        "relative (squared relative error), log (squared error of log costs), log-ratio (the "
        "shipped network's pre-training loss) or auto (log-ratio when fine-tuning the shipped "
        "network, mse otherwise; with --rehearsal 200 it keeps the shipped network's wins on "
        "tables unlike the suite's, docs/learning.md); default mse, auto with --backend dmp",
        "default": None,
    },
    "costnet_encoder": {
        "choices": COSTNET_ENCODERS,
        "help": "the cost network's design: relu (the paper's table encoder), exp (positive "
        "table encodings whose per-table costs add up on a device) or hybrid (exp learning a "
        "residual on top of the calibrated analytic model; real hardware only) or quantities "
        "(exp whose tables also carry their lookups, lookup volume, touched rows and width, "
        "weighed by what it learns; docs/learning.md)",
    },
    "labels": {
        "choices": LABELS,
        "help": "the cost network's labels: raw costs, or normalised by the reference group "
        "timed with each fbgemm measurement, so labels from different runs agree (per-term: "
        "the forward and backward each by the reference's own); measurements without one are "
        "left out. step-split (--backend dmp): each rank's step as its own CPU work and the "
        "rest (waits in the exchanges), the network's forward and communication heads",
    },
    "rehearsal_share": {
        "type": share,
        "help": "with --rehearsal, the share of every cost-network batch that is replayed",
    },
    "finetune": {
        "choices": FINETUNE_CHOICES,
        "help": "what of a pre-trained cost network the measurements fit: all of it, or only "
        "its quantity weights (what a unit of each kernel quantity costs on this host), so "
        "what it learned on a broad family stays; auto: quantities on fbgemm from a "
        "pre-trained network (fitted whole on a few dozen placements of one suite, a network "
        "once predicted negative compute for crowded devices; docs/learning.md), all "
        "otherwise",
    },
    "learning_rate": {"type": positive(float), "help": "Adam, decaying linearly"},
    "entropy_weight": {"type": float},
    "warm_start_devices": {
        "type": device_counts,
        "help": "device counts the warm start cycles the training tasks through, e.g. 2,4,8",
    },
    "table_aware": {
        "action": "store_true",
        "help": "also give the policy the features of the table being placed",
    },
    "lookahead": {
        "flag": "--no-lookahead",
        "action": "store_false",
        "help": "train the paper's policy, without the cost network's one-step lookahead among "
        "its inputs (how much higher the predicted overall would be with the table on each "
        "device than on the best one)",
    },
    "topology": {
        "type": topology_name,
        "metavar": "TOPOLOGY",
        "help": "all-to-all model where it is not measured (auto: cpu-gloo on the simulated "
        f"backend, the device's own on fbgemm); {TOPOLOGY_HELP}",
    },
    "hardware": {
        "type": hardware_name,
        "metavar": "NAME|FILE",
        "help": "the hardware file the simulated backend labels placements for (a shipped one "
        "or your own, docs/hardware.md; empty: cpu, the model calibrated on this host); fbgemm "
        "and dmp time this host",
    },
    "measure_iterations": {
        "type": positive(int),
        "help": "fbgemm: timed iterations per device; dmp: timed training steps per round",
    },
    "measure_rounds": {
        "type": positive(int),
        "help": "dmp: interleaved rounds a launch, a label being each rank's median over them "
        "(default 3; a label from one round agrees with the others' only 0.7-0.8 in rank)",
    },
    "cluster": {
        "metavar": "ADDRESS",
        "help": "measure on a Dask cluster: a scheduler's address (tcp://HOST:8786) or local / "
        "local:N (an embedded one); workers measure under their host's lock, this process "
        "writes the dataset (none: this process, or $DREAMSHARD_DASK_ADDRESS)",
    },
    "init_model": {
        "metavar": "MODEL",
        "help": "the model the run starts from: shipped (the cost network pre-trained on a broad "
        "family of tables that the package ships; `dreamshard pretrain` made it), none (from "
        "scratch) or a model file",
    },
}


def training_options(
    parser: argparse.ArgumentParser, names=tuple(TRAIN_OPTIONS), defaults=None
) -> None:
    """`dreamshard train`'s options for the TrainConfig fields `names`, with `defaults`' values
    (a TrainConfig; default the config's own)."""
    defaults = defaults or TrainConfig()
    for name in names:
        settings = dict(TRAIN_OPTIONS[name])
        flag = settings.pop("flag", f"--{name.replace('_', '-')}")
        told = "default" in settings  # a default its help tells itself
        value = settings.pop("default") if told else getattr(defaults, name)
        shown = ",".join(map(str, value)) if isinstance(value, tuple) else value
        shown = "none" if value is None or value == () else shown
        if settings.get("action") is None and not told:
            text = settings.get("help", "")
            settings["help"] = f"{text} (default {shown})" if text else f"default {shown}"
        parser.add_argument(flag, dest=name, default=value, **settings)


def fine_tuning(args: argparse.Namespace, backend: str) -> dict:
    """The `FINE_TUNING` options `args` holds, a loss not given being `backend`'s."""
    given = {name: getattr(args, name) for name in FINE_TUNING}
    if given["costnet_loss"] is None:
        given["costnet_loss"] = default_loss(backend)
    return given


def config_from(args: argparse.Namespace, **fixed) -> TrainConfig:
    """The TrainConfig of the options `args` holds (`training_options`), and `fixed`; a loss
    not given is the backend's (`default_loss`)."""
    given = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if hasattr(args, f.name)}
    given = {**given, **fixed}
    if given.get("costnet_loss", "") is None:
        given["costnet_loss"] = default_loss(given.get("backend", TrainConfig.backend))
    return TrainConfig(**given)


def add_train_command(sub) -> None:
    tr = sub.add_parser(
        "train",
        help="train the cost network and the policy (alternating, as DreamShard); resumes "
        "from DIR/checkpoint.pt after a crash",
    )
    training_options(tr)
    tr.add_argument(
        "--costnet-only",
        dest="costnet_only",
        action="store_true",
        help="fit only the cost network on the measurements already in DIR/costs.sqlite "
        "(fill it with dreamshard collect or merge): nothing is measured and the policy is not "
        "trained; writes DIR/costnet.pt",
    )
    tr.add_argument(
        "--holdout",
        type=share,
        default=0.2,
        help="with --costnet-only, the latest share of the measurements kept out of the fit "
        "and scored (default 0.2)",
    )
    tr.set_defaults(func=cmd_train)


def cmd_pretrain(args: argparse.Namespace) -> None:
    from dreamshard.learn.shipped import pretrain_model, save_shipped
    from dreamshard.planners.dreamshard_planner import one_thread

    config = PretrainConfig(**{f.name: getattr(args, f.name) for f in fields(PretrainConfig)})
    with one_thread():
        model = pretrain_model(config)
    path = save_shipped(model, config.out)
    print(f"wrote {path} and its manifest {path.with_name('manifest.json')}")


def add_pretrain_command(sub) -> None:
    defaults = PretrainConfig()
    pre = sub.add_parser(
        "pretrain",
        help="pre-train a cost network on a broad family of tables labelled by randomised "
        "analytic models (the package ships one: --model shipped); writes a model file and "
        "its manifest",
    )
    texts = {
        "out": "model file to write; its manifest goes beside it",
        "seed": "seed of the tasks, their analytic models and the fit",
        "tasks": "tasks of the family, each with its own drawn analytic model",
        "placements": "labelled placements of each task",
        "steps": "Adam steps",
        "batch": "placements a step",
        "learning_rate": "Adam's learning rate, decaying linearly",
        "loss": "the cost network's loss",
        "heldout": "further tasks of the family its errors are reported on",
        "pool": "tables of the family per batch size that tasks draw their tables from",
        "members": "networks fitted from seeds SEED..: the model's and its ensemble, whose "
        "spread the planner's confidence in a predicted gain comes from",
    }
    for f in fields(PretrainConfig):
        value = getattr(defaults, f.name)
        kind = str if isinstance(value, str) else type(value)
        kind = kind if kind is str or f.name == "seed" else positive(kind)
        pre.add_argument(
            f"--{f.name.replace('_', '-')}",
            dest=f.name,
            type=kind,
            default=value,
            choices=COSTNET_LOSSES if f.name == "loss" else None,
            help=f"{texts[f.name]} (default {value})",
        )
    pre.set_defaults(func=cmd_pretrain)


def cmd_train_rnn(args: argparse.Namespace) -> None:
    # torch models: imported only when this command runs
    from dreamshard.learn.model_file import resolve_model
    from dreamshard.learn.rnn import save_rnn, train_rnn
    from dreamshard.planners.dreamshard_planner import one_thread

    model = resolve_model(args.model)
    values = {f.name: getattr(args, f.name) for f in fields(RnnTrainConfig)}
    with one_thread():  # thousands of tiny ops: a second thread only slows them down
        placer = train_rnn(model, RnnTrainConfig(**values), source=args.model)
    save_rnn(placer, args.out)
    print(f"wrote {args.out}: {placer.metadata['budget']}")


def add_train_rnn_command(sub) -> None:
    defaults, policy = RnnTrainConfig(), TrainConfig()
    tr = sub.add_parser(
        "train-rnn",
        help="train the paper's RNN baseline (an LSTM placer, after Mirhoseini et al. 2017) "
        "against a trained model's cost network, with its policy's budget; it serves only "
        "its suite's device count",
        description="An LSTM reads the tables largest first and picks a device for each "
        "(memory-masked), trained with REINFORCE on the cost network of --model (no hardware "
        "is used). By default it trains on the model's suite with as many updates of as many "
        "episodes as the model's policy got (its iterations x policy updates per iteration, "
        f"read from the model's metadata: {policy.iterations} x {policy.policy_updates} "
        f"updates of {policy.episodes} episodes with dreamshard train's defaults), so it is a "
        "fair baseline; the file it writes records that budget "
        "and a fingerprint of the cost network. Its output layer has one unit per device, so "
        "the file places only tasks with the device count of the suite: the limitation "
        "DreamShard removes. Use it with: dreamshard place --method rnn --model OUT.",
    )
    tr.add_argument(
        "--model",
        required=True,
        help="trained DreamShard model whose cost network scores the episodes and whose "
        "policy's budget the RNN gets: a model file, the folder dreamshard train --out "
        "wrote, or a registered MLflow model (models:/NAME@ALIAS)",
    )
    tr.add_argument("--out", required=True, help="where to write the RNN placer (.pt)")
    tr.add_argument(
        "--suite",
        default=defaults.suite,
        help="training tasks, and the device count (default: the model's suite)",
    )
    for name, help_text in (
        ("updates", "REINFORCE updates (default: as many as the model's policy got)"),
        ("episodes", "episodes of one task per update (default: the model's policy's)"),
        ("train_tasks", "training tasks of the suite (default: the model's)"),
        ("hidden", f"LSTM width (default {defaults.hidden})"),
    ):
        tr.add_argument(
            f"--{name.replace('_', '-')}",
            dest=name,
            type=positive(int),
            default=getattr(defaults, name),
            help=help_text,
        )
    training_options(tr, ("learning_rate", "entropy_weight"), defaults)
    tr.add_argument("--seed", type=int, default=defaults.seed, help="default 0")
    tr.set_defaults(func=cmd_train_rnn)
