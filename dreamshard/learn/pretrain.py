"""A prior for the cost network on real hardware: fit it first on the simulated backend.

Real measurements are slow (seconds each), so a run on `fbgemm` fits its cost network on a
hundred or so placements, and the network's error is larger than the differences between the
plans it must choose among. The simulated backend (`costs/simulated.py`) is the analytic
model calibrated to such measurements: its costs are free, and it already knows the kernel's
shape (a per-call overhead plus per-table costs). So before the first iteration the network is
fitted on `TrainConfig.pretrain` heuristic and random placements of the suite's training tasks
labelled by that model, then the alternating loop fits it on the real measurements as always.

The analytic model's milliseconds are those of the host it was calibrated on; they are scaled to
this host by the median ratio of measured to simulated compute over the run's measurements so
far (the same placements), so the prior starts at the right size. Communication is the
topology model's on both sides, so only compute is scaled. A run on the simulated backend
itself is never pretrained: there the prior would be the answer.

On stored fbgemm cpu-50x4 data (96 placements fitted, 24 held out, 3 seeds) this took the
held-out overall MAPE from 4.8% to 1.8% and the Spearman correlation within a task from 0.67
to 0.88 (a retired study, in git history at commit ea3bb69; docs/learning.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import torch

from dreamshard.costs.collect import collection_jobs
from dreamshard.costs.dataset import record_task
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.learn.costnet import DEVICE_TERMS, compose_overall
from dreamshard.learn.costnet_data import Example, labelled_cost, measured_rows
from dreamshard.learn.costnet_fit import fit_costnet, measurement_optimizer
from dreamshard.learn.train_config import SHIPPED, TrainConfig, starts_from_shipped
from dreamshard.placement.suites import Suite
from dreamshard.placement.tasks import placement_task
from dreamshard.tables.features import feature_matrix
from dreamshard.tables.traces import table_batch_size

COMPUTE = [DEVICE_TERMS.index("fwd_comp"), DEVICE_TERMS.index("bwd_comp")]
COMM = DEVICE_TERMS.index("bwd_comm")
__all__ = ["host_factor", "measured_rows", "pretrain_costnet", "prior_examples", "wants_prior"]


def host_factor(rows: Sequence, simulated: SimulatedBackend, labels: str = "raw") -> float:
    """Median over stored measurements `rows` of measured / simulated compute (every device's
    fwd_comp + bwd_comp, measured as the network's `labels` are; the exchange is the same
    topology model on both sides), 1.0 when there are none: the simulated model's milliseconds
    scaled to this host, or to the reference's nominal state for normalised labels."""
    sums = compute_sums(rows, simulated, labels)
    return float(np.median(sums[:, :2].sum(1) / sums[:, 2:].sum(1))) if len(sums) else 1.0


def term_factors(
    rows: Sequence, simulated: SimulatedBackend, labels: str = "raw"
) -> tuple[float, float]:
    """`host_factor` per term: (forward, backward) measured / simulated compute, the measured
    costs as the network's `labels` are (normalised ones: only rows with a reference time)."""
    sums = compute_sums(rows, simulated, labels)
    if not len(sums):
        return 1.0, 1.0
    ratios = np.median(sums[:, :2] / sums[:, 2:], axis=0)
    return float(ratios[0]), float(ratios[1])


def compute_sums(rows: Sequence, simulated: SimulatedBackend, labels: str = "raw") -> np.ndarray:
    """[rows, 4] each measurement's fwd_comp and bwd_comp summed over its devices, measured
    (as `labels` are; normalised: only rows with a reference time) and simulated."""
    sums = []
    for row in rows:
        measured = labelled_cost(row, labels)
        if measured is None:
            continue
        modeled = simulated.measure(*record_task(row)).devices
        sums.append(
            [
                sum(getattr(d, term) for d in devices)
                for devices in (measured.devices, modeled)
                for term in ("fwd_comp", "bwd_comp")
            ]
        )
    return np.array(sums, dtype=np.float64).reshape(-1, 4)


def prior_examples(
    suite: Suite, count: int, simulated: SimulatedBackend, factor: float, split: int = 0
) -> list[Example]:
    """`count` heuristic and random placements of the suite's training tasks, `split` of them
    of split tables (the "split" mix), labelled by the simulated backend with compute scaled by
    `factor`; a split placement is an example of its shards."""
    examples = []
    jobs = [*collection_jobs(suite, count - split), *collection_jobs(suite, split, "split")]
    for job in jobs:
        cost = simulated.measure(job.task, job.placement)
        job = replace(job, task=placement_task(job.task, job.placement))  # the shards placed
        targets = np.array(
            [[getattr(d, term) for term in DEVICE_TERMS] for d in cost.devices], dtype=np.float32
        )
        targets[:, COMPUTE] *= factor
        busy = np.bincount(job.placement.devices, minlength=job.task.num_devices) > 0
        labels = torch.from_numpy(targets)
        overall = compose_overall(labels, torch.from_numpy(busy), labels[:, COMM])
        examples.append(
            Example(
                feature_matrix(job.task.tables),
                np.array(job.placement.devices),  # one device per shard
                job.task.num_devices,
                targets,
                float(overall),
                job.task.name,
                job.placement.method,
                simulated_batch(job.task, simulated),
            )
        )
    return examples


