"""``labsrc init DIR``: write a starter folder (a corpus, a retriever of a team's own, its release gate) for a repository.

Example::

    labsrc init my-gate && cd my-gate
    labsrc gate --chunks data/chunks.jsonl --callers data/callers.json --cases data/cases.jsonl \\
                --retriever my_retriever:build --config data/gate.json
    python -m pytest

The folder (:mod:`labsrc.testing.starter`) holds a small corpus, callers, cases of
every kind, a gate config, a retriever of the team's own, the gate in pytest
form and the lab's pages on them; every gate passes on it. Exit status: 0
written, 2 ``DIR`` exists and is not an empty folder (nothing is written), or it
cannot be written.

The commands it prints next run as printed, in this shell: ``labsrc`` and
``python`` when those on ``PATH`` are this environment's (an activated venv),
and this interpreter's full path otherwise, never a ``pytest`` that may belong
to another Python (issue 59: a system pytest cannot import ``labsrc``). When
pytest is not installed here, the line before it installs the ``testing`` extra.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import sysconfig
from importlib.util import find_spec
from pathlib import Path

from labsrc.lanes import shell_path
from labsrc.testing.starter import STARTER_GATE_COMMAND, write_starter

__all__ = ["DISTRIBUTION", "next_commands", "register", "run"]

#: The distribution ``pip`` installs the lab as (``[project] name`` in pyproject.toml).
DISTRIBUTION = "hybrid-retrieval-lab"


def _real(path: str) -> str:
    return os.path.normcase(os.path.realpath(path))


def _ours(name: str) -> bool:
    """Whether ``name``, typed in a shell here, runs this environment's own copy: the one in this interpreter's
    folder or its scripts folder (a venv's ``bin/``), not another Python's found earlier on ``PATH``."""
    found = shutil.which(name)
    if found is None or not sys.executable:
        return False
    # A venv's python is a link to the system's, so the file it resolves to is the same: its folder tells them apart.
    homes = {_real(os.path.dirname(sys.executable)), _real(sysconfig.get_path("scripts"))}
    if _real(os.path.dirname(found)) not in homes:
        return False
    return name != "python" or _real(found) == _real(sys.executable)  # a python beside it may be another version


def next_commands() -> list[str]:
    """What to run in the starter folder, in order, each as printed: the gate, then pytest (installed first if missing)."""
    python = "python" if _ours("python") else shlex.quote(sys.executable or "python")
    labsrc = "labsrc" if _ours("labsrc") else f"{python} -m labsrc.cli"
    commands = [f"{labsrc} {STARTER_GATE_COMMAND.removeprefix('labsrc ')}"]
    if find_spec("pytest") is None:
        extra = shlex.quote(f"{DISTRIBUTION}[testing]")
        commands.append(f"{python} -m pip install {extra}  # pytest is not installed for this Python; the extra brings it")
    commands.append(f"{python} -m pytest")
    return commands


def run(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    written = write_starter(folder)
    shown = shell_path(folder)  # as typed in a shell from here: relative when under it, quoted when needed
    print(f"wrote {len(written)} files into {shown}:")
    for path in written:
        print(f"  {path.relative_to(folder).as_posix()}")
    print("next:")
    if shown != ".":
        print(f"  cd {shown}")
    for command in next_commands():
        print(f"  {command}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "init",
        help="write a starter folder: a corpus, a retriever of your own and its release gate (CLI and pytest)",
        description=(
            "Write DIR, a starter folder to copy into your repository: data/ (chunks, callers, cases of every kind, "
            "a gate config), my_retriever.py (a retriever that filters first, then ranks), tests/test_release_gate.py "
            "(the gate as pytest items), docs/ (the lab's pages on the gate), pyproject.toml and a README. Every gate "
            "passes on it; replace the corpus and the retriever with your own. DIR must not exist or be empty; it appears "
            "whole or not at all. Then it prints the commands to run, as this shell runs them (python -m pytest; the "
            "line that installs pytest first when it is missing). "
            "Exit status: 0 written, 2 DIR exists and is not empty, or cannot be written."
        ),
    )
    parser.add_argument("folder", metavar="DIR", help="the folder to create (missing parents are made)")
    parser.set_defaults(func=run)
