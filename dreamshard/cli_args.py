"""Argument types and option groups shared by the command-line modules."""

from __future__ import annotations

import argparse


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


def table_source_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--table-ids", help="data-set files only: table ids to load, e.g. 0-99,200")
    parser.add_argument("--dim", type=int, default=16,
                        help="data-set files only: embedding dim for every table "
                        "(default 16; 0 draws from 4..128)")  # fmt: skip
