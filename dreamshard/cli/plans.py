"""`dreamshard check` and `explain`: what an existing plan is worth
(`integrations.plan_check`), and why it puts each table where it does (`evaluation.explain`)."""

from __future__ import annotations

import argparse
import json

from dreamshard.cli.args import (
    hardware_option,
    load_table_source,
    plan_hardware,
    positive,
    table_source_options,
)
from dreamshard.errors import DreamshardError, IllegalPlanError
from dreamshard.files import read_json
from dreamshard.integrations.torchrec_export import TORCHREC_PLAN_FORMAT, check_plan_dict
from dreamshard.placement.plan_file import PLAN_FORMAT
from dreamshard.placement.tasks import GIB, PlacementTask
from dreamshard.report import format_table
from dreamshard.tables.table import BYTES_PER_WEIGHT, OPTIMIZER_STATE_WORDS

# `check`'s exit code for a plan it read and found illegal (2 stays "could not check")
ILLEGAL = 1


def read_plan(args: argparse.Namespace):
    """(the plan file's content, the task it places, its placement of it), the file read once:
    what `check` and `explain` start from."""
    from dreamshard.integrations.plan_check import read_any_plan

    data = read_json(args.plan, "plan file")
    task = plan_task(args, data)
    task.validate()
    return data, task, read_any_plan(args.plan, task, args.module_path, data)


def plan_task(args: argparse.Namespace, data) -> PlacementTask:
    """The task a plan file (its content `data`) places: its tables, and the devices, memory
    per device, precision, optimizer and constraints the plan records (ours; a TorchRec plan
    records its device count, where `place --format torchrec` wrote it) or the flags give; a
    flag given overrides the plan. A plan that records no device count needs --devices: its
    ranks are what is checked, not what sets the devices."""
    ours = isinstance(data, dict) and data.get("format") == PLAN_FORMAT
    recorded = data if ours else {}
    if not ours and isinstance(data, dict) and data.get("format") == TORCHREC_PLAN_FORMAT:
        try:  # its layout and types first: a device count of "4" is not one
            check_plan_dict(data)
        except DreamshardError as exc:
            raise DreamshardError(f"{args.plan}: {exc}") from None
        recorded = {"num_devices": data.get("num_devices")}  # 0 or absent: none recorded
    devices = args.devices or recorded.get("num_devices")
    if not devices:
        raise DreamshardError(f"{args.plan}: it records no device count; give --devices")
    cap = int(args.mem_gb * GIB) if args.mem_gb else recorded.get("memory_cap_bytes")
    if not cap:
        raise DreamshardError(
            f"{args.plan}: a TorchRec plan records no memory per device; give --mem-gb"
        )
    precision = args.precision or recorded.get("precision") or "fp16"
    optimizer = args.optimizer or recorded.get("optimizer") or "sgd"
    tables = load_table_source(args)
    constraints = None
    if recorded.get("constraints"):  # what the plan was made to hold: checked too
        from dreamshard.files import validate
        from dreamshard.placement.constraints import ConstraintsFile

        where = f"{args.plan}: constraints"
        constraints = validate(ConstraintsFile, recorded["constraints"], where).constraints()
    name = str(args.plan)
    return PlacementTask(
        tuple(tables), int(devices), int(cap), precision, name, optimizer, constraints
    )


def cmd_check(args: argparse.Namespace) -> int:
    from dreamshard.integrations.plan_check import check_plan

    try:
        data, task, placement = read_plan(args)
    except IllegalPlanError as exc:  # read, but no placement of the task: illegal, said in a line
        if args.format == "json":
            print(json.dumps({"task": str(args.plan), "legal": False, "problem": str(exc)}))
        else:
            print(f"{args.plan}: legal: no: {exc}")
        return ILLEGAL
    hardware = plan_hardware(args, data)
    report = check_plan(task, placement, args.model, not args.no_compare, hardware)
    if args.format == "json":
        print(json.dumps(report.as_dict(), indent=1))
    else:
        print(check_text(report, task))
    return 0 if report.legal else ILLEGAL


def check_text(report, task: PlacementTask) -> str:
    lines = [
        f"{report.task}: {report.method or 'a plan'} of {len(task.tables)} tables on "
        f"{report.num_devices} devices of {report.memory_cap_bytes / GIB:g} GiB "
        f"({task.precision}, {task.optimizer})",
        "legal: yes" if report.legal else f"legal: no: {report.problem}",
        f"predicted by {report.judge}: {report.overall_ms:.3f} ms (the slowest device)",
    ]
    if report.dreamshard_ms is not None:
        lines.append(
            f"dreamshard's plan of the same tables ({report.dreamshard_candidate}): "
            f"{report.dreamshard_ms:.3f} ms, {report.ratio:.3f}x this plan's"
        )
    elif report.dreamshard_candidate:
        lines.append(f"dreamshard's plan of the same tables: {report.dreamshard_candidate}")
    rows = [
        [
            d.device,
            d.tables,
            f"{d.memory_bytes / GIB:.3f}",
            "-" if d.torchrec_memory_bytes is None else f"{d.torchrec_memory_bytes / GIB:.3f}",
            f"{d.fwd_comp_ms:.3f}",
            f"{d.comm_ms:.3f}",
            f"{d.bwd_comp_ms:.3f}",
        ]
        for d in report.devices
    ]
    headers = ["device", "tables", "GiB (ours)", "GiB (TorchRec)", "fwd ms", "all-to-all", "bwd ms"]
    lines.append(format_table(headers, rows))
    if report.torchrec_note:
        lines.append(report.torchrec_note)
    return "\n".join(lines)


