"""The `dreamshard` command line: generate and inspect tables, make suites, place tables.

Each command imports what only it needs inside its function, so `dreamshard --help` and
`dreamshard place` start without loading torch models, MLflow or the fbgemm kernels.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from dreamshard.cli.args import (
    chosen_hardware,
    constraint_options,
    constraints_from,
    hardware_option,
    load_table_source,
    plan_topology,
    positive,
    table_source_options,
    topology_name,
)
from dreamshard.costs.backends import BACKENDS
from dreamshard.costs.comm import TOPOLOGY_HELP, get_topology, hosts_topology
from dreamshard.errors import DreamshardError
from dreamshard.placement.constraints import bind, describe_constraints
from dreamshard.placement.heuristics import HEURISTIC_KEYS, heuristic_keys
from dreamshard.placement.registry import (
    MODEL,
    RNN_PLACER,
    TORCHREC,
    method_names,
    place,
    registration,
    registrations,
)
from dreamshard.placement.splitting import SPLIT_MODES
from dreamshard.placement.tasks import GIB, Placement, PlacementTask, device_memory, shard_view
from dreamshard.report import format_table
from dreamshard.tables.shards import describe_split
from dreamshard.tables.table import BYTES_PER_WEIGHT, OPTIMIZER_STATE_WORDS


def cmd_tables_generate(args: argparse.Namespace) -> None:
    from dreamshard.tables.sources import save_tables
    from dreamshard.tables.synthetic import generate_tables

    tables = generate_tables(args.profile, args.num_tables, args.seed)
    source = {"kind": "synthetic", "profile": args.profile, "seed": args.seed}
    save_tables(tables, args.out, source)
    print(f"wrote {len(tables)} {args.profile} tables (seed {args.seed}) to {args.out}")


def cmd_tables_show(args: argparse.Namespace) -> None:
    from dreamshard.cli.summaries import tables_summary

    print(tables_summary(load_table_source(args), args.tables))


def cmd_suite_make(args: argparse.Namespace) -> None:
    from dreamshard.placement.suites import make_suite, parse_suite_name, save_suite

    spec = parse_suite_name(args.name, args.train_tasks, args.test_tasks)
    suite = make_suite(spec)
    save_suite(suite, args.out)
    print(
        f"wrote suite {spec.name}: {len(suite.train_tasks)} train and {len(suite.test_tasks)} "
        f"test tasks of {spec.num_tables} tables on {spec.num_devices} devices to {args.out}"
    )


def cmd_suite_show(args: argparse.Namespace) -> None:
    from dreamshard.cli.summaries import suite_summary
    from dreamshard.placement.suites import load_suite, make_suite

    suite = load_suite(args.suite) if args.suite.endswith(".json") else make_suite(args.suite)
    print(suite_summary(suite))


def device_rows(task: PlacementTask, placement: Placement) -> list[list[object]]:
    """Per device: tables (shards), memory used and cap share, and each heuristic key's sum."""
    task, placement = shard_view(task, placement)
    used = device_memory(task, placement)
    keys = {name: heuristic_keys(task, name) for name in HEURISTIC_KEYS}
    devices = np.asarray(placement.devices)
    rows = []
    for d in range(task.num_devices):
        on = devices == d
        row: list[object] = [
            d,
            int(on.sum()),
            used[d] / GIB,
            f"{used[d] / task.memory_cap_bytes:.0%}",
        ]
        row += [float(keys[name][on].sum()) for name in HEURISTIC_KEYS]
        rows.append(row)
    return rows


