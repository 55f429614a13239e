"""The simulated prior for the cost network on real hardware (learn/pretrain.py)."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from dreamshard.costs.collect import collect, collection_jobs
from dreamshard.costs.dataset import CostDataset
from dreamshard.costs.simulated import SimulatedBackend, SimulatedModel
from dreamshard.errors import DreamshardError
from dreamshard.learn.costnet import DEVICE_TERMS
from dreamshard.learn.costnet_fit import costnet_errors, fit_costnet
from dreamshard.learn.pretrain import (
    host_factor,
    measured_rows,
    pretrain_costnet,
    prior_examples,
    wants_prior,
    wants_rehearsal,
)
from dreamshard.learn.train import fresh_state
from dreamshard.learn.train_config import (
    PretrainConfig,
    TrainConfig,
    fitting_loss,
    quantities_fitted,
)
from dreamshard.placement.suites import make_suite, parse_suite_name


def slower_host(times: float) -> SimulatedBackend:
    """The simulated backend on a host whose kernels take `times` as long."""
    shipped = SimulatedModel.load()
    return SimulatedBackend(
        SimulatedModel([w * times for w in shipped.fwd], [w * times for w in shipped.bwd])
    )


def measured_on(backend, suite, count: int, path) -> list:
    dataset = CostDataset(path)
    collect(list(collection_jobs(suite, count)), backend, dataset, suite.spec.name)
    return measured_rows(dataset, backend.config())


def test_prior_labels_scale_compute_and_keep_the_modeled_exchange():
    suite = make_suite(parse_suite_name("cpu-12x3", num_train_tasks=4))
    simulated = SimulatedBackend()
    plain = prior_examples(suite, 8, simulated, 1.0)
    scaled = prior_examples(suite, 8, simulated, 2.5)
    compute = [DEVICE_TERMS.index("fwd_comp"), DEVICE_TERMS.index("bwd_comp")]
    comm = DEVICE_TERMS.index("bwd_comm")
    assert len(plain) == 8
    for a, b in zip(plain, scaled):
        assert np.array_equal(a.devices, b.devices) and a.task == b.task
        assert np.allclose(b.device_targets[:, compute], 2.5 * a.device_targets[:, compute])
        assert np.array_equal(b.device_targets[:, comm], a.device_targets[:, comm])
        assert b.overall > a.overall
    # unscaled, the label is the simulated backend's own overall cost of that placement
    jobs = list(collection_jobs(suite, 8))
    for example, job in zip(plain, jobs):
        assert example.overall == pytest.approx(simulated.measure(job.task, job.placement).overall)


def test_the_host_factor_is_what_this_host_measures_over_what_the_model_says(tmp_path):
    suite = make_suite(parse_suite_name("cpu-12x3", num_train_tasks=4))
    rows = measured_on(slower_host(2.0), suite, 6, tmp_path / "slow.sqlite")
    assert len(rows) == 6
    assert host_factor(rows, SimulatedBackend()) == pytest.approx(2.0)
    assert host_factor([], SimulatedBackend()) == 1.0


def test_the_prior_puts_the_network_at_this_hosts_scale(tmp_path):
    """Fitted on the prior alone, the network predicts the compute the slower host takes for
    placements of tasks it never saw, not the simulated model's (half as large)."""
    suite = make_suite(parse_suite_name("cpu-12x3", num_train_tasks=10, num_test_tasks=4))
    host = slower_host(2.0)
    rows = measured_on(host, suite, 6, tmp_path / "host.sqlite")
    config = TrainConfig(backend="fbgemm", pretrain=300, pretrain_steps=600, seed=0)
    state = fresh_state(config, host)
    prior = pretrain_costnet(state, config, suite, rows, log=lambda *_: None)
    assert prior["host_factor"] == pytest.approx(2.0) and prior["factor_from"] == 6
    compute = [DEVICE_TERMS.index("fwd_comp"), DEVICE_TERMS.index("bwd_comp")]
    ratios = []
    for job in collection_jobs(replace(suite, train_tasks=suite.test_tasks), 8):
        predicted, _ = state.costnet.predict_ms(job.task, job.placement)
        measured = host.measure(job.task, job.placement)
        took = sum(d.fwd_comp + d.bwd_comp for d in measured.devices)
        ratios.append(predicted[:, compute].sum() / took)
    assert 0.75 < float(np.median(ratios)) < 1.33  # unscaled it would be near 0.5


def test_only_runs_on_real_hardware_from_scratch_fit_the_prior():
    """(With any kind of label: the prior is scaled to the labels.)"""
    assert wants_prior(TrainConfig(backend="fbgemm"))
    assert not wants_prior(TrainConfig(backend="simulated"))
    assert not wants_prior(TrainConfig(backend="fbgemm", pretrain=0))
    assert not wants_prior(TrainConfig(backend="fbgemm", init_model="m.pt"))
    for labels in ("normalised", "per-term"):
        assert wants_prior(TrainConfig(backend="fbgemm", labels=labels))


