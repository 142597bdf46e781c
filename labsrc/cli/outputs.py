"""Output paths checked *before* a run, so a bad ``--out`` never costs a whole gate run or a traceback,
and messages that quote what the user gave printed on one line (:func:`one_line`).

``labsrc gate --out DIR`` and ``--junit-xml FILE`` are CI options: a typo there
must be exit 2 with the path and the reason, not a Python traceback after the
run (which CI would read as exit 1, "a gate failed").

A path that is a FIFO, a device or a socket is refused too, and so is one inside
the report folder: opening a FIFO for writing blocks until someone reads it, so a
run would end with its verdict computed and then hang on the write (CI kills the
job and reports nothing). The checks only ``stat`` the paths: they never open one.

The checks make the folders they need up front (to prove them writable). A command that then ends without
writing (Ctrl-C, SIGTERM, an error) must leave the paths as it found them, so inside :func:`keeping_paths`
(``labsrc`` runs every command in one) each folder a check made is noted, and removed again, deepest first
and only while it is still empty, when the command ends by an exception: an ``--out`` folder that was absent
is absent again, parents included, and one that existed is not touched.
"""

from __future__ import annotations

import os
import shlex
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from labsrc.errors import InvalidArgument

__all__ = ["check_out_dir", "check_out_file", "keeping_paths", "one_line", "refuse_course_link"]

#: The folders the checks made for the command running now (deepest first), or None outside :func:`keeping_paths`.
_MADE: ContextVar[list[Path] | None] = ContextVar("labsrc_made_folders", default=None)


@contextmanager
def keeping_paths() -> Iterator[list[Path]]:
    """A command's scope: the folders its output checks make are noted, and removed if it ends by an exception.

    Each is removed only while empty (``os.rmdir``), deepest first: what the command wrote before it was
    stopped stays, and a folder that existed before it is never touched. Yields the list of folders made.
    """
    made: list[Path] = []
    token = _MADE.set(made)
    try:
        yield made
    except BaseException:  # KeyboardInterrupt (Ctrl-C, and SIGTERM in ``labsrc``), an error: undo, then go on
        for folder in sorted(set(made), key=lambda p: len(p.parts), reverse=True):
            try:
                folder.rmdir()
            except OSError:  # not empty (the command wrote there), already gone: leave it
                pass
        raise
    finally:
        _MADE.reset(token)


def _make_folders(folder: Path) -> None:
    """``mkdir -p folder``, noting for :func:`keeping_paths` each folder it made."""
    missing = []
    probe = folder
    while not os.path.lexists(probe) and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    made = _MADE.get()
    if made is not None:
        made.extend(missing)  # before mkdir: one that fails half-way has made some of them
    folder.mkdir(parents=True, exist_ok=True)


def _special_kind(path: Path) -> str | None:
    """What ``path`` is when writing to it could block or go nowhere (a FIFO, a device, a socket), else None.

    ``os.stat`` follows a symlink: a link to a FIFO is a FIFO for whoever opens it.
    """
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # missing, a dangling link, a NUL in the name: nothing there to block on
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return None


def _first_existing(path: Path) -> Path:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def _probe_write(folder: Path, option: str, target: Path) -> None:
    try:
        _make_folders(folder)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".labsrc-write-check-"):
            pass
    except OSError as exc:
        raise InvalidArgument(
            f"{option} {target}: cannot write in {folder} ({exc.strerror}); choose a folder you can write to"
        ) from None


def _special_entries(folder: Path, files: Iterable[str] | None) -> list[tuple[Path, str]]:
    """Entries of ``folder`` a writer would block on: the named ``files``, or every entry when None."""
    if files is None:
        try:
            names = sorted(entry.name for entry in os.scandir(folder))
        except OSError:
            return []
    else:
        names = list(files)
    found = []
    for name in names:
        kind = _special_kind(folder / name)
        if kind is None and files is not None and (folder / name).is_dir():
            kind = "a folder"
        if kind is not None:
            found.append((folder / name, kind))
    return found


def check_out_dir(path: str | Path, option: str = "--out", files: Iterable[str] | None = None) -> Path:
    """Create the report folder ``path`` now (or fail with exit-2 advice); it must be a folder we can write in.

    When the folder exists, what will be written in it is checked too: ``files``
    (the names the command writes) must not be a FIFO, a device, a socket or a
    folder. Without ``files`` every entry in the folder is checked for being a
    FIFO, a device or a socket, since the caller did not say which it overwrites.
    """
    path = Path(path)
    refuse_course_link(path, option)
    kind = _special_kind(path)
    if kind is not None:
        raise InvalidArgument(f"{option} {path}: this is {kind}, not a folder; give a folder path")
    if path.exists() and not path.is_dir():
        raise InvalidArgument(f"{option} {path}: this is an existing file, not a folder; give a folder path")
    base = _first_existing(path)
    if not base.is_dir():
        raise InvalidArgument(
            f"{option} {path}: {base} is a file, so no folder can be made under it; give a folder path"
        )
    if path.is_dir():
        special = _special_entries(path, files)
        if special:
            where, what = special[0]
            raise InvalidArgument(
                f"{option} {path}: {where} is {what}, where a report file would be written; "
                "remove it or give another folder"
            )
    _probe_write(path, option, path)
    return path


def refuse_course_link(path: str | Path, option: str) -> None:
    """Refuse an output path that leads through a symbolic link into the course's files, or into the package.

    A submission folder whose ``vectors`` is a link to ``fixtures/policies/vectors``
    would have ``labsrc embed --out`` overwrite the course's own vectors
    (:mod:`labsrc.datasets.course_links`). The link is named, with the command that removes it.
    """
    from labsrc.datasets.course_links import course_link  # here: `labsrc --version` imports no dataset code

    found = course_link(path)
    if found is None:
        return
    if found.link is None:
        raise InvalidArgument(f"{option} {path}: {found.describe()}; give a folder of your own")
    raise InvalidArgument(
        f"{option} {path}: {found.describe()}; writing through it would change the course: "
        f"remove the link (rm {shlex.quote(str(found.link))}) and run again, so your files get a folder of their own"
    )


def check_out_file(path: str | Path, option: str) -> Path:
    """Check that file ``path`` can be written (its folder is created now).

    An existing folder, FIFO, device or socket is refused: the writer would fail
    after the run, block on the FIFO until something reads it, or write nowhere.
    """
    path = Path(path)
    refuse_course_link(path, option)
    kind = _special_kind(path)
    if kind is not None:
        raise InvalidArgument(
            f"{option} {path}: this is {kind}, not a regular file; writing there could block or go nowhere; "
            "give a file path"
        )
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
