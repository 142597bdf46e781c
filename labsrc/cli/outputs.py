"""Output paths checked *before* a run, so a bad ``--out`` never costs a whole gate run or a traceback,
and messages that quote what the user gave printed on one line (:func:`one_line`).

``labsrc gate --out DIR`` and ``--junit-xml FILE`` are CI options: a typo there
must be exit 2 with the path and the reason, not a Python traceback after the
run (which CI would read as exit 1, "a gate failed").
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from labsrc.errors import InvalidArgument

__all__ = ["check_out_dir", "check_out_file", "one_line"]


def _first_existing(path: Path) -> Path:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def _probe_write(folder: Path, option: str, target: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".labsrc-write-check-"):
            pass
    except OSError as exc:
        raise InvalidArgument(
            f"{option} {target}: cannot write in {folder} ({exc.strerror}); choose a folder you can write to"
        ) from None


def check_out_dir(path: str | Path, option: str = "--out") -> Path:
    """Create the report folder ``path`` now (or fail with exit-2 advice); it must be a folder we can write in."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InvalidArgument(f"{option} {path}: this is an existing file, not a folder; give a folder path")
    base = _first_existing(path)
    if not base.is_dir():
        raise InvalidArgument(
            f"{option} {path}: {base} is a file, so no folder can be made under it; give a folder path"
        )
    _probe_write(path, option, path)
    return path


def check_out_file(path: str | Path, option: str) -> Path:
    """Check that file ``path`` can be written (its folder is created now); an existing folder is refused."""
    path = Path(path)
    if path.is_dir():
        raise InvalidArgument(f"{option} {path}: this is a folder; give a file path such as {path / 'gates.xml'}")
    base = _first_existing(path.parent)
    if not base.is_dir():
        raise InvalidArgument(f"{option} {path}: {base} is a file, so no file can be made under it; give another path")
    _probe_write(path.parent, option, path)
    return path


def one_line(message: str) -> str:
    """``message`` with control characters escaped (``\\r``, ``\\n``), so a quoted value cannot break the line.

    Error messages quote what the user gave, and a path or query may hold a line
    break. A newline followed by an indent is kept: that is a message listing
    details on purpose (several bad cases, one per indented line).
    """
    return "".join(
        ch if ch.isprintable() or ch == " " or (ch == "\n" and message.startswith("  ", i + 1))
        else ch.encode("unicode_escape").decode("ascii")
        for i, ch in enumerate(message)
    )
