"""The documentation's usage lines, generated from the argparse parsers so they cannot drift.

A block between two markers, in the README or a page of ``docs/``, names the commands it shows::

    <!-- labsrc-usage: report gate search -->
    ```text
    ... generated ...
    ```
    <!-- /labsrc-usage -->

After changing an option, regenerate every block in place and commit the result::

    python -m labsrc.cli.usage          # README.md and every docs/*.md that holds a block

``--check`` exits 1 (printing the files whose lines differ) instead of writing;
``tests/test_cli_usage.py`` runs that check, so CI fails when the documentation drifts.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from labsrc.cli.main import build_parser

__all__ = ["command_usage", "documentation_files", "main", "render_blocks", "usage_table"]

#: Usage lines wrap here, continuation lines indented under the command (argparse's own layout).
WIDTH = 110

_BLOCK = re.compile(r"(<!-- labsrc-usage: (?P<names>[^>]*?) -->\n)```text\n.*?```\n(<!-- /labsrc-usage -->)", re.S)


def _wide(prog: str) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(prog, width=WIDTH, max_help_position=40)


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[str, argparse.ArgumentParser]:
    """Every runnable command's parser by its name (``data fetch`` for a nested one)."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(_leaves(sub, (*path, name)))
    if not found and path:
        found[" ".join(path)] = parser
    return found


def command_usage(parser: argparse.ArgumentParser) -> str:
    """One command's usage as argparse prints it, without ``usage:`` and ``[-h]``, wrapped at :data:`WIDTH`."""
    parser.formatter_class = _wide
    text = parser.format_usage().strip()
    text = text.removeprefix("usage: ").replace(" [-h]", "")
    return "\n".join(line[len("usage: ") :] if line.startswith(" ") else line for line in text.splitlines())


def usage_table(parser: argparse.ArgumentParser | None = None) -> dict[str, str]:
    """``{"report": "labsrc report [--out DIR] ...", ..., "--version": "labsrc --version"}``."""
    parser = build_parser() if parser is None else parser
    table = {name: command_usage(sub) for name, sub in _leaves(parser).items()}
    table["--version"] = f"{parser.prog} --version"
    return table


def render_blocks(text: str, table: dict[str, str] | None = None) -> str:
    """``text`` with every usage block regenerated; an unknown command name is an error naming the valid ones."""
    table = usage_table() if table is None else table

    def block(match: re.Match[str]) -> str:
        names = match.group("names").split()
        unknown = [n.replace("_", " ") for n in names if n.replace("_", " ") not in table]
        if unknown:
            raise SystemExit(f"unknown command(s) {unknown} in a usage block; known: {sorted(table)}")
        body = "\n".join(table[n.replace("_", " ")] for n in names)
        return f"{match.group(1)}```text\n{body}\n```\n{match.group(3)}"

    return _BLOCK.sub(block, text)


def documentation_files(root: Path = Path(".")) -> list[Path]:
    """``README.md`` and every ``docs/*.md`` under ``root`` that holds a usage block."""
    candidates = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    return [p for p in candidates if p.is_file() and _BLOCK.search(p.read_text(encoding="utf-8"))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labsrc.cli.usage", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "files", nargs="*", help="the files to update (default: README.md and every docs/*.md holding a block)"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is out of date; write nothing")
    args = parser.parse_args(argv)
    paths = [Path(f) for f in args.files] or documentation_files()
    if not paths:
        print("no README.md or docs/*.md here holds a <!-- labsrc-usage: ... --> block", file=sys.stderr)
        return 1
    status = 0
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if not _BLOCK.search(text):
            print(f"{path}: no <!-- labsrc-usage: ... --> block", file=sys.stderr)
            status = 1
            continue
        fresh = render_blocks(text)
        if fresh == text:
            continue
        if args.check:
            print(f"{path}: usage lines are out of date; run: python -m labsrc.cli.usage", file=sys.stderr)
            status = 1
            continue
        path.write_text(fresh, encoding="utf-8")
        print(f"updated the usage lines in {path}")
    return status


if __name__ == "__main__":
    sys.exit(main())
