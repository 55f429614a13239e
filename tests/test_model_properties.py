"""Properties of the real networks: the cost network's symmetries and the policy's memory mask.

Every check here compares two runs of the real objects (relabelled devices, reordered tables,
a perturbed masked logit), so a wrong sum, max, index or mask makes it fail.
"""

import numpy as np
import pytest
import torch

import dreamshard.learn.policy as policy_module
from dreamshard.learn.costnet import CostNet, make_batch
from dreamshard.learn.policy import PlacementPolicy, masked_choice, reinforce_loss
from dreamshard.learn.train_config import COSTNET_ENCODERS
from dreamshard.placement.tasks import Placement, PlacementTask, is_legal
from dreamshard.tables.features import feature_matrix
from dreamshard.tables.table import Table
from tests.conftest import give_residual_weights, random_tables

TOL = dict(rtol=1e-5, atol=1e-5)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def random_task(seed: int, num_tables: int, num_devices: int, slack: float) -> PlacementTask:
    """Tables of varied shape, size and pooling; the cap is `slack` x an even split."""
    rng = np.random.default_rng(seed)
    tables = random_tables(rng, num_tables, (1_000, 400_000), [4, 16, 64, 128])
    sizes = [t.bytes("fp32") for t in tables]
    cap = int(max(max(sizes), slack * sum(sizes) / num_devices))
    return PlacementTask(tables, num_devices, cap, "fp32")


def random_costnet(seed: int) -> CostNet:
    """A randomly initialised cost network, its weights enlarged so outputs differ widely."""
    torch.manual_seed(seed)
    encoder = COSTNET_ENCODERS[seed % len(COSTNET_ENCODERS)]  # both designs
    costnet = CostNet(encoder=encoder)
    with torch.no_grad():
        give_residual_weights(costnet)
        for name, parameter in costnet.named_parameters():
            if not (encoder != "relu" and name.startswith("encoder.")):  # exp: keep them small
                parameter.mul_(3.0)
    return costnet


def random_placement(rng: np.random.Generator, num_tables: int, num_devices: int) -> Placement:
    return Placement(tuple(int(d) for d in rng.integers(0, num_devices, num_tables)))


def random_case(
    seed: int, num_tables: int, num_devices: int
) -> tuple[np.random.Generator, PlacementTask, CostNet, Placement]:
    """A roomy task, a cost network and a placement for one row of CASES, and the generator that
    drew the placement (for the test's own draws after it)."""
    rng = np.random.default_rng(seed)
    task = random_task(seed, num_tables, num_devices, slack=10.0)
    costnet = random_costnet(seed)
    return rng, task, costnet, random_placement(rng, num_tables, num_devices)


CASES = [(seed, 3 + (5 * seed) % 29, 1 + seed % 6) for seed in range(20)]  # seed, T, D


