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
import importlib
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import NoReturn

from labsrc.cli.outputs import keeping_paths, one_line
from labsrc.errors import LabError
from labsrc.version import __version__

__all__ = ["build_parser", "main"]

#: Each command and the module that registers it, in the order ``--help`` lists them. A call
#: imports only its own command's module (``labsrc --version`` imports none), so no command
#: pays for another's dependencies: ``labsrc rubric`` loads no PostgreSQL driver, none loads
#: matplotlib until it draws.
COMMANDS = {
    "init": "labsrc.cli.init",
    "chunk": "labsrc.cli.chunk",
    "report": "labsrc.cli.report",
    "gate": "labsrc.cli.gate",
    "audit": "labsrc.cli.audit",
    "search": "labsrc.cli.search",
    "beir": "labsrc.cli.beir",
    "data": "labsrc.cli.data",
    "embed": "labsrc.cli.embed",
    "rubric": "labsrc.cli.rubric",
    "engines": "labsrc.cli.clean",
}


def _command_of(argv: Sequence[str]) -> str | None:
    """The command a call names, or None when it names none (``--version``, ``--help``)."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg
    return None


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line (exit 2), like every other error: the full usage is one --help away."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def build_parser(command: str | None = None, *, version_only: bool = False) -> argparse.ArgumentParser:
    """The whole parser; with ``command``, one that knows only that command (any other name: all of them)."""
    parser = _Parser(
        prog="labsrc",
        description="Permission-safe hybrid retrieval lab: evidence boundary, BM25 + dense lanes, RRF, release gates.",
    )
    parser.add_argument("--version", action="version", version=f"labsrc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if version_only:
        return parser
    for name, module in COMMANDS.items():
        if command not in COMMANDS or name == command:
            importlib.import_module(module).register(sub)
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
    command = _command_of(argv)
    parser = build_parser(command, version_only=command is None and "--version" in argv)
    args = parser.parse_args(argv)
    empty = _empty_path(parser, args)
    if empty is not None:  # '' would read as "not given" (no report written, silently) or as the current folder
        print(f"labsrc: error: {empty}", file=sys.stderr)
        return 2
    # SIGTERM unwinds like Ctrl-C, so worker processes, servers and temporary folders are cleaned up;
    # only the main thread may set a handler (a caller of main() in a thread keeps its own).
    previous = signal.signal(signal.SIGTERM, _terminated) if threading.current_thread() is threading.main_thread() else None
    try:
        try:
            status = _run(args)
        except BaseException:  # an error no handler expected: still stop the engines, then let it show
            _close_engines()
            raise
        # Engines stop here, after the command: a Ctrl-C meanwhile must not leave a server running, nor print
        # a traceback from inside the shutdown. The shutdown finishes, and the run ends as interrupted.
        stopped_by = _close_engines()
        return _interrupted(stopped_by) if stopped_by is not None and status not in (130, 143) else status
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


#: How the lab's own warnings begin (labsrc.records.pinned.UNCHECKED_PREFIX; a test holds them equal),
#: written out so that `labsrc --version` imports none of the lab's data code.
LAB_WARNING_STARTS = "no checksums.json in "


def _lab_warning_line(show: Callable[..., None]) -> Callable[..., None]:
    """``warnings.showwarning`` that prints a warning of the lab's own (``UncheckedFolderWarning``) as one
    ``labsrc: warning:`` line, not file:line and the source line; another library's goes to ``show``."""

    def showwarning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        if not category.__module__.startswith("labsrc."):
            show(message, category, filename, lineno, file, line)
            return
        print(f"labsrc: warning: {one_line(str(message))}", file=file or sys.stderr)

    return showwarning


#: The metavars of options and arguments that name a path on disk; an empty value there is refused.
_PATH_METAVARS = frozenset({"FILE", "DIR", "PNG", "FILE_OR_DIR", "OUT", "CSV", "DOCS_DIR", "SUBMISSION_DIR"})


def _empty_path(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """``"--junit-xml '': an empty path; give a file path"`` for the first path given as ``''``, else None."""
    for group in parser._actions:  # argparse keeps a command's actions on its subparser
        if not isinstance(group, argparse._SubParsersAction):
            continue
        command = group.choices.get(getattr(args, "command", None))
        for action in command._actions if command is not None else ():
            if action.metavar in _PATH_METAVARS and getattr(args, action.dest, None) == "":
                name = action.option_strings[-1] if action.option_strings else action.metavar
                kind = {"FILE_OR_DIR": "file or folder"}.get(action.metavar, "folder" if "DIR" in action.metavar else "file")
                return f"{name} '': an empty path; give a {kind} path"
    return None


def _run(args: argparse.Namespace) -> int:
    """The command, with every way it can end turned into an exit status and at most one line on stderr."""
    try:
        # A command stopped before it wrote leaves no output folder it made (labsrc.cli.outputs).
        with keeping_paths(), warnings.catch_warnings():
            warnings.showwarning = _lab_warning_line(warnings.showwarning)
            # Shown even where a library imported on the way ignores UserWarning (their class).
            warnings.filterwarnings("default", message=LAB_WARNING_STARTS)
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
        return _interrupted(exc)


def _interrupted(exc: KeyboardInterrupt) -> int:
    # One line; on a terminal it starts a fresh one, since a progress bar may be mid-line.
    what = "terminated" if isinstance(exc, Terminated) else "interrupted"
    print(f"{chr(10) if sys.stderr.isatty() else ''}labsrc: {what}", file=sys.stderr)
    return 143 if isinstance(exc, Terminated) else 130  # 128 + SIGTERM / SIGINT, as a shell reports them


def _close_engines() -> KeyboardInterrupt | None:
    """Close every engine a command opened (stops embedded servers), to the end; the first Ctrl-C or SIGTERM
    that arrived meanwhile, or None. A signal starts the closing over (it is idempotent: what is closed stays
    closed), so the servers still stop."""
    engines = sys.modules.get("labsrc.cli.engines")  # loaded only if a command opened one
    if engines is None:
        return None
    arrived: KeyboardInterrupt | None = None
    for _ in range(10):  # bounded: after ten signals in a row, each embedded server's reaper stops it
        try:
            engines.close_engines()
            return arrived
        except KeyboardInterrupt as exc:
            arrived = arrived or exc
    return arrived
