"""`dreamshard measure`, `collect` and `calibrate`: the cost side of the command line."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from dreamshard.cli.args import (
    hardware_option,
    load_table_source,
    plan_hardware,
    positive,
    table_source_options,
    topology_name,
)
from dreamshard.costs.backends import BACKENDS, JUDGES
from dreamshard.costs.comm import TOPOLOGY_HELP
from dreamshard.costs.types import COST_TERMS, PlacementCost
from dreamshard.errors import DreamshardError
from dreamshard.report import format_table


def _backend_spec(args: argparse.Namespace, recorded: dict | None = None):
    from dreamshard.costs.backends import JUDGES
    from dreamshard.costs.fanout import BackendSpec

    if args.backend in JUDGES:
        given = [f"--{k}" for k in ("iterations", "rounds", "launcher") if getattr(args, k)]
        if given:
            raise DreamshardError(
                f"the {args.backend} judge times nothing; drop {', '.join(given)}"
            )
    hardware = getattr(args, "hardware", None)
    if hardware is None and recorded is not None and args.backend in ("simulated", *JUDGES):
        # a plan judged for the hardware file it records (else this host's)
        found = plan_hardware(args, recorded)
        hardware = found.name if found.is_gpu or args.backend == "simulated" else None
    elif hardware is None and args.backend == "simulated":  # this host's (cpu without a GPU)
        from dreamshard.costs.hardware import detect_hardware

        hardware = detect_hardware()[0].name
    return BackendSpec(
        args.backend,
        args.iterations,
        args.launcher or "inprocess",
        args.topology,
        args.rounds,
        hardware,
    )


def _backend(args: argparse.Namespace, recorded: dict | None = None):
    return _backend_spec(args, recorded).build()


def format_cost(cost: PlacementCost, config: dict) -> str:
    rows = [
        [d, *(round(v, 3) for v in dev.terms()), round(dev.total, 3), f"{dev.cv:.1%}"]
        for d, dev in enumerate(cost.devices)
    ]
    slowest = max(range(len(cost.devices)), key=lambda d: cost.devices[d].total)
    where = config.get("device", "")
    source = {
        "simulated": "simulated: an analytic model calibrated on real fbgemm measurements, "
        "not a measurement",
        "dmp": f"real TorchRec training steps (DMP) on {where}, the whole step in fwd_comp",
        "torchrec-estimator": "TorchRec's EmbeddingPerfEstimator, its perf per rank, not a "
        "measurement",
    }.get(cost.backend, f"measured with fbgemm on {where}")
    if cost.backend == "simulated" and "hardware" in cost.info:
        source = "simulated: the GPU kernel roofline, not a measurement"
    if "hardware" in cost.info:
        source += f"; hardware {cost.info['hardware']}"
    comm = cost.comm + (f" ({cost.info['topology']} topology)" if cost.comm == "modeled" else "")
    return "\n".join(
        [
            format_table(["device", *COST_TERMS, "total ms", "cv"], rows),
            f"overall cost: {cost.overall:.3f} ms (device {slowest}, the slowest)",
            f"backend: {source}; communication {comm}; batch {cost.info.get('batch')}",
        ]
    )


def cmd_measure(args: argparse.Namespace) -> None:
    from dreamshard.placement.plan_file import placement_from_plan, read_plan
    from dreamshard.placement.tasks import PlacementTask

    plan = read_plan(args.plan)
    tables = load_table_source(args)
    where = str(args.plan)
    task = PlacementTask(
        tuple(tables), plan.num_devices, plan.memory_cap_bytes, plan.precision, where
    )
    task.validate()
    placement = placement_from_plan(task, plan, where)
    recorded = {"hardware": plan.hardware.model_dump()} if plan.hardware else {}
    backend = _backend(args, recorded)
    cost = backend.measure(task, placement)
    if args.json:
        print(
            json.dumps(
                {
                    "overall": cost.overall,
                    "backend": cost.backend,
                    "comm": cost.comm,
                    "devices": [asdict(d) | {"total": d.total} for d in cost.devices],
                    "config": backend.config(),
                    **cost.info,
                },
                indent=1,
            )
        )
    else:
        print(format_cost(cost, backend.config()))


def cmd_collect(args: argparse.Namespace) -> None:
    from dreamshard.costs.collect import collect, collection_jobs
    from dreamshard.costs.dataset import CostDataset
    from dreamshard.costs.fanout import fanout_for
    from dreamshard.placement.suites import make_suite, parse_suite_name
    from dreamshard.state import default_dataset_path

    spec = parse_suite_name(args.suite, num_train_tasks=args.train_tasks, num_test_tasks=1)
    suite = make_suite(spec)
    jobs = list(collection_jobs(suite, args.placements, args.mix))
    backend_spec = _backend_spec(args)
    backend = backend_spec.build()
    with fanout_for(args.cluster, backend_spec) as fanout:
        dataset = CostDataset(args.dataset or default_dataset_path())
        summary = collect(jobs, backend, dataset, spec.name, fanout)
    print(
        f"{summary.measured} measured, {summary.skipped} already stored, {summary.errors} failed; "
        f"{len(dataset)} records in {dataset.path}"
    )


def cmd_merge(args: argparse.Namespace) -> None:
    from dreamshard.costs.dataset import CostDataset
    from dreamshard.state import default_dataset_path

    dataset = CostDataset(args.dataset or default_dataset_path())
    for source in args.sources:
        added = dataset.merge_from(source)
        print(f"{added} measurements added from {source}")
    print(f"{len(dataset)} records in {dataset.path}")


def cmd_calibrate(args: argparse.Namespace) -> None:
    from dreamshard.costs.calibrate import calibrate, describe_fit
    from dreamshard.costs.dataset import CostDataset
    from dreamshard.state import calibration_path, default_dataset_path

    path = Path(args.dataset or default_dataset_path())
    if not path.exists():
        raise DreamshardError(f"no cost dataset at {path}; run dreamshard collect first")
    model = calibrate(CostDataset(path))
    out = Path(args.out or calibration_path())
    model.save(out)
    print(describe_fit(model, out))


def add_backend_options(parser: argparse.ArgumentParser, judges: bool = False) -> None:
    parser.add_argument(
        "--backend",
        choices=BACKENDS + (JUDGES if judges else ()),
        default="fbgemm",
        help="fbgemm: real kernels on this host (default); simulated: the analytic model of "
        "the hardware file (cpu: calibrated on this host's kernels; a GPU file: its roofline); "
        "dmp: real TorchRec training steps (one process per device)"
        + (
            "; torchrec-estimator: each rank's perf as TorchRec's planner computes it, with the "
            "hardware file's constants (times nothing)"
            if judges
            else ""
        ),
    )
    parser.add_argument(
        "--iterations", type=positive(int), help="timed iterations per device (default 15)"
    )
    parser.add_argument(
        "--rounds",
        type=positive(int),
        help="dmp: interleaved rounds a launch, a label being each rank's median over them "
        "(default 3)",
    )
    parser.add_argument(
        "--launcher",
        choices=["inprocess", "torchrun"],
        help="inprocess: devices timed in turn, communication modeled (default); "
        "torchrun: one process per device, all-to-all measured",
    )
    parser.add_argument(
        "--topology",
        type=topology_name,
        default="auto",
        metavar="TOPOLOGY",
        help="communication model when it is not measured (default auto: cpu-gloo on the CPU, "
        f"nvlink on GPUs); {TOPOLOGY_HELP}",
    )


def add_cost_commands(sub) -> None:
    measure = sub.add_parser("measure", help="measure a plan's per-device cost breakdown")
    measure.add_argument("--tables", required=True, help="the table file the plan was made from")
    measure.add_argument("--plan", required=True, help="plan JSON from dreamshard place")
    measure.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_backend_options(measure, judges=True)
    hardware_option(measure)
    table_source_options(measure)
    measure.set_defaults(func=cmd_measure)

    coll = sub.add_parser(
        "collect",
        help="measure placements of a suite's training tasks "
        "into the cost dataset (resumes where it stopped; takes turns with other "
        "measurements on this host)",
    )
    coll.add_argument("--suite", required=True, help="suite name, e.g. cpu-50x4")
    coll.add_argument("--placements", type=positive(int), required=True, help="how many placements")
    coll.add_argument(
        "--mix",
        choices=["mixed", "random", "heuristic", "split"],
        default="mixed",
        help="which planners propose them: mixed (random and the heuristics), random, "
        "heuristic, or split (random and the heuristics, each placing tables split the ways "
        "--split auto considers, so a cost network learns shards) (default mixed)",
    )
    coll.add_argument(
        "--train-tasks", type=positive(int), default=50, help="training tasks (default 50)"
    )
    coll.add_argument("--dataset", help="SQLite file (default .dreamshard/costs.sqlite)")
    coll.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="measure on a Dask cluster: a scheduler's address (tcp://HOST:8786), or local / "
        "local:N for N workers of an embedded one on this host (default: this process, or "
        "$DREAMSHARD_DASK_ADDRESS). Workers measure under their host's lock and send the "
        "records back; only this process writes the dataset",
    )
    add_backend_options(coll)
    coll.set_defaults(func=cmd_collect)

    merge = sub.add_parser(
        "merge",
        help="copy the measurements of other cost datasets into one (those it holds already, "
        "by what was measured, are skipped), so training and calibration reuse them all",
    )
    merge.add_argument("sources", nargs="+", help="cost dataset files to copy from")
    merge.add_argument(
        "--dataset", help="SQLite file to merge into (default .dreamshard/costs.sqlite)"
    )
    merge.set_defaults(func=cmd_merge)

    cal = sub.add_parser("calibrate", help="fit the simulated backend to real measurements")
    cal.add_argument("--dataset", help="SQLite file (default .dreamshard/costs.sqlite)")
    cal.add_argument("--out", help="weights file (default .dreamshard/simulated.json)")
    cal.set_defaults(func=cmd_calibrate)
