"""DreamShard's alternating training loop, top to bottom.

Each iteration: (1) sample placements of training tasks with the current policy and measure
them on the backend, appending to the cost dataset; (2) fit the cost network on every
measurement so far; (3) train the policy with REINFORCE on the MDP the cost network estimates.
A checkpoint after every iteration lets a crashed run resume where it stopped; measurements
already stored are not repeated. Defaults are the paper's.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from dreamshard.costs.collect import Job, collect, collection_jobs
from dreamshard.costs.dataset import CostDataset, key_machine
from dreamshard.costs.fanout import BackendSpec, Fanout, fanout_for, measuring_setups
from dreamshard.costs.hardware import load_hardware
from dreamshard.costs.simulated import SimulatedModel
from dreamshard.costs.types import CostBackend
from dreamshard.errors import DreamshardError
from dreamshard.learn.costnet import CostNet
from dreamshard.learn.costnet_data import Example, load_examples
from dreamshard.learn.costnet_fit import costnet_errors, fit_costnet, measurement_optimizer
from dreamshard.learn.coverage import training_ranges
from dreamshard.learn.model_file import (
    DreamShardModel,
    load_model,
    model_from_state,
    model_state,
    read_torch_file,
    save_model,
    save_torch_atomic,
    shipped_model,
)
from dreamshard.learn.policy import PlacementPolicy, reinforce_loss
from dreamshard.learn.pretrain import (
    measured_rows,
    pretrain_costnet,
    rehearsal_examples,
    wants_prior,
    wants_rehearsal,
)
from dreamshard.learn.train_config import SHIPPED, TrainConfig, fitting_loss, starts_from_shipped
from dreamshard.placement.suites import make_suite, parse_suite_name
from dreamshard.tables.traces import DEFAULT_BATCH, table_batch_size


@dataclass
class TrainState:
    """Everything a resumed run needs; saved after every iteration."""

    iteration: int
    costnet: CostNet
    policy: PlacementPolicy
    costnet_optimizer: torch.optim.Optimizer
    policy_optimizer: torch.optim.Optimizer
    generator: torch.Generator
    rng: np.random.Generator
    history: list[dict] = field(default_factory=list)
    prior: dict = field(default_factory=dict)  # the simulated prior fitted first (pretrain.py)
    # the model the run started from: {"from": "shipped", a file or "none", "ranges": what
    # it had seen (learn.coverage)}
    start: dict = field(default_factory=dict)


def modeled_comm(backend) -> dict | None:
    """The cost network's `comm` for a backend that models the all-to-all (its topology and
    batch size), or None where communication is measured and the network must learn it."""
    topology = backend.config().get("topology")
    if topology in (None, "measured"):
        return None
    return {"topology": topology, "batch": int(getattr(backend, "batch_size", DEFAULT_BATCH))}


def hybrid_base(config: TrainConfig, comm: dict | None) -> dict:
    """The hybrid cost network's analytic model: the simulated backend's weights (this host's
    calibration, else the shipped ones) and the batch size of the suite's traces."""
    if config.backend == "simulated":
        raise DreamshardError(
            "the hybrid cost network learns a residual on the simulated backend's own model, "
            "so on --backend simulated it would start at the answer; use --costnet-encoder exp"
        )
    model = SimulatedModel.load()
    return {"fwd": list(model.fwd), "bwd": list(model.bwd), "batch": suite_batch(config, comm)}


def suite_batch(config: TrainConfig, comm: dict | None) -> int:
    """The batch size of the suite's traces (the backend's where the tables have none)."""
    spec = parse_suite_name(config.suite, num_train_tasks=1, num_test_tasks=1)
    tables = make_suite(spec).train_tasks[0].tables
    return int(table_batch_size(tables, comm["batch"] if comm else DEFAULT_BATCH))


def trained_hardware(config: TrainConfig) -> dict:
    """The hardware file a run's labels are for (name and content hash; model metadata)."""
    return load_hardware(config.hardware or "cpu").record()