def cmd_place(args: argparse.Namespace) -> None:
    tables = load_table_source(args)
    hardware, said = chosen_hardware(args)
    if args.mem_gb is None and not hardware.is_gpu:
        raise DreamshardError(
            f"give --mem-gb (memory per device in GiB): the {hardware.name} hardware file "
            "states no device memory"
        )
    mem_gb = args.mem_gb or hardware.value("memory_bytes") / GIB
    cap = int(mem_gb * GIB)
    task = PlacementTask(
        tuple(tables),
        args.devices,
        cap,
        args.precision,
        str(args.tables),
        args.optimizer,
        constraints_from(args),
    )
    bind(task)  # constraints that cannot hold: one line before any planning
    topology = plan_topology(args.topology, hardware)
    if args.hosts is not None:
        if topology is None:
            raise DreamshardError(
                "--hosts needs --topology: a multi-host one (nvlink-rdma, pcie-ethernet, "
                "torchrec) or your own (per-host=L,intra=GBPS,inter=GBPS)"
            )
        topology = hosts_topology(topology, args.hosts, args.devices)
    if topology is not None:
        get_topology(topology).host_size(args.devices)  # devices that do not fill its hosts
    model, note = args.model, None
    entry = registration(args.method)
    if entry.needs_model:  # loaded once, here, to say whether the task is one it was trained for
        from dreamshard.learn.coverage import outside_training

        model = entry.load().load_model(args.model)
        note = outside_training(task, getattr(model, "metadata", {}).get("ranges"))
    if args.refine_seconds is not None and not args.refine:
        raise DreamshardError("--refine-seconds needs --refine BACKEND (fbgemm or simulated)")
    start = time.perf_counter()
    refinement = None
    if args.refine:
        refinement = refine_placement(task, args, model, topology)
        placement = refinement.placement
    else:
        placement = place(
            task,
            args.method,
            args.seed,
            model=model,
            samples=args.samples,
            split=args.split,
            time_budget=args.time_budget,
            topology=topology,
            hardware=hardware,
        )
    verdict = None
    for_torchrec = PLAN_WRITERS[args.format] is write_sharding_plan
    if for_torchrec and args.reference and entry.needs_model and not args.refine:
        placement, verdict = weigh_reference(task, placement, args, model, topology, hardware)
    elapsed = time.perf_counter() - start
    # written before anything is printed: output piped into `head` must not lose the plan
    wrote = args.out and PLAN_WRITERS[args.format](
        task, placement, args, note, refinement, hardware, verdict
    )
    headers = ["device", "tables", "memory GiB", "of cap"] + [
        f"{k}{'*' if k == args.method else ''}" for k in HEURISTIC_KEYS
    ]
    took = f"planned in {elapsed * 1000:.1f} ms"
    if refinement is not None:
        took = f"planned and measured in {elapsed:.1f} s"
    print(said)
    print(
        f"{args.method}: {len(tables)} tables on {args.devices} devices of {mem_gb:g} GiB "
        f"({args.precision}{'' if args.optimizer == 'sgd' else ', ' + args.optimizer}"
        f"{'' if topology is None else ', topology ' + topology}), {took}"
    )
    if refinement is not None:
        print(refinement.summary())
    if verdict is not None:
        print(f"reference: {verdict['reason']}")
    elif placement.candidate:
        named = f", reported as {placement.method}" if placement.method != args.method else ""
        judge = "the cost network" if entry.needs_model else "the analytic model"
        print(f"chosen by {judge}: {placement.candidate}{named}")
    for split in placement.splits:
        print(f"split: {describe_split(split)}")
    if task.constraints:
        print(f"constraints held: {describe_constraints(task.constraints)}")
    if note:
        print(f"note: {note}; the heuristics are among the candidates", file=sys.stderr)
    print(format_table(headers, device_rows(task, placement)))
    print(
        "key sums per device: dim; size = rows*dim; lookup = dim*pooling; "
        "size_lookup = lookup*log10(rows)"
    )
    if wrote:
        print(wrote)


def weigh_reference(task, placement, args, model, topology, hardware):
    """`place --format torchrec`: the reference rule (`placement.reference`) on the method's
    placement and TorchRec's plan of the task (else the best whole-table heuristic); the
    placement kept and the verdict, which the plan file records."""
    from dreamshard.integrations.reference_plan import (
        reference_budget,
        task_reference,
        weigh_plan,
    )
    from dreamshard.placement.planner import PlanOptions
    from dreamshard.placement.reference import load_calibration

    planner = registration(args.method).load()
    options = PlanOptions(
        args.seed, model, args.samples, args.split, args.time_budget, topology, hardware=hardware
    )

    def predict(p):
        return planner.predict(task, p, options)

    budget = reference_budget(len(task.tables), args.time_budget)
    reference = task_reference(
        task, predict, budget, split=args.split, topology=topology, hardware=hardware
    )
    if reference is None:  # constraints no TorchRec plan or whole-table heuristic holds
        return placement, None
    verdict = weigh_plan(reference, placement, predict(placement), predict, load_calibration())
    kept = reference.placement if verdict.kept_reference else placement
    return kept, {**verdict.record(), "note": reference.note}


