"""A folder's ``checksums.json``: the SHA-256 of each file the lab wrote into it, checked before the folder is read.

A bit flip on disk, an interrupted copy, or two ids swapped by hand can leave a
folder that passes every check of its content (finite unit vectors, unique
ids, matching row counts) and still ranks with the wrong vectors. So the writer
records each file's digest as it writes the folder, and the reader recomputes
them from the very bytes it parses (:mod:`labsrc.records.pinned`), refusing a
mismatch by file name. A folder without ``checksums.json`` (written before the
lab recorded digests, or by hand) loads unchecked, with a warning that says how
to save it again, so folders made earlier keep loading.

The digests catch damage and mistakes, not an attacker: whoever can rewrite a
file can rewrite ``checksums.json`` too.

The format is one JSON object, ``{"sha256": {file name: 64 lowercase hex digits}}``,
covering every file of the folder but itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from labsrc.errors import InvalidRecord
from labsrc.records.files import file_sha256
from labsrc.records.loading import load_json

__all__ = [
    "CHECKSUMS_FILE",
    "checksum_table",
    "checksums_json",
    "digest_mismatch",
    "is_file_name",
    "listed_but_missing",
    "verify_checksums",
]

CHECKSUMS_FILE = "checksums.json"

_SHA256 = re.compile(r"[0-9a-f]{64}")


def is_file_name(name: object) -> bool:
    """A plain name of a file inside the folder: no separator, not ``.`` or ``..``, no NUL."""
    return isinstance(name, str) and name not in ("", ".", "..") and not any(c in name for c in "/\\\0")


def checksums_json(folder: str | Path, names: Iterable[str]) -> bytes:
    """The ``checksums.json`` bytes for the files ``names`` in ``folder``, as they are on disk now."""
    folder = Path(folder)
    digests = {name: file_sha256(folder / name) for name in sorted(names)}
    return (json.dumps({"sha256": digests}, indent=2) + "\n").encode("utf-8")


#: What a mismatch tells the reader to do, unless the caller says how its folder is written again.
_REMEDY = "restore the folder or write it again (labsrc embed)"


def checksum_table(recorded: Any, *, path: Path, required: Collection[str]) -> dict[str, str]:
    """The ``{file name: digest}`` table of a parsed ``checksums.json`` (at ``path``), checked.

    ``required``: files the table must cover, so that dropping a line cannot
    exempt a file. Every problem is an :class:`~labsrc.errors.InvalidRecord`
    naming ``path`` and the field ``sha256``.
    """
    table = recorded.get("sha256") if isinstance(recorded, dict) else None
    if not isinstance(table, dict):
        raise InvalidRecord('expected {"sha256": {file name: hex digest}}', path=path, field="sha256")
    for name, digest in table.items():
        if not is_file_name(name) or name == CHECKSUMS_FILE:
            raise InvalidRecord(f"{name!r} is not the name of a file in the folder", path=path, field="sha256")
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise InvalidRecord(f"{name!r}: {digest!r} is not a SHA-256 (64 lowercase hex digits)", path=path,
                                field="sha256")  # fmt: skip
    missing = sorted(set(required) - set(table))
    if missing:
        raise InvalidRecord(f"records no digest for {', '.join(missing)}; every file the lab writes must be covered",
                            path=path, field="sha256")  # fmt: skip
    return dict(table)


def listed_but_missing(file: Path) -> InvalidRecord:
    """The error for a file ``checksums.json`` lists that is not in the folder."""
    return InvalidRecord(f"missing, but {CHECKSUMS_FILE} lists it", path=file, field="sha256")


def digest_mismatch(file: Path, actual: str, recorded: str, remedy: str | None = None) -> InvalidRecord:
    """The error for a file whose SHA-256 ``actual`` is not the ``recorded`` one; ``remedy`` ends the message."""
    return InvalidRecord(
        f"its SHA-256 is {actual[:16]}..., not the {recorded[:16]}... recorded in {CHECKSUMS_FILE}: the "
        f"file (or {CHECKSUMS_FILE}) changed after the lab wrote it (a bit flip, an edit, two ids swapped); "
        f"{remedy or _REMEDY}",
        path=file,
        field="sha256",
    )


def verify_checksums(folder: str | Path, required: Collection[str], *, remedy: str = _REMEDY) -> bool:
    """Check every file ``checksums.json`` lists against its SHA-256; False if the folder has no ``checksums.json``.

    ``required``: files the list must cover, so that dropping a line cannot
    exempt a file (:func:`checksum_table`). ``remedy``: the end of a mismatch's
    message, how to write the folder again (a vectors folder's by default). Every
    problem is an :class:`~labsrc.errors.InvalidRecord` naming the file and the
    field ``sha256``. This checks files by path, as they are now, and says
    nothing; a load reads a folder with :func:`~labsrc.records.pinned.read_pinned`
    instead, which checks the very bytes it parses and warns when there is no
    ``checksums.json``.
    """
    folder = Path(folder)
    path = folder / CHECKSUMS_FILE
    if not path.exists() and not path.is_symlink():
        return False
    table = checksum_table(load_json(path), path=path, required=required)
    for name in sorted(table):
        file = folder / name
        if not file.exists() and not file.is_symlink():
            raise listed_but_missing(file)
        actual = file_sha256(file)
        if actual != table[name]:
            raise digest_mismatch(file, actual, table[name], remedy)
    return True