def backend_spec(config: TrainConfig) -> BackendSpec:
    """The settings of the backend the run measures with."""
    return BackendSpec(
        config.backend,
        config.measure_iterations,
        topology=config.topology,
        rounds=config.measure_rounds,
        hardware=config.hardware or None,
    )


def fresh_state(config: TrainConfig, backend=None) -> TrainState:
    """Untrained networks (or `config.init_model`'s) and optimizers; `backend` (the run's,
    made from `config` when not given) says whether the cost network models communication."""
    torch.manual_seed(config.seed)
    if backend is None:
        backend = backend_spec(config).build()
    comm = modeled_comm(backend)
    analytic = hybrid_base(config, comm) if config.costnet_encoder == "hybrid" else None
    batch = suite_batch(config, comm) if config.costnet_encoder == "quantities" else None
    costnet = CostNet(comm=comm, encoder=config.costnet_encoder, analytic=analytic, batch=batch)
    policy = PlacementPolicy(table_aware=config.table_aware, lookahead=config.lookahead)
    start = start_model(config)
    if start is not None:  # its networks, this run's exchange
        costnet = CostNet(**{**start.costnet.config, "comm": comm})
        costnet.load_state_dict(start.costnet.state_dict())
        if start.policy.config == policy.config:
            policy.load_state_dict(start.policy.state_dict())
    return TrainState(
        0,
        costnet,
        policy,
        measurement_optimizer(costnet, config),
        torch.optim.Adam(policy.parameters(), lr=config.learning_rate),
        torch.Generator().manual_seed(config.seed),
        np.random.default_rng(config.seed),
        start={
            "from": "none" if start is None else config.init_model or SHIPPED,
            "ranges": {} if start is None else start.metadata.get("ranges") or {},
        },
    )


def start_model(config: TrainConfig) -> DreamShardModel | None:
    """The model a run starts from: `config.init_model`'s file, or the package's pre-trained
    network (`learn/shipped.py`: "" or "shipped", the default) for a "quantities" run, or None
    ("none", or another design: from scratch)."""
    if config.init_model == "none":
        return None
    if config.init_model in ("", SHIPPED):
        return shipped_model() if starts_from_shipped(config) else None
    return load_model(config.init_model)


def joined_ranges(ours: dict, theirs: dict) -> dict:
    """[min, max] of each quantity over two sets of ranges."""
    joined = {}
    for name, (low, high) in ours.items():
        other_low, other_high = theirs.get(name, (low, high))
        joined[name] = [min(low, other_low), max(high, other_high)]
    return joined


def save_checkpoint(state: TrainState, config: TrainConfig, path: Path) -> None:
    model = model_state(DreamShardModel(state.costnet, state.policy))
    save_torch_atomic(
        {
            "model": model,
            "iteration": state.iteration,
            "config": json.dumps(asdict(config)),
            "costnet_optimizer": state.costnet_optimizer.state_dict(),
            "policy_optimizer": state.policy_optimizer.state_dict(),
            "generator": state.generator.get_state(),
            "rng": json.dumps(state.rng.bit_generator.state),
            "history": json.dumps(state.history),
            "prior": json.dumps(state.prior),
        },
        path,
    )


# Settings a run may change when it goes on from its checkpoint: how long it runs, and where.
RESUMABLE_CHANGES = ("iterations", "out")