def write_our_plan(task, placement, args, note, refinement, hardware, _verdict=None) -> None:
    from dreamshard.placement.plan_file import write_plan

    record = refinement and refinement.record()
    write_plan(task, placement, args.out, note, record, args.seed, hardware.record())
    return f"wrote {args.out}"


def write_sharding_plan(task, placement, args, _note, _refinement, _hardware, verdict=None):
    from dreamshard.integrations.torchrec_export import write_torchrec_plan

    write_torchrec_plan(
        task, placement, args.out, args.module_path, args.compute_device, reference=verdict
    )
    return f"wrote {args.out} (TorchRec sharding plan, module {args.module_path})"


# `place --format`: the plan file's layouts
PLAN_WRITERS = {"dreamshard": write_our_plan, "torchrec": write_sharding_plan}


def cmd_methods(args: argparse.Namespace) -> None:
    rows = [[r.name, r.kind, ", ".join(r.needs) or "-", r.summary] for r in registrations()]
    print(format_table(["method", "kind", "needs", "what it does"], rows))


def method_help() -> str:
    """`--method`'s help, from the registry: what each kind of need asks for."""
    asks = {
        MODEL: "--model (a trained model)",
        RNN_PLACER: "--model (an RNN placer file)",
        TORCHREC: "TorchRec (`make torchrec`)",
    }
    parts = []
    for need, ask in asks.items():
        names = [r.name for r in registrations() if need in r.needs]
        if names:
            parts.append(f"{', '.join(names)} need{'s' if len(names) == 1 else ''} {ask}")
    return f"planner (default size_lookup; `dreamshard methods` lists them); {'; '.join(parts)}"


def refine_placement(task: PlacementTask, args: argparse.Namespace, model, topology):
    """The method's placement refined by measurement on `--refine` (evaluation.refine), its
    all-to-all modeled on `topology` (None: the backend's own)."""
    from dreamshard.costs.backends import make_backend
    from dreamshard.evaluation.refine import REFINE_SECONDS, refine

    seconds = args.refine_seconds or REFINE_SECONDS
    backend = make_backend(args.refine, topology=topology or "auto")
    reference = None
    if args.refine == "dmp":  # real TorchRec steps: TorchRec's own plan is the one to beat
        reference = torchrec_reference_placement(task, args, topology)
    return refine(
        task,
        args.method,
        backend,
        seconds,
        model,
        args.samples,
        args.seed,
        split=args.split,
        topology=topology,
        reference=reference,
    )


def torchrec_reference_placement(task: PlacementTask, args: argparse.Namespace, topology):
    """TorchRec's plan of the task within a quarter of the refinement's seconds (at least its
    1 s), or None, said in one line, where it gives none."""
    from dreamshard.evaluation.refine import REFINE_SECONDS
    from dreamshard.integrations.reference_plan import torchrec_timeout
    from dreamshard.integrations.torchrec_planner import torchrec_place

    timeout = max(1, torchrec_timeout(args.refine_seconds or REFINE_SECONDS))
    try:
        placement = torchrec_place(
            task, reserve=False, split=args.split, topology=topology, timeout=timeout
        )
    except DreamshardError as exc:
        print(f"dreamshard: no TorchRec plan to refine against ({exc})", file=sys.stderr)
        return None
    return replace(placement, candidate="torchrec")


def cmd_demo(args: argparse.Namespace) -> None:
    from dreamshard.cli.demo import run_demo
    from dreamshard.costs.backends import make_backend
    from dreamshard.placement.suites import parse_suite_name

    spec = parse_suite_name(args.suite, num_train_tasks=1, num_test_tasks=args.tasks)
    run_demo(spec, args.rounds, make_backend(args.backend, args.iterations))