def simulated_batch(task, simulated: SimulatedBackend) -> int:
    """The batch size the simulated backend measures a task at."""
    return table_batch_size(task.tables, simulated.batch_size)


def pretrain_costnet(state, config: TrainConfig, suite: Suite, rows: Sequence, log) -> dict:
    """Fit `state.costnet` on the simulated prior (`config.pretrain` placements,
    `config.pretrain_steps` steps, its own decaying learning rate), scaled to this host by the
    measurements `rows`; then give it a fresh optimizer for the real data. Returns what was
    done, for the model's metadata.

    A hybrid network holds the analytic model itself: its gains start at this host's forward
    and backward measured / simulated ratios instead, and nothing is fitted."""
    topology = state.costnet.comm["topology"] if state.costnet.comm else "cpu-gloo"
    simulated = SimulatedBackend(topology=topology)
    if state.costnet.gain is not None:
        factors = term_factors(rows, simulated, config.labels)
        with torch.no_grad():
            for term, factor in zip(("fwd_comp", "bwd_comp"), factors):
                state.costnet.gain[DEVICE_TERMS.index(term)] = float(np.log(factor))
        state.costnet_optimizer = measurement_optimizer(state.costnet, config)
        log(
            f"hybrid cost network: analytic model x {factors[0]:.3f} forward, "
            f"x {factors[1]:.3f} backward (measured / simulated over {len(rows)} measurements)"
        )
        return {"gains": list(map(float, factors)), "factor_from": len(rows)}
    factor = host_factor(rows, simulated, config.labels)
    split = min(config.pretrain_split, config.pretrain)
    examples = prior_examples(suite, config.pretrain, simulated, factor, split)
    log(
        f"simulated prior: fitting the cost network on {len(examples)} placements ({split} of "
        f"split tables) labelled by "
        f"the simulated backend (compute x {factor:.3f}, measured / simulated compute over "
        f"{len(rows)} measurements here), {config.pretrain_steps} steps"
    )
    # the prior fits the whole network (labels of its own, thousands of them); the
    # measurements then fit what `measurement_optimizer` says, from a fresh optimizer
    state.costnet_optimizer = torch.optim.Adam(state.costnet.parameters(), lr=config.learning_rate)
    fit_costnet(state, replace(config, costnet_steps=config.pretrain_steps, iterations=1), examples)
    state.costnet_optimizer = measurement_optimizer(state.costnet, config)
    return {
        "placements": len(examples),
        "steps": config.pretrain_steps,
        "host_factor": factor,
        "factor_from": len(rows),
        "simulated": simulated.config(),
    }


REHEARSAL_SEED = 3  # the shipped network's data used seeds 0-2 (fit, held out, calibration)


def rehearsal_examples(config: TrainConfig, rows: Sequence, topology: str) -> list[Example]:
    """`config.rehearsal` tasks of the shipped network's pre-training family, 8 placements each,
    labelled as it was pre-trained (each task by its own drawn analytic model, never the
    calibrated judge) with compute scaled to this host by the measurements `rows`: replayed
    beside the measurements while fine-tuning, so the network keeps what it knew of tables
    unlike the suite's. Its own seed, apart from the pre-training's."""
    from dreamshard.learn.pretrain_data import overall_of, pretrain_examples

    factor = host_factor(rows, SimulatedBackend(topology=topology), config.labels)
    examples = []
    for example in pretrain_examples(REHEARSAL_SEED + config.seed, config.rehearsal, 8):
        targets = example.device_targets.copy()
        targets[:, COMPUTE] *= factor
        examples.append(replace(example, device_targets=targets, overall=overall_of(targets)))
    return examples


def wants_rehearsal(config: TrainConfig) -> bool:
    """Whether a run replays the pre-training family: on real hardware, from the shipped
    network (what it would forget)."""
    return bool(config.rehearsal) and config.backend != "simulated" and starts_from_shipped(config)


def wants_prior(config: TrainConfig) -> bool:
    """Whether a run fits the simulated prior first (sets a hybrid network's gains): on real
    hardware, from scratch or from the shipped network (the prior is scaled to the
    measurements as the labels are), not from a model of the user's own."""
    return (
        bool(config.pretrain)
        and config.backend != "simulated"
        and config.init_model in ("", SHIPPED, "none")
    )
