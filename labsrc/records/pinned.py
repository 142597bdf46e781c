"""One version of a folder, each file read once: a load that a concurrent save cannot mix.

A save replaces a whole folder: it writes a new one beside it and renames it
into place (:func:`~labsrc.records.files.commit_dir`), then removes the old one.
A load that opens the folder's files by path, one after another, can read some
from the old folder and some from the new; one that checks a file's digest by
path and then opens the path again to parse it can parse a file it never
checked. Issue 57 measured both: racing 300 saves of two indexes into one
folder, about 6 to 20 of every 100 loads equalled neither index, having passed
every check, and 3 to 15 more were refused as "a bit flip".

:class:`PinnedFolder` opens the folder once, as a directory descriptor, and each
file relative to it (``openat``), so every file comes from the one folder that
stood at the path when the load began, even if a save renames another into its
place meanwhile. Each file is read once: its bytes are digested and parsed (a
memory-mapped array's open descriptor is digested, then mapped), so the bytes
checked against ``checksums.json`` (read through the same descriptor) are the
bytes used. Where folders cannot be opened (Windows), files are opened by path;
each is still checked against the one ``checksums.json`` read first, so a mix
is refused, never loaded.

A save removes the folder it replaced, and a load still reading it then finds a
file gone. :func:`read_pinned` loads again from the folder now in place, up to
:data:`RACE_ATTEMPTS` times, then refuses with a message that names the race.

A folder without ``checksums.json`` loads unchecked, with an
:class:`UncheckedFolderWarning` that says how to save it again.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import sys
import warnings
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import numpy as np

from labsrc.errors import InvalidRecord
from labsrc.records.checksums import CHECKSUMS_FILE, checksum_table, digest_mismatch, listed_but_missing

# Private helpers of the modules that read files by path, reused so a pinned read refuses exactly what they
# refuse (a FIFO, a device, a pickled or truncated .npy, UTF-16 text) with the same words.
from labsrc.records.files import _NONBLOCK, _npy_header, _refuse_special
from labsrc.records.loading import _check_encoding, _decode_error, parse_json

__all__ = ["RACE_ATTEMPTS", "UNCHECKED_PREFIX", "PinnedFolder", "UncheckedFolderWarning", "read_pinned"]

#: How many times a load starts again when a concurrent save replaced the folder under it.
RACE_ATTEMPTS = 3

#: Where files can be opened relative to an open folder (Linux, macOS): then a load is pinned to one folder.
_PINNING = hasattr(os, "O_DIRECTORY") and {os.open, os.stat} <= os.supports_dir_fd
#: The lab's own source folder: frames in it are skipped when a warning names the caller's line.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

T = TypeVar("T")


#: How every :class:`UncheckedFolderWarning` begins (a literal prefix that ``-W``/``PYTHONWARNINGS`` can match).
UNCHECKED_PREFIX = f"no {CHECKSUMS_FILE} in "


class UncheckedFolderWarning(UserWarning):
    """A folder loaded without ``checksums.json``: no digest checked its files (a bit flip would go unseen).

    Its message starts with :data:`UNCHECKED_PREFIX`, so an environment can filter it without importing the
    lab (``PYTHONWARNINGS="ignore:no checksums.json in "``, as the notebooks' tests do for the shared data).
    """


class PinnedFolder:
    """The folder at ``path`` as it is now, held open; each file read once and checked against its digest.

    ``required``: the files ``checksums.json`` must list (see
    :func:`~labsrc.records.checksums.checksum_table`). ``remedy``: how to write
    the folder again, ending a digest mismatch's message. Use it as a context
    manager: it holds the folder and the files it maps open until closed.
    """

    def __init__(self, path: str | Path, *, required: Collection[str] = (), remedy: str | None = None) -> None:
        self.path = Path(path)
        self._required = tuple(required)
        self._remedy = remedy
        self._fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY) if _PINNING else None
        try:
            self._identity = _identity(os.fstat(self._fd) if self._fd is not None else os.stat(self.path))
        except BaseException:
            self.close()
            raise
        self._digests: dict[str, str] | None = None
        self._loaded = False
        self._read: set[str] = set()
        self._handles: list[BinaryIO] = []

    def __enter__(self) -> PinnedFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the folder and the files opened in it (a memory map made from one stays valid)."""
        for handle in self._handles:
            handle.close()
        self._handles.clear()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # --- the folder ---------------------------------------------------------------------

    def replaced(self) -> bool:
        """Whether the folder was removed, or the path now names another folder (a save swapped one in)."""
        try:
            if self._fd is not None and os.fstat(self._fd).st_nlink == 0:
                return True
            return _identity(os.stat(self.path)) != self._identity
        except OSError:
            return True

    @property
    def checked(self) -> bool:
        """Whether the folder has a ``checksums.json`` (then every file it lists is checked as it is read)."""
        return self._checksums() is not None

    def exists(self, name: str) -> bool:
        """Whether ``name`` is in the folder (a broken symlink counts: reading it says what is wrong)."""
        try:
            os.stat(self._where(name), dir_fd=self._fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def _where(self, name: str) -> str | Path:
        return name if self._fd is not None else self.path / name

    def _checksums(self) -> dict[str, str] | None:
        if not self._loaded:
            self._loaded = True  # set first: reading checksums.json below must not look itself up
            path = self.path / CHECKSUMS_FILE
            try:
                if self.exists(CHECKSUMS_FILE):
                    recorded = parse_json(self.read_text(CHECKSUMS_FILE), path=path)
                    self._digests = checksum_table(recorded, path=path, required=self._required)
            except BaseException:
                self._loaded = False  # a malformed checksums.json is refused again, never taken as none
                raise
        return self._digests

    # --- files --------------------------------------------------------------------------

    def _open(self, name: str, missing: str) -> BinaryIO:
        """``name`` opened for reading if it is a regular file (``open_regular``'s checks, relative to the folder)."""
        path, where = self.path / name, self._where(name)
        try:
            _refuse_special(path, os.stat(where, dir_fd=self._fd).st_mode)  # a device is never opened
            fd = os.open(where, os.O_RDONLY | _NONBLOCK | getattr(os, "O_BINARY", 0), dir_fd=self._fd)
        except FileNotFoundError:
            listed = self._checksums() is not None and name in (self._digests or {})
            raise listed_but_missing(path) if listed else InvalidRecord(missing, path=path) from None
        except OSError as exc:  # opened relative to the folder, the error would name the file alone
            raise InvalidRecord(f"cannot read: {exc.strerror or exc}", path=path) from None
        try:
            _refuse_special(path, os.fstat(fd).st_mode)  # what was opened, in case it changed since the stat
            if _NONBLOCK:
                os.set_blocking(fd, True)
            handle = os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise
        self._handles.append(handle)
        return handle

    def _check(self, name: str, digest: str) -> None:
        self._read.add(name)
        recorded = (self._checksums() or {}).get(name) if name != CHECKSUMS_FILE else None
        if recorded is not None and digest != recorded:
            raise digest_mismatch(self.path / name, digest, recorded, self._remedy)

    def read_bytes(self, name: str, *, missing: str = "missing file") -> bytes:
        """The bytes of ``name``, read once and checked against ``checksums.json``.

        ``missing``: the message when the file is absent and ``checksums.json``
        does not list it (when it does, the message says so, field ``sha256``).
        """
        data = self._open(name, missing).read()
        self._check(name, hashlib.sha256(data).hexdigest())
        return data

    def read_text(self, name: str, *, missing: str = "missing file") -> str:
        """``name`` as UTF-8 text, checked like :func:`~labsrc.records.loading.read_text` (UTF-16 named)."""
        path, data = self.path / name, self.read_bytes(name, missing=missing)
        _check_encoding(path, data[:64])
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise _decode_error(path, exc, data.count(b"\n", 0, exc.start) + 1) from exc

    def load_json(self, name: str, *, missing: str = "missing file") -> Any:
        """``name`` parsed as JSON (:func:`~labsrc.records.loading.parse_json`), from the bytes checked."""
        return parse_json(self.read_text(name, missing=missing), path=self.path / name)

    def load_npy(self, name: str, *, mmap: bool = False, missing: str = "missing file") -> np.ndarray:
        """A plain numeric ``.npy`` file, checked like :func:`~labsrc.records.files.load_npy`.

        Without ``mmap`` its bytes are read once, digested and parsed; with it,
        the open file is digested and then memory-mapped read-only, so the map
        is of the file checked. The header and the size are checked before the
        data is read whole (a file larger than its header says is never read
        into memory), but a digest that differs is reported first.
        """
        path, handle = self.path / name, self._open(name, missing)
        problem: InvalidRecord | None = None
        try:
            dtype, shape, offset = _npy_header(handle, path)
        except InvalidRecord as exc:
            problem = exc
        else:
            expected = int(np.prod(shape, dtype=object)) * dtype.itemsize
            size = os.fstat(handle.fileno()).st_size - offset
            if size != expected:
                problem = InvalidRecord(
                    f"the header promises shape {shape} of {dtype} ({expected:,} bytes) but the file holds "
                    f"{size:,}; it is truncated or padded",
                    path=path,
                    field="shape",
                )
        handle.seek(0)
        source: BinaryIO = handle
        if mmap or problem is not None:
            digest = hashlib.sha256()
            while block := handle.read(1 << 20):
                digest.update(block)
            self._check(name, digest.hexdigest())
            if problem is not None:
                raise problem
            handle.seek(0)
        else:
            data = handle.read()
            self._check(name, hashlib.sha256(data).hexdigest())
            source = io.BytesIO(data)
        try:
            if mmap and expected:  # an empty array cannot be memory-mapped (mmap refuses length 0)
                return np.memmap(source, dtype=dtype, mode="r", offset=offset, shape=shape, order="C")
            return np.load(source, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise InvalidRecord(f"not a valid .npy array: {exc}", path=path) from None

    def check_unread(self) -> None:
        """Check every file ``checksums.json`` lists that was not read (an extra file, a file no load parses)."""
        for name in sorted(set(self._checksums() or {}) - self._read):
            handle, digest = self._open(name, "missing file"), hashlib.sha256()
            while block := handle.read(1 << 20):
                digest.update(block)
            self._check(name, digest.hexdigest())


def _identity(status: os.stat_result) -> tuple[int, int]:
    return status.st_dev, status.st_ino


def _stacklevel() -> int:
    """The stack level of the first caller outside labsrc, so a warning names the line that loaded the folder."""
    level, frame = 2, sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        level, frame = level + 1, frame.f_back
    return level


def read_pinned(
    path: str | Path,
    read: Callable[[PinnedFolder], T],
    *,
    required: Collection[str] = (),
    remedy: str | None = None,
    unchecked: str,
) -> T:
    """``read(folder)`` on the folder at ``path`` pinned (:class:`PinnedFolder`), then every listed file checked.

    When a concurrent save replaced the folder while it was read (a file gone
    with the old folder), the read starts again on the folder now in place, up
    to :data:`RACE_ATTEMPTS` times; then it is refused with an
    :class:`~labsrc.errors.InvalidRecord` that names the race. A folder without
    ``checksums.json`` is read unchecked, with an :class:`UncheckedFolderWarning`
    ending with ``unchecked``: how to save the folder again.
    """
    path = Path(path)
    for _ in range(RACE_ATTEMPTS):
        with PinnedFolder(path, required=required, remedy=remedy) as folder:
            try:
                result = read(folder)
                folder.check_unread()
            except (InvalidRecord, OSError):
                if folder.replaced():
                    continue  # read from a folder a save removed: start again on the one in its place
                raise
            if not folder.checked:
                if folder.replaced():
                    continue  # its checksums.json may have gone with it
                warnings.warn(
                    f"no {CHECKSUMS_FILE} in {path}, so its files were loaded unchecked (a bit flip or an edit "
                    f"would go unnoticed); {unchecked}",
                    UncheckedFolderWarning,
                    stacklevel=_stacklevel(),
                )
            return result
    raise InvalidRecord(
        f"the folder was replaced by a concurrent save while it was read ({RACE_ATTEMPTS} times in a row); "
        "load it again",
        path=path,
    )