def cmd_explain(args: argparse.Namespace) -> None:
    from dreamshard.evaluation.explain import explain_plan

    data, task, placement = read_plan(args)
    seed = args.seed if args.seed is not None else int(data.get("seed") or 0)
    hardware = plan_hardware(args, data)
    explanation = explain_plan(task, placement, args.model, seed, args.samples, hardware)
    if args.format == "json":
        print(json.dumps(explanation.as_dict(), indent=1))
    else:
        print(explain_text(explanation, args.model, seed))


def explain_text(found, model, seed: int) -> str:
    lines = [
        f"{found.task}: {found.method or 'a plan'}, predicted by {found.judge}: "
        f"{found.overall_ms:.3f} ms (the slowest forward plus the slowest all-to-all and "
        "backward)",
    ]
    if model is None:
        lines.append("no --model: the analytic model predicts; --model shows the candidates")
    rows = [
        [
            d.device,
            d.tables,
            f"{d.fwd_ms:.3f}",
            f"{d.comm_ms:.3f}",
            f"{d.bwd_ms:.3f}",
            d.bottleneck,
            d.critical or "-",
        ]
        for d in found.devices
    ]
    headers = ["device", "tables", "fwd ms", "all-to-all ms", "bwd ms", "bottleneck", "critical"]
    lines += ["", format_table(headers, rows), ""]
    rows = [
        [
            t.table,
            t.device,
            f"{t.key:.4g}",
            f"{t.load_before:.4g}",
            f"{t.overall_ms:.3f}",
            ", ".join(f"{d}: {ms:.3f}" for d, ms in t.next_best) or "-",
        ]
        for t in found.tables
    ]
    headers = ["table", "device", "key", "load before", "overall ms here", "next best (ms)"]
    lines += [f"tables, largest key first (key: {found.key})", format_table(headers, rows)]
    if found.candidates:
        lines += [
            "",
            f"the model's planner weighed {len(found.candidates)} candidates (seed {seed}):",
        ]
        lines += [f"  {c.name}: {c.predicted_ms:.3f} ms" for c in found.candidates[:8]]
        won = found.candidates[0].name
        by = "" if found.margin is None else f", {found.margin:.2%} ahead of the next"
        verdict = "is" if found.plan_is_winner else "is not"
        lines.append(f"winner: {won}{by}; the plan {verdict} this winner")
    return "\n".join(lines)


def plan_options(parser: argparse.ArgumentParser) -> None:
    """What `check` and `explain` read a plan with: the plan, its tables, what the plan does
    not record (or a flag overrides), a TorchRec plan's collection, the output format."""
    parser.add_argument("--plan", required=True, help="plan JSON (place --out, any --format)")
    parser.add_argument("--tables", required=True, help="the table file the plan places")
    parser.add_argument(
        "--devices", type=positive(int), help="devices (default: what the plan records)"
    )
    parser.add_argument(
        "--mem-gb",
        type=positive(float),
        help="memory per device in GiB (default: what the plan records; a TorchRec plan needs it)",
    )
    parser.add_argument("--precision", choices=list(BYTES_PER_WEIGHT), help="default: the plan's")
    parser.add_argument(
        "--optimizer", choices=list(OPTIMIZER_STATE_WORDS), help="default: the plan's, else sgd"
    )
    parser.add_argument(
        "--module-path",
        default="embedding_bags",
        help="a TorchRec plan: the EmbeddingBagCollection whose tables these are (default "
        "embedding_bags, what place --format torchrec writes)",
    )
    parser.add_argument("--format", choices=["md", "json"], default="md", help="default md")
    table_source_options(parser)


def add_plan_commands(sub) -> None:
    check = sub.add_parser(
        "check",
        help="check an existing plan (ours or a TorchRec ShardingPlan as JSON): legality, "
        "memory as we and TorchRec count it, its predicted cost, and dreamshard's own plan "
        "of the same tables beside it",
        description="Exit code 0: a legal plan; 1: the plan is illegal (the report says why); "
        "2: it could not be checked.",
    )
    plan_options(check)
    check.add_argument(
        "--model",
        help="predict with this model's cost network (a model file, a train --out folder, "
        "shipped, or models:/...) and plan dreamshard's comparison with it; default: the "
        "calibrated analytic model predicts and the shipped model plans",
    )
    check.add_argument(
        "--no-compare", action="store_true", help="skip dreamshard's plan of the same tables"
    )
    hardware_option(check)
    check.set_defaults(func=cmd_check)

    why = sub.add_parser(
        "explain",
        help="why a plan puts each table where it does: each device's predicted terms and "
        "bottleneck, each table's key, its device's load before it and its next-best devices, "
        "and with --model the candidates that model's planner weighed (predicts; never "
        "re-plans the plan)",
    )
    plan_options(why)
    why.add_argument(
        "--model",
        help="predict with this model's cost network and show the candidates its planner "
        "weighed (a model file, a train --out folder, shipped, or models:/...); default: the "
        "calibrated analytic model, no candidates",
    )
    why.add_argument(
        "--seed",
        type=int,
        help="the planner's seed for the candidates (default: the plan's, else 0)",
    )
    why.add_argument(
        "--samples", type=int, default=8, help="the planner's sampled placements (default 8)"
    )
    hardware_option(why)
    why.set_defaults(func=cmd_explain)