def load_checkpoint(path: Path, config: TrainConfig, backend=None) -> TrainState:
    """The training state saved at `path`; DreamshardError when the run that saved it had other
    settings (beyond `RESUMABLE_CHANGES`): going on from it would give a model of neither."""
    data = read_torch_file(path, "checkpoint")
    saved = json.loads(data.get("config", "{}"))
    now = json.loads(json.dumps(asdict(config)))  # as saved: tuples become lists
    changed = sorted(
        k for k in now if k in saved and k not in RESUMABLE_CHANGES and saved[k] != now[k]
    )
    if changed:
        were = ", ".join(f"{k} {saved[k]!r} (now {now[k]!r})" for k in changed)
        raise DreamshardError(
            f"{path} was saved by a run with other settings: {were}; pass the same settings "
            "to go on from it, or another --out (or remove it) to start afresh"
        )
    model = model_from_state(data["model"], path)
    state = fresh_state(config, backend)
    state.costnet, state.policy = model.costnet, model.policy
    state.costnet.train()
    state.policy.train()
    state.costnet_optimizer = measurement_optimizer(state.costnet, config)
    try:
        state.costnet_optimizer.load_state_dict(data["costnet_optimizer"])
    except ValueError as exc:  # saved before --finetune, fitting the other part
        raise DreamshardError(
            f"{path} fitted other weights of the cost network than --finetune "
            f"{config.finetune} does (saved before that option): pass --finetune all to go on "
            "from it, or another --out to start afresh"
        ) from exc
    state.policy_optimizer = torch.optim.Adam(state.policy.parameters())
    state.policy_optimizer.load_state_dict(data["policy_optimizer"])
    state.generator.set_state(data["generator"])
    state.rng.bit_generator.state = json.loads(data["rng"])
    state.iteration = data["iteration"]
    state.history = json.loads(data["history"])
    state.prior = json.loads(data.get("prior", "{}"))  # checkpoints from before the prior
    return state


def linear_lr(optimizer: torch.optim.Optimizer, base: float, step: int, total: int) -> None:
    for group in optimizer.param_groups:
        group["lr"] = base * max(0.0, 1.0 - step / max(1, total))


def train_policy(state: TrainState, config: TrainConfig, tasks) -> list[float]:
    """REINFORCE on the estimated MDP: episodes of one task, rewards normalised within them."""
    rewards_seen = []
    total = config.iterations * config.policy_updates
    for update in range(config.policy_updates):
        step = state.iteration * config.policy_updates + update
        linear_lr(state.policy_optimizer, config.learning_rate, step, total)
        task = tasks[int(state.rng.integers(len(tasks)))]
        rollout = state.policy.rollout(
            task, state.costnet, config.episodes, generator=state.generator
        )
        loss, reward = reinforce_loss(rollout, config.entropy_weight)
        state.policy_optimizer.zero_grad()
        loss.backward()
        state.policy_optimizer.step()
        rewards_seen.append(float(reward.mean() * state.costnet.scale))
    return rewards_seen


def sample_jobs(state: TrainState, config: TrainConfig, tasks) -> list[Job]:
    """This iteration's placements to measure: one policy sample per task, round-robin."""
    jobs = []
    for j in range(config.placements_per_iteration):
        task = tasks[(state.iteration * config.placements_per_iteration + j) % len(tasks)]
        with torch.no_grad():
            rollout = state.policy.rollout(task, state.costnet, 1, generator=state.generator)
        if rollout.legal[0]:
            jobs.append(Job(task, rollout.placement(0, "policy")))
    return jobs


def probe_cost(state: TrainState, tasks, backend) -> tuple[float, float]:
    """Mean predicted and backend cost of the greedy policy's placements on `tasks`."""
    predicted, measured = [], []
    with torch.no_grad():
        for task in tasks:
            rollout = state.policy.rollout(task, state.costnet, 1, greedy=True)
            placement = rollout.placement(0, "dreamshard")
            predicted.append(float(rollout.predicted[0] * state.costnet.scale))
            if backend is not None and rollout.legal[0]:
                measured.append(backend.measure(task, placement).overall)
    return float(np.mean(predicted)), float(np.mean(measured)) if measured else float("nan")


def _say(line: str) -> None:
    print(line, flush=True)


def dataset_path(config: TrainConfig) -> Path:
    return Path(config.dataset) if config.dataset else Path(config.out) / "costs.sqlite"


