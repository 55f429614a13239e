"""The cost network's losses: each one fits, and the fit follows the configured one."""

from dataclasses import replace

import pytest
import torch

from dreamshard.costs.collect import collect, collection_jobs
from dreamshard.costs.dataset import CostDataset
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.learn.costnet import CostNet
from dreamshard.learn.costnet_data import load_examples
from dreamshard.learn.costnet_fit import costnet_errors, fit_costnet
from dreamshard.learn.train import fresh_state
from dreamshard.learn.train_config import COSTNET_LOSSES, TrainConfig
from dreamshard.placement.suites import make_suite, parse_suite_name


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """Exact (simulated) costs of 80 placements of a small suite's training tasks."""
    suite = make_suite(parse_suite_name("cpu-12x3", num_train_tasks=10, num_test_tasks=1))
    dataset = CostDataset(tmp_path_factory.mktemp("loss") / "costs.sqlite")
    backend = SimulatedBackend()
    collect(list(collection_jobs(suite, 80)), backend, dataset, "cpu-12x3")
    return load_examples(dataset, backend.config())


def fitted(examples, loss: str, seed: int = 0) -> CostNet:
    config = TrainConfig(
        backend="simulated", iterations=1, costnet_steps=150, seed=seed, init_model="none"
    )
    state = fresh_state(replace(config, costnet_loss=loss))
    fit_costnet(state, replace(config, costnet_loss=loss), examples)
    return state.costnet


# log-ratio, the pre-training's loss, is checked where it is used (test_shipped.py)
@pytest.mark.parametrize("loss", [loss for loss in COSTNET_LOSSES if loss != "log-ratio"])
def test_every_loss_teaches_the_network(examples, loss, one_torch_thread):
    model = fitted(examples, loss)
    torch.manual_seed(0)
    fresh = CostNet()
    fresh.scale.fill_(float(model.scale))
    assert (
        costnet_errors(model, examples)["overall_mape"]
        < 0.5 * (costnet_errors(fresh, examples)["overall_mape"])
    )


def test_the_loss_setting_changes_the_fit(examples, one_torch_thread):
    first, second = fitted(examples, "mse"), fitted(examples, "log")
    assert costnet_errors(first, examples) != costnet_errors(second, examples)
    with pytest.raises(ValueError, match="unknown cost-network loss"):
        fitted(examples, "hinge")
