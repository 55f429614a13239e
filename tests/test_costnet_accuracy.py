"""benchmarks/costnet_accuracy.py: a model file judged against the median of interleaved rounds,
with the noise floor of one round beside it, and a dataset without such rounds refused."""

import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import load_benchmark

from dreamshard.costs.collect import collect, collection_jobs
from dreamshard.costs.dataset import CostDataset, hardware, measurement_key
from dreamshard.costs.reference import NOMINAL_MS, reference_info
from dreamshard.costs.simulated import SimulatedBackend
from dreamshard.costs.types import PlacementCost
from dreamshard.learn.costnet_data import load_examples
from dreamshard.learn.costnet_fit import fit_costnet
from dreamshard.learn.model_file import DreamShardModel, save_model
from dreamshard.learn.policy import PlacementPolicy
from dreamshard.learn.train import fresh_state
from dreamshard.learn.train_config import TrainConfig
from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place, random_place
from dreamshard.placement.suites import make_suite, parse_suite_name

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "costnet_accuracy.py"
SUITE = "cpu-12x3"
ROUNDS = range(1000, 1005)  # compare_planners' interleaved rounds


def model_file(path: Path, costnet) -> Path:
    save_model(DreamShardModel(costnet, PlacementPolicy(lookahead=True)), path)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(fitted, untrained) model files: one cost network fitted on exact costs of the suite's
    training tasks, and a fresh one of the same design."""
    folder = tmp_path_factory.mktemp("models")
    suite = make_suite(parse_suite_name(SUITE, num_train_tasks=10, num_test_tasks=2))
    dataset = CostDataset(folder / "train.sqlite")
    backend = SimulatedBackend()
    collect(list(collection_jobs(suite, 80)), backend, dataset, SUITE)
    config = TrainConfig(backend="simulated", iterations=1, costnet_steps=300, init_model="none")
    torch.manual_seed(0)
    state = fresh_state(config)
    fit_costnet(state, config, load_examples(dataset, backend.config()))
    fresh = fresh_state(config).costnet
    fresh.scale.fill_(float(state.costnet.scale))
    return model_file(folder / "fitted.pt", state.costnet), model_file(folder / "fresh.pt", fresh)


def interleaved_dataset(
    path: Path, noise: float, reference: bool = False, rounds: range = ROUNDS
) -> Path:
    """The heuristics' and two random placements of the suite's 2 test tasks, each stored in 5
    interleaved rounds: exact simulated costs times a per-round factor 1 + noise * N(0, 1)
    (with `reference`, each measurement also records a reference group slowed alike)."""
    backend, rng = SimulatedBackend(), np.random.default_rng(0)
    dataset = CostDataset(path)
    for task in make_suite(parse_suite_name(SUITE, 1, 2)).test_tasks:
        placements = [greedy_place(task, key) for key in HEURISTIC_KEYS]
        placements += [random_place(task, seed) for seed in (1, 2)]
        for round_ in rounds:
            for placement in placements:
                exact = backend.measure(task, placement)
                factor = 1 + noise * rng.standard_normal()
                cost = PlacementCost(
                    tuple(
                        replace(d, fwd_comp=d.fwd_comp * factor, bwd_comp=d.bwd_comp * factor)
                        for d in exact.devices
                    ),
                    exact.backend,
                    exact.comm,
                    reference_info(NOMINAL_MS["cpu"] * factor, 0.0, 1.0, "cpu")
                    if reference
                    else {},
                )
                key = measurement_key(task, placement, backend.config(), round_, hardware())
                dataset.append(key, task, placement, cost, backend.config(), SUITE, round_)
    dataset.close()
    return path


def figures(report: str, over: str, predictor: str) -> list[str]:
    line = re.search(rf"^{re.escape(over)} +{re.escape(predictor)} .*$", report, re.MULTILINE)
    assert line, (over, predictor)
    return line.group(0).split()[-5:]  # fwd, comm, bwd, overall MAPE; Spearman


def test_exact_rounds_have_no_noise_and_a_fitted_network_beats_a_fresh_one(
    tmp_path, models, one_torch_thread
):
    fitted, fresh = models
    dataset = interleaved_dataset(tmp_path / "rounds.sqlite", noise=0.0)
    out = tmp_path / "accuracy.md"
    report = load_benchmark("costnet_accuracy").main(
        [
            "--model",
            str(fitted),
            "--model",
            str(fresh),
            "--dataset",
            str(dataset),
            "--out",
            str(out),
        ]
    )
    assert out.read_text() == report
    floor = figures(report, "all tasks", "one round (noise floor)")
    assert floor == ["0.0%", "0.0%", "0.0%", "0.0%", "1.000"]  # every round is the median
    fitted_mape = float(figures(report, "all tasks", "fitted")[0].rstrip("%"))
    fresh_mape = float(figures(report, "all tasks", "fresh")[0].rstrip("%"))
    assert fitted_mape < 0.5 * fresh_mape
    assert re.search(r"\(1[0-2] placements of 2 held-out tasks", report)  # distinct ones
    assert re.search(r"`fitted`: per-device compute MAPE [\d.]+% .*(met|not met)", report)


def test_noisy_rounds_raise_the_floor(tmp_path, models, one_torch_thread):
    dataset = interleaved_dataset(tmp_path / "rounds.sqlite", noise=0.05)
    report = load_benchmark("costnet_accuracy").main(
        ["--model", str(models[0]), "--dataset", str(dataset)]
    )
    fwd_floor = float(figures(report, "all tasks", "one round (noise floor)")[0].rstrip("%"))
    assert 1.0 < fwd_floor < 10.0  # 5% noise per round, measured against the median of 5


def test_a_dataset_without_interleaved_rounds_is_refused_in_one_line(tmp_path, models):
    dataset = CostDataset(tmp_path / "once.sqlite")
    suite = make_suite(parse_suite_name(SUITE, num_train_tasks=2, num_test_tasks=1))
    collect(list(collection_jobs(suite, 4)), SimulatedBackend(), dataset, SUITE)
    dataset.close()
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--model", str(models[0]), "--dataset", dataset.path],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr
    assert "no placement measured in 5 interleaved rounds" in result.stderr


def test_normalised_medians_divide_out_the_drift_the_reference_saw(tmp_path, models):
    """Each round's measurements are 10% noisy, but the reference group timed with them was
    slowed alike: normalised, every round is the exact cost and the noise floor is zero."""
    dataset = interleaved_dataset(tmp_path / "rounds.sqlite", noise=0.1, reference=True)
    bench = load_benchmark("costnet_accuracy")
    args = ["--model", str(models[0]), "--dataset", str(dataset)]
    raw = bench.main(args)
    normalised = bench.main([*args, "--labels", "normalised"])
    assert float(figures(raw, "all tasks", "one round (noise floor)")[0].rstrip("%")) > 2.0
    assert figures(normalised, "all tasks", "one round (noise floor)")[0] == "0.0%"
    assert "labels normalised by the reference group" in normalised
    plain = interleaved_dataset(tmp_path / "plain.sqlite", noise=0.1)
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args[:2], "--dataset", plain, "--labels", "normalised"],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0 and result.stderr.strip().count("\n") == 0
    assert "has no reference time; use --labels raw" in result.stderr


def test_remeasure_measures_every_placement_again_now_and_resumes(tmp_path, models):
    """`--remeasure` measures the stored placements again on real kernels, each in every fresh
    interleaved round, into its own dataset; run again, it measures nothing twice."""
    bench = load_benchmark("costnet_accuracy")
    source = CostDataset(
        interleaved_dataset(tmp_path / "old.sqlite", 0.0, rounds=range(1000, 1002))
    )
    fresh = CostDataset(tmp_path / "fresh.sqlite")
    placements = {(r["task"], r["placement"]) for r in source.rows()}  # heuristics may agree
    assert bench.remeasure(source, fresh, rounds=2) == 2 * len(placements) > 2
    assert bench.remeasure(source, fresh, rounds=2) == 0
    rows = fresh.rows()
    assert {r["backend"] for r in rows} == {"fbgemm"} and {r["round"] for r in rows} == {1000, 1001}
    assert {(r["task"], r["placement"]) for r in rows} == placements
    report = bench.main(
        [
            "--model",
            str(models[0]),
            "--dataset",
            str(source.path),
            "--min-rounds",
            "2",
            "--remeasure",
            str(fresh.path),
        ]
    )
    assert f"from `{fresh.path}` (measured again from `{source.path}`)" in report
