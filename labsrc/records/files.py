"""Files the lab writes and reads back: durable writes, an atomic commit, and ``.npy`` checked before it is read.

A save that is killed part-way must leave the old version or the new one, never
neither (git's lockfile, SQLite's journal). The recipe:

1. *write beside*: new content goes to a name nothing reads yet;
2. *fsync* it, so it is on disk before anything points at it;
3. *rename into place* with :func:`os.replace` (atomic on POSIX and Windows),
   then fsync the folder, so the rename itself survives a power cut.

:func:`load_npy` reads a ``.npy`` file only after checking that its header is
plain numeric data and that the file holds every byte the header promises, so a
truncated or hostile file is an :class:`~labsrc.errors.InvalidRecord` naming it,
never an ``EOFError``, a pickle, or a 100 GB allocation.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import sys
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy as np

from labsrc.errors import InvalidArgument, InvalidRecord

__all__ = [
    "as_path",
    "atomic_write_bytes",
    "commit_dir",
    "fsync_dir",
    "load_npy",
    "reading",
    "refuse_foreign_files",
    "stage_dir",
    "write_durable",
    "writing",
]


def as_path(path: object, name: str = "path") -> Path:
    """``path`` as a :class:`~pathlib.Path`: a ``str`` or ``os.PathLike`` without NUL characters."""
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgument(f"{name} must be a str or Path, not {type(path).__name__}")
    path = Path(path)
    if "\0" in str(path):
        raise InvalidArgument(f"{name} {str(path)!r} contains a NUL character")
    try:
        os.fsencode(path)
    except UnicodeEncodeError:
        raise InvalidArgument(f"{name} {str(path)!r} holds a character no file name can (a lone surrogate)") from None
    return path


@contextmanager
def reading(path: str | Path) -> Iterator[None]:
    """Turn an operating-system error met while reading ``path`` into an InvalidRecord naming it."""
    try:
        yield
    except (OSError, UnicodeEncodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidRecord(f"cannot read: {reason}", path=getattr(exc, "filename", None) or path) from None


@contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Turn an operating-system error met while writing ``path`` into an InvalidArgument naming it."""
    try:
        yield
    except (OSError, UnicodeEncodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        where = getattr(exc, "filename", None) or path
        raise InvalidArgument(f"cannot write {where}: {reason}; choose a folder you can write to") from None


def fsync_dir(path: str | Path) -> None:
    """Flush a folder's entries (new names, renames) to disk; a no-op where folders cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # Windows cannot open a folder; its renames are durable enough for the lab
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_durable(path: str | Path, write: Callable[[BinaryIO], None]) -> Path:
    """Create ``path`` with ``write(handle)`` and fsync it before returning (the caller renames or commits)."""
    path = Path(path)
    with open(path, "wb") as handle:
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())
    return path


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Replace ``path`` with ``data`` atomically: write beside, fsync, :func:`os.replace`, fsync the folder."""
    path = Path(path)
    beside = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        write_durable(beside, lambda handle: handle.write(data))
        os.replace(beside, path)
    finally:
        beside.unlink(missing_ok=True)
    fsync_dir(path.parent)
    return path


def refuse_foreign_files(target: Path, owned: Collection[str], what: str) -> None:
    """Before replacing folder ``target`` whole with ``what``: refuse a file in its place, or files ``what`` did not write.

    A save swaps a new folder in for the old one, so anything else in it would be lost.
    """
    if target.exists() and not target.is_dir():
        raise InvalidArgument(f"{target} exists and is not a folder; give a folder for {what}")
    foreign = sorted(p.name for p in target.iterdir() if p.name not in owned) if target.is_dir() else []
    if foreign:
        raise InvalidArgument(
            f"{target} holds files {what} does not ({', '.join(foreign[:5])}); a save replaces the folder whole, "
            "so give a new folder or one labsrc wrote"
        )


def stage_dir(target: str | Path) -> Path:
    """A new empty folder beside ``target`` to write a whole set of files into before :func:`commit_dir`."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_name(f".{target.name}.staging-{secrets.token_hex(4)}")
    staged.mkdir()
    return staged


def _exchange(a: Path, b: Path) -> bool:
    """Swap two folders in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where that is unavailable."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def commit_dir(staged: Path, target: str | Path) -> Path:
    """Put the folder ``staged`` (from :func:`stage_dir`, files fsynced) in place of ``target``.

    A new ``target`` is one rename. An existing one is swapped with ``staged``
    in one step where the system can (Linux), then the old copy is removed; a
    kill leaves the old folder or the new one at ``target``. Elsewhere the old
    folder is renamed aside first, so a kill between the two renames leaves it
    beside ``target`` as ``.<name>.old-<hex>``, not lost. Folders that killed
    writes left beside ``target`` are removed after a commit.
    """
    target = Path(target)
    fsync_dir(staged)
    if not target.exists():
        os.rename(staged, target)
    elif _exchange(staged, target):
        shutil.rmtree(staged)  # now the old folder
    else:
        aside = target.with_name(f".{target.name}.old-{secrets.token_hex(4)}")
        os.rename(target, aside)
        os.rename(staged, target)
        shutil.rmtree(aside)
    fsync_dir(target.parent)
    for leftover in target.parent.glob(f".{target.name}.*-*"):  # what killed writes left beside it
        if leftover.is_dir() and leftover.name.split(".")[-1].startswith(("staging-", "old-")):
            shutil.rmtree(leftover, ignore_errors=True)
    return target


def _npy_header(path: Path) -> tuple[np.dtype, tuple[int, ...], int]:
    """``(dtype, shape, data offset)`` from a ``.npy`` header, refusing anything but plain numbers."""
    try:
        with open(path, "rb") as handle:
            version = np.lib.format.read_magic(handle)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
            else:
                raise ValueError(f"unsupported .npy version {version}")
            offset = handle.tell()
    except FileNotFoundError:
        raise InvalidRecord("missing file", path=path) from None
    except (OSError, ValueError, EOFError, SyntaxError) as exc:
        raise InvalidRecord(f"not a valid .npy array ({type(exc).__name__}: {exc})", path=path, field="header") from None
    if dtype.hasobject or dtype.kind not in "biuf" or dtype.fields is not None:
        raise InvalidRecord(f"holds {dtype} values; expected plain numbers", path=path, field="dtype")
    if fortran and len(shape) > 1:
        raise InvalidRecord("is stored in Fortran order; save it with np.save of a C-ordered array", path=path, field="header")
    return dtype, shape, offset


def load_npy(path: str | Path, *, mmap: bool = False) -> np.ndarray:
    """Read a plain numeric ``.npy`` file (memory-mapped read-only with ``mmap=True``), checked first.

    The file must hold exactly the bytes its header's shape and dtype need:
    a short file (an interrupted copy, a 0-byte file) is refused by name.
    """
    path = Path(path)
    dtype, shape, offset = _npy_header(path)
    expected = int(np.prod(shape, dtype=object)) * dtype.itemsize
    size = path.stat().st_size - offset
    if size != expected:
        raise InvalidRecord(
            f"the header promises shape {shape} of {dtype} ({expected:,} bytes) but the file holds {size:,}; "
            "it is truncated or padded",
            path=path,
            field="shape",
        )
    try:
        # An empty array cannot be memory-mapped (mmap refuses length 0); it is read instead.
        return np.load(path, mmap_mode="r" if mmap and expected else None, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InvalidRecord(f"not a valid .npy array: {exc}", path=path) from None
