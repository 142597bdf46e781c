"""``labsrc init DIR``: write a starter folder (a corpus, a retriever of a team's own, its release gate) for a repository.

Example::

    labsrc init my-gate && cd my-gate
    labsrc gate --chunks data/chunks.jsonl --callers data/callers.json --cases data/cases.jsonl \\
                --retriever my_retriever:build --config data/gate.json
    pytest

The folder (:mod:`labsrc.testing.starter`) holds a small corpus, callers, cases of
every kind, a gate config, a retriever of the team's own and the gate in pytest
form; every gate passes on it. Exit status: 0 written, 2 ``DIR`` exists and is
not an empty folder (nothing is written), or it cannot be written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from labsrc.lanes import shell_path
from labsrc.testing.starter import STARTER_GATE_COMMAND, write_starter

__all__ = ["register", "run"]


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
    print(f"  {STARTER_GATE_COMMAND}")
    print("  pytest")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "init",
        help="write a starter folder: a corpus, a retriever of your own and its release gate (CLI and pytest)",
        description=(
            "Write DIR, a starter folder to copy into your repository: data/ (chunks, callers, cases of every kind, "
            "a gate config), my_retriever.py (a retriever that filters first, then ranks), tests/test_release_gate.py "
            "(the gate as pytest items), pyproject.toml and a README. Every gate passes on it; replace the corpus and "
            "the retriever with your own. DIR must not exist or be empty; it appears whole or not at all. "
            "Exit status: 0 written, 2 DIR exists and is not empty, or cannot be written."
        ),
    )
    parser.add_argument("folder", metavar="DIR", help="the folder to create (missing parents are made)")
    parser.set_defaults(func=run)
