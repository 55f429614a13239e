"""The RNN baseline trains on its model's MDP with its policy's budget, and its file says so."""

import pytest
from test_learning import small_config

from dreamshard.errors import DreamshardError
from dreamshard.learn.costnet import CostNet
from dreamshard.learn.model_file import save_model
from dreamshard.learn.rnn import costnet_fingerprint, load_rnn, train_rnn
from dreamshard.learn.rnn_config import RnnTrainConfig, fair_config
from dreamshard.learn.train import train

ITERATIONS, POLICY_UPDATES, EPISODES = 2, 3, 4


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    config = small_config(
        tmp_path_factory.mktemp("model"),
        iterations=ITERATIONS,
        policy_updates=POLICY_UPDATES,
        episodes=EPISODES,
        costnet_steps=20,
    )
    return train(config, log=lambda *_: None)


def test_the_rnn_gets_the_policys_updates_and_cost_network(model):
    lines = []
    placer = train_rnn(model, RnnTrainConfig(), log=lines.append, source="tiny")
    ran = [line for line in lines if line.startswith("update ")]
    assert len(ran) == ITERATIONS * POLICY_UPDATES  # one line per update at this size
    train_record = placer.metadata["train"]
    assert (train_record["updates"], train_record["episodes"]) == (
        ITERATIONS * POLICY_UPDATES,
        EPISODES,
    )
    assert train_record["suite"] == "cpu-16x3" and placer.num_devices == 3
    assert placer.metadata["costnet"]["fingerprint"] == costnet_fingerprint(model.costnet)
    assert costnet_fingerprint(CostNet()) != costnet_fingerprint(model.costnet)
    assert "the same as its policy's" in placer.metadata["budget"]
    fewer = train_rnn(model, RnnTrainConfig(updates=1), log=lambda *_: None)
    assert "not its policy's" in fewer.metadata["budget"]


def test_train_rnn_records_the_model_in_its_file(model, tmp_path, cli):
    model_path, out = tmp_path / "model.pt", tmp_path / "rnn.pt"
    save_model(model, model_path)
    result = cli("train-rnn", "--model", str(model_path), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert f"{ITERATIONS * POLICY_UPDATES} updates of {EPISODES} episodes" in result.stdout
    recorded = load_rnn(out).metadata
    assert recorded["costnet_model"] == str(model_path)
    assert recorded["costnet"]["fingerprint"] == costnet_fingerprint(model.costnet)
    assert recorded["train"]["updates"] == ITERATIONS * POLICY_UPDATES
    assert recorded["policy_budget"]["iterations"] == ITERATIONS


def test_a_model_without_a_trained_policy_needs_an_explicit_budget(model):
    untrained = {"suite": "cpu-16x3", "config": model.metadata["config"]}  # no history
    with pytest.raises(DreamshardError, match="pass --updates and --episodes"):
        fair_config(RnnTrainConfig(), untrained)
    given = fair_config(RnnTrainConfig(updates=7, episodes=2), untrained)
    assert (given.updates, given.episodes, given.suite) == (7, 2, "cpu-16x3")
