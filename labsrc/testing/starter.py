"""The starter folder ``labsrc init DIR`` writes: a corpus, a retriever of a team's own and its release gate.

The files live, as they are written, in ``labsrc/testing/starter/`` (the wheel
carries them as package data). One is stored under another name: the pytest
file is ``tests/test_release_gate.py.txt`` there, so that no pytest run over the
lab's own tree collects it. The pages under ``docs/`` are the lab's own
``docs/`` pages (git symbolic links there, which the wheel's build copies as
files), written with the links a starter cannot follow turned into their text:
the folder is all a wheel user has, so every link in it resolves inside it.
:func:`write_starter` builds the folder beside its destination and renames it
into place (git's lockfile-then-rename, applied to a folder), so an interrupted
run leaves the whole folder or nothing. Every run writes the same bytes.
"""

from __future__ import annotations

import os
import posixpath
import re
import secrets
import shutil
from pathlib import Path

from labsrc.errors import InvalidArgument
from labsrc.records.files import fsync_dir, write_durable

__all__ = ["STARTER_FILES", "STARTER_GATE_COMMAND", "starter_files", "starter_page", "write_starter"]

#: The folder the files are read from.
_SOURCE = Path(__file__).resolve().parent / "starter"

#: Every file of the starter folder, as written (POSIX paths relative to it), in the order printed.
STARTER_FILES = (
    "README.md",
    "pyproject.toml",
    "my_retriever.py",
    "data/chunks.jsonl",
    "data/callers.json",
    "data/cases.jsonl",
    "data/gate.json",
    "tests/test_release_gate.py",
    "docs/gating.md",
    "docs/gate-in-pytest.md",
    "docs/records.md",
    "docs/gates.md",
)

#: Files stored under another name in the package: a ``test_*.py`` there would be collected by a pytest run over it.
_STORED_AS = {"tests/test_release_gate.py": "tests/test_release_gate.py.txt"}

#: The gate as the starter's README runs it, from the starter folder.
STARTER_GATE_COMMAND = (
    "labsrc gate --chunks data/chunks.jsonl --callers data/callers.json --cases data/cases.jsonl "
    "--retriever my_retriever:build --config data/gate.json"
)


#: The lab's pages the starter carries: what every gate checks, the gate in pytest, the record format, the CLI.
_PAGES = tuple(name for name in STARTER_FILES if name.startswith("docs/"))

#: ``[text](target)`` or ``![alt](target)``, as the lab's link check reads them (tests/test_docs_links.py).
_LINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]+)\)")
_FENCE = re.compile(r"(^```.*?^```)", re.S | re.M)

#: Said under each page's title: where the paths that lost their links are.
_PAGE_NOTE = (
    "> The lab's `{name}`, as `labsrc init` copied it. A path under `labsrc/` is a module of the installed package "
    "(`python -c \"import labsrc; print(labsrc.__path__[0])\"` prints its folder); `tests/` and `benchmarks/` are "
    "in the lab's repository."
)


def _link_kept(page: str, target: str) -> bool:
    """Whether a link on the lab's ``page`` means the same in the starter: a heading, a URL, or another page it carries
    (``../README.md`` is the lab's README, not the starter's)."""
    path = target.partition("#")[0]
    if not path or re.match(r"[a-z][a-z0-9+.-]*:", target):
        return True
    return posixpath.normpath(posixpath.join(posixpath.dirname(page), path)) in _PAGES


def starter_page(page: str, text: str) -> str:
    """The lab's page ``page`` (``docs/NAME.md``) as the starter holds it.

    A link to another page the starter carries, to a heading or to a URL stays; a
    link to anything else of the lab's (its source, ``../labsrc/gate/plan.py``, which
    a wheel user does not have beside the starter) becomes its text, which names the
    path; fenced code is left as it is. A note under the title says where those
    paths are.
    """

    def unlink(match: re.Match[str]) -> str:
        return match.group(0) if _link_kept(page, match.group(2)) else match.group(1)

    parts = _FENCE.split(text)  # the fences at odd indexes
    body = "".join(part if i % 2 else _LINK.sub(unlink, part) for i, part in enumerate(parts))
    title, _, rest = body.partition("\n")
    return f"{title}\n\n{_PAGE_NOTE.format(name=page)}\n{rest}"


def starter_files() -> dict[str, bytes]:
    """Each starter file's path, as written, to its bytes, in :data:`STARTER_FILES` order."""
    files = {name: (_SOURCE / _STORED_AS.get(name, name)).read_bytes() for name in STARTER_FILES}
    for page in _PAGES:
        files[page] = starter_page(page, files[page].decode("utf-8")).encode("utf-8")
    return files


def _refuse(folder: Path) -> None:
    """Raise when ``folder`` is there and is anything but an empty folder: init never overwrites."""
    if folder.is_symlink():
        raise InvalidArgument(f"{folder} is a symbolic link: labsrc init writes a new folder; name one that does not exist")
    if not folder.exists():
        return
    if not folder.is_dir():
        raise InvalidArgument(f"{folder} exists and is not a folder: labsrc init writes a new folder; name another")
    if any(folder.iterdir()):
        raise InvalidArgument(f"{folder} exists and is not empty: labsrc init never overwrites; name a new or empty folder")


def _stage(parent: Path, name: str, files: dict[str, bytes]) -> Path:
    """A hidden folder in ``parent`` holding ``files``, each flushed to disk."""
    # os.mkdir, not tempfile.mkdtemp: the folder gets the user's usual permissions (umask), not 0700.
    while True:
        staging = parent / f".{name[:64]}.{secrets.token_hex(4)}.tmp"  # a name any file system takes
        try:
            staging.mkdir()
            break
        except FileExistsError:
            continue
    for relative, data in files.items():
        target = staging / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        write_durable(target, lambda out, data=data: out.write(data))
    for sub in sorted({(staging / relative).parent for relative in files}, reverse=True):
        fsync_dir(sub)
    return staging


def write_starter(folder: str | Path) -> list[Path]:
    """Write the starter folder at ``folder`` (new, or an empty folder) and return the paths written.

    Raises :class:`~labsrc.errors.InvalidArgument` when ``folder`` exists and is
    not an empty folder. Missing parent folders are made. The files are written
    into a hidden sibling folder first: a new ``folder`` is that sibling renamed
    into place; an empty one (perhaps the current directory) keeps its own
    identity and gets the sibling's few top-level entries renamed into it. Either
    way no half-written starter is left: on any error what was moved and the
    sibling are removed.
    """
    folder = Path(folder)
    _refuse(folder)
    files = starter_files()
    target = Path(os.path.abspath(folder))  # "." and ".." resolved, so the sibling has a name and a parent
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = _stage(target.parent, target.name, files)
    moved: list[Path] = []
    try:
        _refuse(folder)  # again: something may have been put there while the files were written
        if not target.exists():
            os.rename(staging, target)  # fails, removing nothing, if a file or a filled folder appeared there
        else:
            for entry in sorted(staging.iterdir()):
                if os.path.lexists(target / entry.name):
                    raise InvalidArgument(f"{folder} filled up while labsrc init wrote it: {entry.name} appeared; nothing was kept")
                os.rename(entry, target / entry.name)
                moved.append(target / entry.name)
    except BaseException:
        for path in moved:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if moved:
        staging.rmdir()
    fsync_dir(target.parent)
    fsync_dir(target)
    return [folder / name for name in files]