def train_costnet(config: TrainConfig, holdout: float = 0.2, log=_say):
    """Fit a fresh cost network on the dataset alone (no policy training, no measuring).

    The last `holdout` share of the measurements (by time) is kept out of the fit and scored.
    Returns (model with an untrained policy, per-step losses, held-out errors).
    """
    config = replace(config, costnet_loss=fitting_loss(config))  # recorded as fitted
    backend = backend_spec(config).build()
    dataset = CostDataset(dataset_path(config))
    machines = most_measured_machine(backend.config(), dataset, log)
    examples = load_examples(dataset, backend.config(), config.labels, True, machines)
    if len(examples) < 5:
        raise DreamshardError(
            f"{dataset_path(config)} holds {len(examples)} measurements on this backend's "
            "settings; collect at least 5 first (dreamshard collect)"
        )
    cut = len(examples) - max(1, int(len(examples) * holdout))
    state = fresh_state(config, backend)
    if wants_prior(config):  # scaled to this host by the fitted measurements only
        spec = parse_suite_name(config.suite, num_train_tasks=config.train_tasks)
        rows = measured_rows(dataset, backend.config(), fitting=True, machines=machines)
        state.prior = pretrain_costnet(state, config, make_suite(spec), rows[:cut], log)
    fit_config = replace(config, iterations=1)
    losses = fit_costnet(state, fit_config, examples[:cut])
    errors = costnet_errors(state.costnet, examples[cut:])
    log(
        f"cost network: {config.costnet_steps} steps on {cut} measurements, held-out overall "
        f"MAPE {errors['overall_mape']:.1%} on {len(examples) - cut}"
    )
    metadata = {
        "suite": config.suite,
        "hardware": trained_hardware(config),
        "backend": backend.config(),
        "config": asdict(config),
        "examples": len(examples),
        "errors": errors,
        "prior": state.prior,
    }
    return DreamShardModel(state.costnet, state.policy, metadata), losses, errors


def train(config: TrainConfig, log=_say, on_iteration=None) -> DreamShardModel:
    """The alternating loop; `on_iteration(record, costnet_losses, policy_rewards)` sees each.
    With a cluster (`config.cluster`, or $DREAMSHARD_DASK_ADDRESS) its measurements fan out
    over Dask workers and this process writes what they return (`costs/fanout.py`)."""
    config = replace(config, costnet_loss=fitting_loss(config))  # recorded as fitted
    spec = backend_spec(config)
    with fanout_for(config.cluster, spec) as fanout:
        return _train(config, log, on_iteration, fanout)


def fitted_measurements(
    backend: CostBackend, fanout: Fanout | None, dataset: CostDataset, log
) -> tuple[dict, set[str]]:
    """The backend settings and machines whose measurements the run fits on: those of what
    measures it (this process, or the cluster's workers: a GPU worker's settings are not a CPU
    coordinator's), so that a dataset merged from two GPU types fits a network for the one
    that measures; every machine (the empty set) for a backend no machine changes. Workers
    with two kinds of settings are an error: a network learns one."""
    setups = measuring_setups(fanout, backend)
    kinds = {json.dumps(c, sort_keys=True) for _, c in setups}
    if len(kinds) > 1:
        raise DreamshardError(
            f"the cluster's workers measure with {len(kinds)} kinds of backend settings "
            f"({'; '.join(sorted(kinds))}); train with workers of one kind"
        )
    config = setups[0][1] if setups else backend.config()
    machines = {m for m, _ in setups} if key_machine(config, "any") else set()
    others = {m: n for m, n in dataset.machines(config["backend"]).items() if m not in machines}
    if machines and others:
        log(
            f"fitting on measurements made on {', '.join(sorted(machines))}; the dataset's "
            f"{sum(others.values())} made on {', '.join(sorted(others))} are left out"
        )
    return config, machines


def most_measured_machine(config: dict, dataset: CostDataset, log) -> set[str]:
    """The machine a network fitted on the dataset alone learns: the one that made most of the
    measurements it may be fitted on (with the backend settings `config`; said when others are
    left out); every machine (the empty set) for a backend no machine changes."""
    counts = Counter(r["hardware"] or "" for r in measured_rows(dataset, config, fitting=True))
    if not key_machine(config, "any") or len(counts) < 2:
        return set()
    machine = max(counts, key=lambda m: (counts[m], m))
    log(
        f"fitting on the {counts[machine]} measurements made on {machine}; "
        f"{counts.total() - counts[machine]} made on other machines are left out"
    )
    return {machine}


