"""Files the lab writes and reads back: durable writes, an atomic commit, and ``.npy`` checked before it is read.

Every file the lab reads is opened through :func:`open_regular`, which refuses
anything but a regular file (a FIFO, a device, a folder) by name *before*
reading: opening a FIFO for reading blocks until a writer comes, which on the
command line is forever, and a device such as ``/dev/zero`` never ends.

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
import hashlib
import os
import re
import secrets
import shutil
import socket
import stat
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
    "file_sha256",
    "fsync_dir",
    "load_npy",
    "open_regular",
    "reading",
    "refuse_foreign_files",
    "remove_stale_staging",
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


# --- reading only regular files ----------------------------------------------------------------

#: What a path that is not a regular file is, in words (the first test that matches).
_SPECIAL_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)
#: O_NONBLOCK: opening a FIFO with it returns at once instead of waiting for a writer (POSIX only).
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def _refuse_special(path: Path, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _SPECIAL_KINDS if test(mode)), "not a file")
    raise InvalidRecord(
        f"is {kind}, not a regular file; the lab reads only regular files (a FIFO or a device would block "
        "or never end), so give the path of a file",
        path=path,
    )


def open_regular(path: str | Path) -> BinaryIO:
    """Open ``path`` for binary reading if it is a regular file (a symlink to one is fine).

    Anything else is an :class:`~labsrc.errors.InvalidRecord` naming the path
    and what it is. It is checked twice: :func:`os.stat` first, so a device is
    never opened at all, then :func:`os.fstat` of what was opened (with
    ``O_NONBLOCK``, so a FIFO swapped in between cannot block the open either),
    so the file checked is the file read. A missing or unreadable file raises
    the usual :class:`OSError` for the caller to word.
    """
    path = Path(path)
    _refuse_special(path, os.stat(path).st_mode)
    fd = os.open(path, os.O_RDONLY | _NONBLOCK | getattr(os, "O_BINARY", 0))
    try:
        _refuse_special(path, os.fstat(fd).st_mode)
        if _NONBLOCK:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a regular file's bytes, as 64 lowercase hex digits (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open_regular(path) as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


# --- staging folders: a whole set of files written beside the target, then swapped in -------------

#: A leftover beside the target: ``staging-<host>-<pid>-<hex>`` or ``old-<host>-<pid>-<hex>``, or the
#: same without ``<host>-<pid>-`` from a labsrc older than owner-tagged names.
_LEFTOVER = re.compile(r"(staging|old)-(?:([0-9a-f]{8})-([0-9]{1,20})-)?[0-9a-f]{8}")


def _host_tag() -> str:
    """8 hex digits naming this machine and PID namespace: a pid means nothing on another host sharing the
    folder (NFS), nor in another PID namespace (a gate's build has one of its own), where it is not visible."""
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:  # no /proc (macOS): one namespace
        namespace = ""
    return hashlib.sha256(f"{socket.gethostname()}/{namespace}".encode("utf-8", "surrogateescape")).hexdigest()[:8]


def _owner() -> str:
    return f"{_host_tag()}-{os.getpid()}"


def _process_alive(pid: int) -> bool:
    """Whether process ``pid`` (on this machine) is running; True when that cannot be told, so nothing live is removed."""
    if pid == os.getpid():
        return True
    if os.name != "posix":  # on Windows os.kill(pid, 0) would terminate the process
        try:
            import psutil  # an optional extra, not a runtime dependency
        except ImportError:
            return True
        return bool(psutil.pid_exists(pid))
    try:
        os.kill(pid, 0)  # signal 0: checks that the process exists, sends nothing
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    except (OverflowError, ValueError):  # no process can have this id
        return False
    return True


def remove_stale_staging(target: str | Path) -> list[Path]:
    """Remove what saves of ``target`` killed part-way left beside it; return what was removed.

    A save writes into ``.<name>.staging-<host>-<pid>-<hex>`` beside the target
    (and, where folders cannot be swapped in one step, renames the old version
    aside as ``.<name>.old-<host>-<pid>-<hex>``). A SIGKILL, a power cut or a
    full disk can leave such a folder behind, as large as the save. Only folders
    whose owning process is gone are removed: one written on this machine by a
    pid that no longer runs, or one from a labsrc older than owner-tagged names.
    A live save's folder (a concurrent process, or another thread of this one)
    and a folder made on another machine are kept. An ``old-`` folder is kept
    while the target is missing: then it is the only copy. Errors are ignored:
    this is housekeeping, and a read-only folder must still load.
    """
    target = Path(target)
    removed: list[Path] = []
    try:
        places = {target, target.resolve()} if target.is_symlink() else {target}  # a save replaces what a link points to
    except (OSError, RuntimeError):  # a name too long, a symlink loop: nothing can have been staged beside it
        return removed
    host = _host_tag()
    for where in places:
        if not where.name:
            continue
        prefix = f".{where.name}."
        try:
            entries = [e for e in os.scandir(where.parent) if e.name.startswith(prefix)]
        except OSError:
            continue
        for entry in entries:
            match = _LEFTOVER.fullmatch(entry.name[len(prefix) :])
            try:
                if match is None or not entry.is_dir(follow_symlinks=False):
                    continue
                kind, owner_host, pid = match.groups()
                if pid is not None and (owner_host != host or _process_alive(int(pid))):
                    continue
                if kind == "old" and not where.exists():
                    continue  # the only copy of the old folder: a commit was killed between its two renames
            except OSError:
                continue
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed


def stage_dir(target: str | Path) -> Path:
    """A new empty folder beside ``target`` to write a whole set of files into before :func:`commit_dir`.

    It is named ``.<name>.staging-<host>-<pid>-<hex>``, so a later save or load can
    tell whether its owner still runs; leftovers of dead saves are removed first
    (:func:`remove_stale_staging`).
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(target)
    staged = target.with_name(f".{target.name}.staging-{_owner()}-{secrets.token_hex(4)}")
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
    beside ``target`` as ``.<name>.old-<host>-<pid>-<hex>``, not lost. Folders that
    killed writes left beside ``target`` are removed after a commit; a live
    save's are kept (:func:`remove_stale_staging`).
    """
    target = Path(target)
    fsync_dir(staged)
    if not target.exists():
        os.rename(staged, target)
    elif _exchange(staged, target):
        shutil.rmtree(staged)  # now the old folder
    else:
        aside = target.with_name(f".{target.name}.old-{_owner()}-{secrets.token_hex(4)}")
        os.rename(target, aside)
        os.rename(staged, target)
        shutil.rmtree(aside)
    fsync_dir(target.parent)
    remove_stale_staging(target)  # what killed writes left beside it; never a live save's
    return target


def _npy_header(handle: BinaryIO, path: Path) -> tuple[np.dtype, tuple[int, ...], int]:
    """``(dtype, shape, data offset)`` from a ``.npy`` header, refusing anything but plain numbers."""
    try:
        version = np.lib.format.read_magic(handle)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
        else:
            raise ValueError(f"unsupported .npy version {version}")
        offset = handle.tell()
    except (OSError, ValueError, EOFError, SyntaxError) as exc:
        raise InvalidRecord(f"not a valid .npy array ({type(exc).__name__}: {exc})", path=path, field="header") from None
    if dtype.hasobject or dtype.kind not in "biuf" or dtype.fields is not None:
        raise InvalidRecord(f"holds {dtype} values; expected plain numbers", path=path, field="dtype")
    if fortran and len(shape) > 1:
        raise InvalidRecord("is stored in Fortran order; save it with np.save of a C-ordered array", path=path, field="header")
    return dtype, shape, offset


def load_npy(path: str | Path, *, mmap: bool = False) -> np.ndarray:
    """Read a plain numeric ``.npy`` file (memory-mapped read-only with ``mmap=True``), checked first.

    The file must be a regular file (:func:`open_regular`) holding exactly the
    bytes its header's shape and dtype need: a short file (an interrupted copy,
    a 0-byte file) is refused by name. The header, the size and the data all
    come from the one file descriptor opened, so a file swapped in between
    cannot slip past the checks.
    """
    path = Path(path)
    try:
        handle = open_regular(path)
    except InvalidRecord:
        raise
    except FileNotFoundError:
        raise InvalidRecord("missing file", path=path) from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
        raise InvalidRecord(f"cannot read: {getattr(exc, 'strerror', None) or exc}", path=path) from None
    with handle:
        dtype, shape, offset = _npy_header(handle, path)
        expected = int(np.prod(shape, dtype=object)) * dtype.itemsize
        size = os.fstat(handle.fileno()).st_size - offset
        if size != expected:
            raise InvalidRecord(
                f"the header promises shape {shape} of {dtype} ({expected:,} bytes) but the file holds {size:,}; "
                "it is truncated or padded",
                path=path,
                field="shape",
            )
        try:
            if mmap and expected:  # an empty array cannot be memory-mapped (mmap refuses length 0); it is read instead
                return np.memmap(handle, dtype=dtype, mode="r", offset=offset, shape=shape, order="C")
            handle.seek(0)
            return np.load(handle, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise InvalidRecord(f"not a valid .npy array: {exc}", path=path) from None