# --- the cost network ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed, num_tables, num_devices", CASES)
def test_relabelling_devices_permutes_the_per_device_costs_and_keeps_the_overall(
    seed, num_tables, num_devices
):
    rng, task, costnet, placement = random_case(seed, num_tables, num_devices)
    relabel = rng.permutation(num_devices)  # device d becomes device relabel[d]
    moved = Placement(tuple(int(relabel[d]) for d in placement.devices))
    per_device, overall = costnet.predict_ms(task, placement)
    moved_per_device, moved_overall = costnet.predict_ms(task, moved)
    np.testing.assert_allclose(moved_per_device[relabel], per_device, **TOL)
    assert moved_overall == pytest.approx(overall, rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("seed, num_tables, num_devices", CASES)
def test_reordering_the_tables_changes_no_prediction(seed, num_tables, num_devices):
    rng, task, costnet, placement = random_case(seed, num_tables, num_devices)
    order = rng.permutation(num_tables)
    shuffled_task = PlacementTask(
        tuple(task.tables[i] for i in order), num_devices, task.memory_cap_bytes, task.precision
    )
    shuffled = Placement(tuple(placement.devices[i] for i in order))
    per_device, overall = costnet.predict_ms(task, placement)
    shuffled_per_device, shuffled_overall = costnet.predict_ms(shuffled_task, shuffled)
    np.testing.assert_allclose(shuffled_per_device, per_device, **TOL)
    assert shuffled_overall == pytest.approx(overall, rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("seed, num_tables, num_devices", CASES)
def test_an_empty_extra_device_changes_no_prediction_of_the_others(seed, num_tables, num_devices):
    rng, task, costnet, placement = random_case(seed, num_tables, num_devices)
    wider = PlacementTask(task.tables, num_devices + 1, task.memory_cap_bytes, task.precision)
    # the empty device goes anywhere: relabel so that it is device `empty`
    empty = int(rng.integers(0, num_devices + 1))
    shifted = Placement(tuple(d + (d >= empty) for d in placement.devices))
    per_device, overall = costnet.predict_ms(task, placement)
    wider_per_device, wider_overall = costnet.predict_ms(wider, shifted)
    assert wider_overall == pytest.approx(overall, rel=1e-5, abs=1e-5)
    np.testing.assert_allclose(np.delete(wider_per_device, empty, axis=0), per_device, **TOL)


def test_placements_batched_together_predict_what_each_predicts_alone():
    rng = np.random.default_rng(7)
    costnet = random_costnet(7)
    items, alone = [], []
    for seed, num_tables, num_devices in CASES[:8]:
        task = random_task(seed, num_tables, num_devices, slack=10.0)
        placement = random_placement(rng, num_tables, num_devices)
        items.append((feature_matrix(task.tables), np.array(placement.devices), num_devices))
        alone.append(costnet.predict_ms(task, placement))
    with torch.no_grad():
        per_device, overall = costnet(make_batch(items))
    scale = float(costnet.scale)
    np.testing.assert_allclose(overall.numpy() * scale, [o for _, o in alone], **TOL)
    np.testing.assert_allclose(
        per_device.numpy() * scale, np.concatenate([p for p, _ in alone]), **TOL
    )


# --- the policy's memory mask -------------------------------------------------------------------


def test_masked_choice_gives_a_masked_device_probability_zero():
    generator = torch.Generator().manual_seed(0)
    rng = np.random.default_rng(0)
    logits = torch.from_numpy(rng.normal(size=(2000, 5)).astype(np.float32))
    allowed = rng.random((2000, 5)) < 0.5
    allowed[np.arange(2000), rng.integers(0, 5, 2000)] = True  # every row keeps a device
    # the masked devices score far above the others: a leak would make them the favourites
    bumped = logits + 50.0 * torch.from_numpy(~allowed)
    for greedy in (True, False):
        seed = torch.Generator().manual_seed(1)
        action, log_p, entropy, stuck = masked_choice(logits, allowed, greedy, seed)
        seed = torch.Generator().manual_seed(1)
        b_action, b_log_p, b_entropy, _ = masked_choice(bumped, allowed, greedy, seed)
        assert not stuck.any()
        assert allowed[np.arange(2000), action.numpy()].all()
        assert torch.equal(action, b_action)
        assert torch.equal(log_p, b_log_p) and torch.equal(entropy, b_entropy)
    # a row with one allowed device takes it with probability exactly 1
    only = allowed.sum(1) == 1
    action, log_p, entropy, _ = masked_choice(logits, allowed, False, generator)
    assert only.any() and (log_p[torch.from_numpy(only)] == 0).all()
    assert (entropy[torch.from_numpy(only)] == 0).all()


class MaskSpy:
    """Wraps `masked_choice`: adds `bump` x (not allowed) to the logits, records each step."""

    def __init__(self, bump: torch.Tensor):
        self.bump = bump
        self.steps: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def __call__(self, logits, allowed, greedy, generator):
        masked = torch.from_numpy(~allowed).to(logits.dtype)
        action, log_p, entropy, stuck = masked_choice(
            logits + self.bump * masked, allowed, greedy, generator
        )
        self.steps.append((allowed.copy(), action.numpy().copy(), stuck.copy()))
        return action, log_p, entropy, stuck


def tight_task(seed: int) -> PlacementTask:
    """Binding caps: a few tables near a device's whole cap, so devices fill and get masked."""
    rng = np.random.default_rng(seed)
    num_devices = int(rng.integers(2, 5))
    tables = [
        Table(f"big{i}", rows=200_000 + 1_000 * i, dim=64, pooling_factor=float(1 + i))
        for i in range(num_devices)
    ]
    tables += [
        Table(
            f"t{i}",
            rows=int(rng.integers(1_000, 20_000)),
            dim=int(rng.choice([4, 16, 32])),
            pooling_factor=float(rng.uniform(1, 40)),
        )
        for i in range(int(rng.integers(6, 16)))
    ]
    sizes = [t.bytes("fp32") for t in tables]
    cap = int(1.05 * sum(sizes) / num_devices)
    return PlacementTask(tuple(tables), num_devices, cap, "fp32")


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("table_aware", [False, True])
def test_a_masked_device_never_enters_the_reinforce_loss(monkeypatch, seed, table_aware):
    task = tight_task(seed)
    torch.manual_seed(seed)
    policy, costnet = PlacementPolicy(table_aware=table_aware), random_costnet(seed)
    runs = []
    for value in (0.0, 25.0, -25.0):
        bump = torch.tensor(value, requires_grad=True)
        spy = MaskSpy(bump)
        monkeypatch.setattr(policy_module, "masked_choice", spy)
        policy.zero_grad()
        rollout = policy.rollout(task, costnet, 8, generator=torch.Generator().manual_seed(seed))
        loss, _ = reinforce_loss(rollout, entropy_weight=1e-3)
        loss.backward()
        gradients = [p.grad.clone() for p in policy.parameters()]
        runs.append((rollout, loss.detach(), bump.grad, gradients, spy.steps))
    reference = runs[0]
    masked_steps = 0
    for rollout, loss, bump_grad, gradients, steps in runs:
        assert rollout.legal.all()  # the guard keeps every episode packable
        for allowed, action, stuck in steps:
            assert not stuck.any()
            assert allowed[np.arange(len(action)), action].all()  # never a masked device
            masked_steps += int((~allowed).any())
        for row in rollout.devices:
            assert is_legal(task, Placement(tuple(int(d) for d in row)))
        # the masked devices' scores, however large, change nothing: episodes, loss, gradients
        assert np.array_equal(rollout.devices, reference[0].devices)
        assert torch.equal(loss, reference[1])
        assert bump_grad is not None and bump_grad.item() == 0.0
        for g, ref in zip(gradients, reference[3]):
            assert torch.equal(g, ref)
    assert masked_steps > 0, "the caps never masked a device: the test checks nothing"


@pytest.mark.parametrize("seed", range(4))
def test_the_episodes_reward_is_the_cost_networks_prediction_for_their_placement(seed):
    task = tight_task(seed)
    torch.manual_seed(seed)
    policy, costnet = PlacementPolicy(), random_costnet(seed)
    for rollout in (
        policy.rollout(task, costnet, 4, generator=torch.Generator().manual_seed(seed)),
        policy_module.fast_rollout(policy, task, costnet, 1, 3, torch.Generator().manual_seed(1)),
    ):
        for e in range(len(rollout.devices)):
            _, overall = costnet.predict_ms(task, rollout.placement(e, "dreamshard"))
            predicted = float(rollout.predicted[e]) * float(costnet.scale)
            assert predicted == pytest.approx(overall, rel=1e-5, abs=1e-5)