class _Parser(argparse.ArgumentParser):
    """Usage mistakes as one line on stderr and exit code 2 (`--help` shows the usage)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dreamshard",
        description="Place embedding tables on devices so that training runs fast (DreamShard).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from dreamshard.cli.costs import add_cost_commands
    from dreamshard.cli.plans import add_plan_commands
    from dreamshard.cli.train import (
        add_pretrain_command,
        add_train_command,
        add_train_rnn_command,
    )

    add_tables_commands(sub)
    add_suite_commands(sub)
    add_place_command(sub)
    add_cost_commands(sub)
    add_plan_commands(sub)
    add_train_command(sub)
    add_train_rnn_command(sub)
    add_pretrain_command(sub)

    methods = sub.add_parser("methods", help="list the placement methods --method accepts")
    methods.set_defaults(func=cmd_methods)

    add_demo_command(sub)
    return parser


def add_tables_commands(sub) -> None:
    """`tables generate` and `tables show`."""
    tables = sub.add_parser("tables", help="generate or inspect embedding tables")
    tsub = tables.add_subparsers(dest="tables_command", required=True, metavar="ACTION")
    gen = tsub.add_parser(
        "generate", help="make synthetic tables (their traces regenerate from the seed)"
    )
    gen.add_argument(
        "--profile",
        choices=["dlrm", "cpu", "wide"],
        default="dlrm",
        help="dlrm: full-size tables as on GPUs; cpu: scaled to time on a CPU; wide: a family "
        "of wider ranges (rows 1e3-5e7, dims 8-256, pooling 1-200), not fitted to the data set "
        "(default dlrm)",
    )
    gen.add_argument(
        "--num-tables", type=positive(int), default=50, help="how many tables (default 50)"
    )
    gen.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    gen.add_argument(
        "--out", required=True, help="output file: .json (with trace seeds) or .csv (spec)"
    )
    gen.set_defaults(func=cmd_tables_generate)

    show = tsub.add_parser("show", help="summarise a table file")
    show.add_argument(
        "tables", help="table file: .csv/.json spec, generated .json, or data-set .pt/.pt.gz"
    )
    table_source_options(show)
    show.set_defaults(func=cmd_tables_show)


def add_suite_commands(sub) -> None:
    """`suite make` and `suite show`."""
    suite = sub.add_parser("suite", help="make or inspect a task suite (train/test tasks)")
    ssub = suite.add_subparsers(dest="suite_command", required=True, metavar="ACTION")
    make = ssub.add_parser("make", help="build a named suite such as dlrm-50x4 and save it")
    make.add_argument("name", help="<profile>-<tables>x<devices>, e.g. dlrm-50x4, cpu-100x8")
    make.add_argument("--train-tasks", type=positive(int), default=50, help="default 50")
    make.add_argument("--test-tasks", type=positive(int), default=50, help="default 50")
    make.add_argument("--out", required=True, help="output .json file")
    make.set_defaults(func=cmd_suite_make)
    sshow = ssub.add_parser("show", help="summarise a suite (a saved .json or a suite name)")
    sshow.add_argument("suite")
    sshow.set_defaults(func=cmd_suite_show)


def add_place_command(sub) -> None:
    """`place`: a plan of a table file, refined, checked against constraints, written."""
    pl = sub.add_parser("place", help="place tables on devices and write the plan")
    pl.add_argument("--tables", required=True, help="table file (.csv, .json, .pt, .pt.gz)")
    pl.add_argument("--devices", type=positive(int), required=True, help="number of devices")
    pl.add_argument(
        "--mem-gb",
        type=positive(float),
        help="memory per device in GiB (units of 2^30 bytes); default: a GPU hardware file's "
        "memory (required with cpu)",
    )
    hardware_option(pl)
    pl.add_argument(
        "--method",
        choices=list(method_names()),
        default="size_lookup",
        help=method_help(),
    )
    pl.add_argument(
        "--model",
        help="trained model for --method dreamshard: a model file "
        "(dreamshard train writes DIR/model.pt) or a registered MLflow model such "
        "as models:/dreamshard-policy@champion (tracking URI: $MLFLOW_TRACKING_URI, "
        "else .dreamshard/mlflow.db)",
    )
    pl.add_argument(
        "--samples",
        type=int,
        default=8,
        help="dreamshard: sampled placements weighed against the greedy one and "
        "the heuristics by the cost network (default 8; 0: greedy only, as the "
        "paper)",
    )
    pl.add_argument(
        "--precision",
        choices=list(BYTES_PER_WEIGHT),
        default="fp16",
        help="weight precision for memory (default fp16, as in the paper)",
    )
    pl.add_argument(
        "--optimizer",
        choices=list(OPTIMIZER_STATE_WORDS),
        default="sgd",
        help="the optimizer training fuses into the kernel, whose state (fp32) counts in memory "
        "beside the weights: sgd none (default, what we measure with), rowwise_adagrad one "
        "number per row, adagrad one per weight, adam two",
    )
    pl.add_argument(
        "--split",
        choices=list(SPLIT_MODES),
        default="auto",
        help="auto (default): planners may split tables column-wise (equal widths) or, when a "
        "table fits no device, row-wise; the heuristics halve a table whose key exceeds the "
        "mean device load, dreamshard lets its cost network choose; none: whole tables only, "
        "as in the paper",
    )
    pl.add_argument(
        "--time-budget",
        type=positive(float),
        metavar="SECONDS",
        help="the most the plan may take, splitting included: a planner that searches stops "
        "there with the best legal plan found so far (default: a second per thousand "
        "tables, at least a second; search_analytic and dreamshard_search at least 5)",
    )
    pl.add_argument(
        "--topology",
        type=topology_name,
        metavar="TOPOLOGY",
        help="the hosts and links the devices sit on, which every planner that models the "
        "all-to-all plans for; it overrides a hardware file's links (default: a GPU hardware "
        "file's links, else the model's own, cpu-gloo for the analytic planners); "
        f"{TOPOLOGY_HELP}",
    )
    pl.add_argument(
        "--hosts",
        type=positive(int),
        metavar="H",
        help="spread the devices evenly over H hosts of the --topology (it must divide "
        "--devices); default: the topology's own devices per host",
    )
    pl.add_argument("--seed", type=int, default=0, help="seed for random planners (default 0)")
    pl.add_argument(
        "--refine",
        choices=list(BACKENDS),
        metavar="BACKEND",
        help="measure the planner's pick, its next candidates (dreamshard: the cost network's "
        "top 4) and the heuristics on this backend (fbgemm: real kernels; simulated; dmp: real "
        "TorchRec steps, with TorchRec's own plan measured first as the one to beat) in "
        "interleaved rounds, and return another only if it is cheaper than the pick beyond "
        "the noise; the plan records what was measured (default: no refinement)",
    )
    pl.add_argument(
        "--refine-seconds",
        type=positive(float),
        metavar="N",
        help="--refine: time budget in seconds (default 60; at least 3 rounds are measured)",
    )
    constraint_options(pl)
    pl.add_argument("--out", help="write the plan JSON here")
    pl.add_argument(
        "--format",
        choices=list(PLAN_WRITERS),
        default="dreamshard",
        help="--out layout: dreamshard (default) or torchrec, a table-wise TorchRec "
        "sharding plan as JSON (docs/torchrec.md)",
    )
    pl.add_argument(
        "--reference",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="--format torchrec with a learned method: weigh TorchRec's own plan of the task "
        "(a quarter of the time budget; else the best whole-table heuristic) and keep it unless "
        "the calibrated predicted gain clears the margin; the file records the verdict "
        "(default on; --no-reference: the method's plan as it is)",
    )
    pl.add_argument(
        "--module-path",
        default="embedding_bags",
        help="--format torchrec: the EmbeddingBagCollection's path in the model "
        "(default embedding_bags)",
    )
    pl.add_argument(
        "--compute-device",
        choices=["cuda", "cpu"],
        default="cuda",
        help="--format torchrec: where each rank keeps its shards, rank:d/cuda:d (default) or "
        "rank:d/cpu (DistributedModelParallel on CPUs with gloo)",
    )
    table_source_options(pl)
    pl.set_defaults(func=cmd_place)


def add_demo_command(sub) -> None:
    """`demo`: every planner on a few test tasks, measured and compared."""
    demo = sub.add_parser(
        "demo",
        help="a quick comparison: place a suite's test tasks with every planner, measure, "
        "compare (the main job is `make pipeline`)",
    )
    demo.add_argument("--suite", default="cpu-50x4", help="suite name (default cpu-50x4)")
    demo.add_argument("--tasks", type=positive(int), default=5, help="test tasks (default 5)")
    demo.add_argument(
        "--rounds", type=positive(int), default=3, help="interleaved measurement rounds (default 3)"
    )
    demo.add_argument(
        "--backend",
        choices=["fbgemm", "simulated"],
        default="fbgemm",
        help="fbgemm: real kernels on this host (default); simulated: the model",
    )
    demo.add_argument("--iterations", type=positive(int), help="timed iterations (default 15)")
    demo.set_defaults(func=cmd_demo)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)  # a command may say more than success (check: 1, illegal)
    except DreamshardError as exc:
        print(f"dreamshard: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dreamshard: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like: what it took was enough
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (nothing more reaches the closed pipe)
        return 0
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
