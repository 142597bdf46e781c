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

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import numpy as np

from labsrc.errors import InvalidRecord

__all__ = ["atomic_write_bytes", "fsync_dir", "load_npy", "write_durable"]


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