def test_only_fine_tuning_the_shipped_network_on_real_hardware_rehearses():
    """Rehearsal (off by default) replays the pre-training family only where a run on real
    hardware fine-tunes the shipped network; the "auto" loss is the shipped network's
    pre-training loss there and the paper's mse from scratch or for another design; a loss the
    user names is kept."""
    fine_tune = TrainConfig(backend="fbgemm", rehearsal=200, costnet_loss="auto")
    assert wants_rehearsal(fine_tune) and fitting_loss(fine_tune) == PretrainConfig.loss
    assert not wants_rehearsal(TrainConfig(backend="fbgemm"))  # the default: off
    scratch = replace(fine_tune, init_model="none")
    assert not wants_rehearsal(scratch) and fitting_loss(scratch) == "mse"
    other_design = replace(fine_tune, costnet_encoder="exp")
    assert not wants_rehearsal(other_design) and fitting_loss(other_design) == "mse"
    assert not wants_rehearsal(replace(fine_tune, backend="simulated"))
    assert fitting_loss(TrainConfig()) == "mse"
    assert fitting_loss(TrainConfig(costnet_loss="relative")) == "relative"


def test_a_hybrid_network_starts_as_the_analytic_model_at_this_hosts_scale(tmp_path):
    """Before any fitting, a hybrid network predicts each device's compute as a host whose
    forward kernels take 2x and backward 3x the analytic model's measures it, on tasks it never
    saw: the model inside it, its gains set per term from the measurements."""
    suite = make_suite(parse_suite_name("cpu-12x3", num_train_tasks=6, num_test_tasks=3))
    shipped = SimulatedModel.load()
    host = SimulatedBackend(
        SimulatedModel([2.0 * w for w in shipped.fwd], [3.0 * w for w in shipped.bwd])
    )
    rows = measured_on(host, suite, 6, tmp_path / "host.sqlite")
    config = TrainConfig(backend="fbgemm", costnet_encoder="hybrid", seed=0)
    state = fresh_state(config, host)
    done = pretrain_costnet(state, config, suite, rows, log=lambda *_: None)
    assert done["gains"] == pytest.approx([2.0, 3.0]) and done["factor_from"] == 6
    for job in collection_jobs(replace(suite, train_tasks=suite.test_tasks), 6):
        predicted, _ = state.costnet.predict_ms(job.task, job.placement)
        measured = host.measure(job.task, job.placement).devices
        for term in ("fwd_comp", "bwd_comp"):
            got = predicted[:, DEVICE_TERMS.index(term)]
            assert got == pytest.approx([getattr(d, term) for d in measured], rel=1e-4)


def test_a_hybrid_network_is_refused_on_the_simulated_backend():
    with pytest.raises(DreamshardError, match="use --costnet-encoder exp"):
        fresh_state(TrainConfig(backend="simulated", costnet_encoder="hybrid"))


def test_the_replayed_share_of_each_batch_pulls_the_fit_towards_the_replay():
    """Rehearsal: fitted on placements labelled at this host's speed while replaying the same
    placements labelled three times slower, a network fits the measurements worse the larger
    the replayed share of each batch."""
    suite = make_suite(parse_suite_name("cpu-12x3", num_train_tasks=4))
    simulated = SimulatedBackend()
    measured = prior_examples(suite, 16, simulated, 1.0)
    replay = prior_examples(suite, 16, simulated, 3.0)
    errors = {}
    for share in (0.1, 0.9):
        config = TrainConfig(
            init_model="none", costnet_steps=80, iterations=1, rehearsal_share=share, seed=3
        )
        state = fresh_state(config, simulated)
        fit_costnet(state, config, measured, replay)
        errors[share] = costnet_errors(state.costnet, measured)["overall_mape"]
    assert errors[0.9] > 1.5 * errors[0.1]


def test_on_fbgemm_a_pretrained_network_fits_only_its_quantity_weights_unless_told():
    """`--finetune auto` fits only the quantity weights where a run on fbgemm starts from a
    pre-trained network; from scratch, on other backends or told "all", every weight."""
    assert quantities_fitted(TrainConfig(backend="fbgemm"))
    assert quantities_fitted(TrainConfig(backend="fbgemm", init_model="run/model.pt"))
    assert not quantities_fitted(TrainConfig(backend="fbgemm", init_model="none"))
    assert not quantities_fitted(TrainConfig(backend="fbgemm", costnet_encoder="exp"))
    for backend in ("simulated", "dmp"):
        assert not quantities_fitted(TrainConfig(backend=backend))
    assert not quantities_fitted(TrainConfig(backend="fbgemm", finetune="all"))
    assert quantities_fitted(TrainConfig(backend="simulated", finetune="quantities"))


def test_fitting_the_quantities_moves_only_them_and_still_fits_the_host():
    """From the shipped network, placements labelled at a host twice as slow as the analytic
    model: fitted on them, the default moves the quantity weights alone and fits them better
    than before; "all" moves the table encoder too."""
    suite = make_suite(parse_suite_name("cpu-12x3", num_train_tasks=6))
    simulated = SimulatedBackend()
    examples = prior_examples(suite, 24, simulated, 2.0)
    moved, errors = {}, {}
    for part in ("auto", "all"):
        config = TrainConfig(
            backend="fbgemm", finetune=part, costnet_steps=100, iterations=1, learning_rate=5e-3
        )
        state = fresh_state(config, simulated)
        before = {k: p.detach().clone() for k, p in state.costnet.named_parameters()}
        start = costnet_errors(state.costnet, examples)["overall_mape"]
        fit_costnet(state, config, examples)
        after = dict(state.costnet.named_parameters())
        moved[part] = {k for k in before if not torch.equal(before[k], after[k])}
        errors[part] = (start, costnet_errors(state.costnet, examples)["overall_mape"])
    assert moved["auto"] == {"quantity_weight.log_weight"}
    assert any(k.startswith("encoder.") for k in moved["all"])
    assert errors["auto"][1] < 0.8 * errors["auto"][0]
