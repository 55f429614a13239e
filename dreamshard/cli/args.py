"""Argument types and option groups shared by the command-line modules."""

from __future__ import annotations

import argparse

from dreamshard.errors import DreamshardError
from dreamshard.tables.table import Table


def positive(kind):
    """An argparse type: a number of `kind` above zero."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    return parse


def checked(text: str, check) -> str:
    """`text`, once `check(text)` has accepted it; its DreamshardError as argparse's one line."""
    try:
        check(text)
    except DreamshardError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def topology_name(text: str) -> str:
    """An argparse type: a topology (`costs.comm`: a preset, `preset:L`, or custom hosts);
    "auto" passes through for the commands that pick one by device."""
    if text == "auto":
        return text
    from dreamshard.costs.comm import get_topology

    return checked(text, get_topology)


HARDWARE_HELP = (
    "the hardware file to plan or judge for: a shipped one ({names}) or the path of your own "
    "(docs/hardware.md); default: this host's (the shipped file matching its GPU, a generic "
    "GPU file when none matches, cpu without a GPU)"
)


def hardware_name(text: str) -> str:
    """An argparse type: a hardware file's name or path, read and checked here (one line on a
    bad one); the name or path passes on, so a job can make the backend again. "" (a
    config's "none given", which argparse passes through its type) stays "" ."""
    if text == "":
        return text
    from dreamshard.costs.hardware import load_hardware

    return checked(text, load_hardware)


def hardware_option(parser: argparse.ArgumentParser) -> None:
    from dreamshard.costs.hardware import known_hardware

    parser.add_argument(
        "--hardware",
        type=hardware_name,
        metavar="NAME|FILE",
        help=HARDWARE_HELP.format(names=", ".join(known_hardware())),
    )


def chosen_hardware(args: argparse.Namespace):
    """The hardware file a command plans or judges for: `--hardware`, else this host's
    (`costs.hardware.detect_hardware`), with the line that says which and why."""
    from dreamshard.costs.hardware import detect_hardware, load_hardware

    if getattr(args, "hardware", None):
        hardware = load_hardware(args.hardware)
        return hardware, f"hardware: {hardware.name} (--hardware)"
    return detect_hardware()


def plan_hardware(args: argparse.Namespace, data):
    """The hardware file a plan is judged for: `--hardware`, else the shipped file the plan
    records (ours, `data` its content; its content hash must match), else this host's."""
    from dreamshard.costs.hardware import known_hardware, load_hardware

    recorded = data.get("hardware") if isinstance(data, dict) else None
    if (
        not args.hardware
        and isinstance(recorded, dict)
        and recorded.get("name") in known_hardware()
    ):
        hardware = load_hardware(recorded["name"])
        if hardware.sha256 != recorded.get("sha256"):
            raise DreamshardError(
                f"{args.plan} was planned for another version of the {hardware.name} hardware "
                "file (its sha256 differs); give --hardware NAME|FILE to judge it"
            )
        return hardware
    return chosen_hardware(args)[0]


def plan_topology(topology: str | None, hardware) -> str | None:
    """The topology a plan is made on: the one given (it overrides the hardware file's
    links), else a GPU hardware file's links, else None (the planner's own: cpu-gloo)."""
    if topology is not None:
        return topology
    return hardware.topology_name() if hardware.is_gpu else None


def share(text: str) -> float:
    """An argparse type: a fraction strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def table_source_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--table-ids", help="data-set files only: table ids to load, e.g. 0-99,200")
    parser.add_argument(
        "--dim",
        type=int,
        default=16,
        help="data-set files only: embedding dim for every table (default 16; 0 draws from 4..128)",
    )


def number_list(text: str, flag: str) -> list[int]:
    """'0-9,20,30-31' -> [0..9, 20, 30, 31]; DreamshardError naming `flag` otherwise."""
    ids: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            ids.extend(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise DreamshardError(f"{flag} {text!r}: use numbers and ranges like 0-9,20") from None
    return ids


def _table_ids(text: str | None) -> list[int] | None:
    return number_list(text, "--table-ids") if text else None


def load_table_source(args: argparse.Namespace) -> list[Table]:
    from dreamshard.tables.sources import load_tables

    return load_tables(args.tables, _table_ids(args.table_ids), args.dim or None)


def constraint_options(parser: argparse.ArgumentParser) -> None:
    """`--pin`, `--together`, `--apart`, `--no-split`, `--sharding` and `--constraints FILE`
    (`placement.constraints`), each flag repeatable."""
    group = parser.add_argument_group(
        "constraints (every method honours them; a set that cannot hold is an error)"
    )
    group.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="TABLE=DEVICE",
        help="put TABLE on DEVICE (0-based); repeatable",
    )
    group.add_argument(
        "--together",
        action="append",
        default=[],
        metavar="T1,T2,...",
        help="put these tables on one device; repeatable (groups sharing a table merge)",
    )
    group.add_argument(
        "--apart",
        action="append",
        default=[],
        metavar="T1,T2,...",
        help="put each of these tables on a different device; repeatable",
    )
    group.add_argument(
        "--no-split",
        action="append",
        default=[],
        metavar="TABLE[,TABLE...]",
        help="never split these tables (--split auto splits the others as it chooses); "
        "tables any constraint names are never split",
    )
    group.add_argument(
        "--sharding",
        action="append",
        default=[],
        metavar="TABLE=KIND",
        help="shard TABLE so, in either --split mode: table_wise (whole), column_wise "
        "(column_wise:4 for 4 shards; default the fewest that fit a device), row_wise (over "
        "every device, TorchRec's layout) or data_parallel (a copy on each device); repeatable",
    )
    group.add_argument(
        "--constraints",
        metavar="FILE",
        help='a JSON file of many: {"pin": {"t3": 0}, "together": [["t1", "t2"]], '
        '"apart": [["t4", "t5"]], "no_split": ["t6"], "sharding": {"t7": "row_wise"}}, every '
        "key optional; the flags add to it",
    )


def constraints_from(args: argparse.Namespace):
    """The constraints the flags and `--constraints FILE` ask for (None: none)."""
    from dreamshard.placement.constraints import (
        WHOLE,
        Constraints,
        parse_group,
        parse_pin,
        parse_sharding,
        read_constraints,
    )

    found = read_constraints(args.constraints) if args.constraints else Constraints()
    sharding = [parse_sharding(text) for text in args.sharding]
    flags = Constraints(
        tuple(parse_pin(text) for text in args.pin),
        tuple(parse_group(text, "--together") for text in args.together),
        tuple(parse_group(text, "--apart") for text in args.apart),
        tuple(n.strip() for text in args.no_split for n in text.split(",") if n.strip())
        + tuple(name for name, kind, _ in sharding if kind == WHOLE),
        tuple(s for s in sharding if s[1] != WHOLE),
    )
    found = found.merged(flags)
    return found if found else None
