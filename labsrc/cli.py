"""The ``labsrc`` command line.

Each subcommand lives in its own ``labsrc/cli_<name>.py`` module exposing
``register(subparsers)``, which adds its parser and sets ``func`` (a function
``(args) -> exit code``). This module only dispatches. Exit codes: 0 success,
1 a gate failed, 2 bad input (a :class:`~labsrc.errors.LabError`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import cli_beir, cli_embed, cli_gate, cli_report, cli_rubric, cli_search
from .errors import LabError

__all__ = ["build_parser", "main"]

#: Subcommand modules, in the order ``--help`` lists them.
COMMANDS = (cli_report, cli_gate, cli_search, cli_beir, cli_embed, cli_rubric)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="labsrc",
        description="Permission-safe hybrid retrieval lab: evidence boundary, BM25 + dense lanes, RRF, release gates.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except LabError as exc:
        print(f"labsrc: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