def _train(config: TrainConfig, log, on_iteration, fanout: Fanout | None) -> DreamShardModel:
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = parse_suite_name(config.suite, num_train_tasks=config.train_tasks, num_test_tasks=1)
    suite = make_suite(spec)
    tasks = suite.train_tasks
    backend = backend_spec(config).build()
    dataset = CostDataset(dataset_path(config))
    fitted, machines = fitted_measurements(backend, fanout, dataset, log)
    checkpoint = out / "checkpoint.pt"
    if checkpoint.exists():
        state = load_checkpoint(checkpoint, config, backend)
    else:
        state = fresh_state(config, backend)
    if state.iteration:
        log(f"resuming after iteration {state.iteration} from {checkpoint}")
    elif config.warm_start or config.warm_start_split:
        split = (
            f", and {config.warm_start_split} of split tables" if config.warm_start_split else ""
        )
        log(f"warm start: measuring {config.warm_start} heuristic and random placements{split}")
        jobs = list(
            collection_jobs(suite, config.warm_start, device_counts=config.warm_start_devices)
        )
        jobs += collection_jobs(suite, config.warm_start_split, "split")
        collect(jobs, backend, dataset, spec.name, fanout)
    if not state.iteration and wants_prior(config):
        rows = measured_rows(dataset, fitted, fitting=True, machines=machines)
        state.prior = pretrain_costnet(state, config, suite, rows, log)
    replay = None
    if wants_rehearsal(config):  # made again on a resume: the same seed, the same examples
        rows = measured_rows(dataset, fitted, fitting=True, machines=machines)
        topology = state.costnet.comm["topology"] if state.costnet.comm else "cpu-gloo"
        replay = rehearsal_examples(config, rows, topology)
        log(f"rehearsal: {len(replay)} placements of the pre-training family replayed")
    probe = tasks[: min(5, len(tasks))]
    # the simulated backend is cheap: probe the greedy policy's true cost on it every iteration
    probe_backend = backend if config.backend == "simulated" else None
    while state.iteration < config.iterations:
        start = time.monotonic()
        summary = collect(sample_jobs(state, config, tasks), backend, dataset, spec.name, fanout)
        examples: list[Example] = load_examples(
            dataset, fitted, config.labels, fitting=True, machines=machines
        )
        losses = fit_costnet(state, config, examples, replay)
        rewards = train_policy(state, config, tasks)
        state.iteration += 1
        predicted, measured = probe_cost(state, probe, probe_backend)
        record = {
            "iteration": state.iteration,
            "dataset_size": len(examples),
            "measured_now": summary.measured,
            "costnet_loss": losses[-1] if losses else float("nan"),
            "policy_reward": float(np.mean(rewards)),
            "probe_predicted_ms": predicted,
            "probe_backend_ms": measured,
            "seconds": time.monotonic() - start,
        }
        state.history.append(record)
        if on_iteration is not None:
            on_iteration(record, losses, rewards)
        save_checkpoint(state, config, checkpoint)
        save_checkpoint(state, config, out / "checkpoints" / f"iter-{state.iteration:03d}.pt")
        log(
            f"iteration {state.iteration}/{config.iterations}: {len(examples)} measurements, "
            f"cost-net loss {record['costnet_loss']:.3g}, "  # scaled costs: often 1e-4
            f"policy reward {record['policy_reward']:.2f} ms, "
            f"greedy predicted {predicted:.2f} ms ({record['seconds']:.0f} s)"
        )
    model = DreamShardModel(
        state.costnet,
        state.policy,
        {
            "suite": config.suite,
            "backend": fitted,
            "config": asdict(config),
            "history": state.history,
            "prior": state.prior,
            "trained": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "ranges": joined_ranges(training_ranges(tasks), state.start["ranges"]),
            "started_from": state.start["from"],
            "hardware": trained_hardware(config),
        },
    )
    model.costnet.eval()
    model.policy.eval()
    save_model(model, out / "model.pt")
    log(f"wrote {out / 'model.pt'}")
    return model
