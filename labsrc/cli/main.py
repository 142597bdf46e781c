"""The ``labsrc`` command line.

Each subcommand lives in its own ``labsrc/cli/<name>.py`` module exposing
``register(subparsers)``, which adds its parser and sets ``func`` (a function
``(args) -> exit code``). This module only dispatches. Exit codes: 0 success,
1 a gate failed, 2 bad input (a :class:`~labsrc.errors.LabError`, or a file
that cannot be read or written), 130 interrupted (Ctrl-C), 141 the reader of
stdout went away (``labsrc report | head``). Each of the last three prints one
line to stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

from labsrc.cli import audit as cli_audit
from labsrc.cli import beir as cli_beir
from labsrc.cli import clean as cli_clean
from labsrc.cli import data as cli_data
from labsrc.cli import embed as cli_embed
from labsrc.cli import gate as cli_gate
from labsrc.cli import report as cli_report
from labsrc.cli import rubric as cli_rubric
from labsrc.cli import search as cli_search
from labsrc.cli.engines import close_engines
from labsrc.cli.outputs import one_line
from labsrc.errors import LabError
from labsrc.version import __version__

__all__ = ["build_parser", "main"]

#: Subcommand modules, in the order ``--help`` lists them.
COMMANDS = (cli_report, cli_gate, cli_audit, cli_search, cli_beir, cli_data, cli_embed, cli_rubric, cli_clean)


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line (exit 2), like every other error: the full usage is one --help away."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="labsrc",
        description="Permission-safe hybrid retrieval lab: evidence boundary, BM25 + dense lanes, RRF, release gates.",
    )
    parser.add_argument("--version", action="version", version=f"labsrc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.register(sub)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI job cancelled, ``kill``), raised where the command is so its cleanup runs."""


def _terminated(signum: int, frame: object) -> NoReturn:
    raise Terminated


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    for arg in argv:  # what no shell can pass, but a caller of main() can
        problem = "a NUL character" if "\0" in arg else None
        try:
            os.fsencode(arg)
        except UnicodeEncodeError:
            problem = "a lone surrogate, which no command line can carry"
        if problem:
            print(f"labsrc: error: argument {one_line(repr(arg[:60]))} holds {problem}", file=sys.stderr)
            return 2
    args = build_parser().parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so worker processes, servers and temporary folders are cleaned up;
    # only the main thread may set a handler (a caller of main() in a thread keeps its own).
    previous = signal.signal(signal.SIGTERM, _terminated) if threading.current_thread() is threading.main_thread() else None
    try:
        status = args.func(args)
        sys.stdout.flush()  # here, not at exit: a closed pipe is then caught below, every time
        return status
    except LabError as exc:
        print(f"labsrc: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (``labsrc report | head``): stop quietly, as Unix tools do.
        # Point stdout at devnull so the interpreter's final flush cannot raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by a closed pipe
    except UnicodeError as exc:
        # A file name or text that is not valid UTF-8 (say, from a shell with another locale) met a UTF-8 file.
        print(f"labsrc: error: {one_line(str(exc))}: a file name or text that is not valid UTF-8", file=sys.stderr)
        return 2
    except OSError as exc:
        # A file the user named cannot be read or written (full disk, permissions): their input, one line.
        where = f": {exc.filename}" if exc.filename else ""
        print(f"labsrc: error: {one_line(f'{exc.strerror or exc}{where}')}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        # One line; on a terminal it starts a fresh one, since a progress bar may be mid-line.
        what = "terminated" if isinstance(exc, Terminated) else "interrupted"
        print(f"{chr(10) if sys.stderr.isatty() else ''}labsrc: {what}", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130  # 128 + SIGTERM / SIGINT, as a shell reports them
    finally:
        close_engines()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
