"""The embedded server's socket directory: made by the lab, mode 0700, short enough for a Unix socket.

The embedded server trusts every local connection (``initdb --auth=trust``), so
whoever can reach its socket is a superuser who can read every chunk, hidden
ones included. Only the directory's permissions keep others out: the socket
file itself is created by PostgreSQL, and the directory must be one that only
the server's own user can open.

pgserver picks the directory itself and does not promise that: when the data
directory's path is too long for a socket (``TMPDIR`` on a long path), it uses
``$XDG_RUNTIME_DIR/python_PostgresServer/<hash>`` (default mode, left behind
after the server stops) and, as root, ``chmod 0777``\\ s it. So the lab makes
the directory itself with :func:`make_socket_directory` and passes it to
PostgreSQL (``-k``): ``<near>/socket`` when that path fits, else a fresh
``mkdtemp`` under ``/tmp``, always mode 0700, whatever ``TMPDIR``,
``XDG_RUNTIME_DIR`` or the umask say.

Why the length matters: a Unix socket's path is stored in ``sun_path``, 108
bytes on Linux and 104 on macOS and the BSDs, the final NUL included, and
PostgreSQL refuses a longer one.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import tempfile
from pathlib import Path

from labsrc.errors import LabError

__all__ = ["SHORT_BASES", "SUN_PATH_BYTES", "make_socket_directory", "socket_path_fits"]

#: Size of ``sockaddr_un.sun_path`` (the final NUL included): what PostgreSQL checks a socket path against.
SUN_PATH_BYTES = 104 if sys.platform == "darwin" or "bsd" in sys.platform else 108

#: Where a socket directory goes when the data directory's own path is too long: short, fixed, sticky.
SHORT_BASES = ("/tmp", "/var/tmp")

# The longest name PostgreSQL gives its socket (the port has at most five digits).
_LONGEST_SOCKET_NAME = ".s.PGSQL.65535"

# pg_ctl hands ``-o "-k DIR"`` to /bin/sh, and PostgreSQL splits the value on commas: plain characters only.
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./-]+")


def socket_path_fits(directory: str | Path) -> bool:
    """Whether PostgreSQL's socket (any port) fits in ``sun_path`` inside ``directory``, and the path needs no quoting."""
    path = os.fsencode(Path(directory) / _LONGEST_SOCKET_NAME)
    return len(path) < SUN_PATH_BYTES and _PLAIN_PATH.fullmatch(str(directory)) is not None


def make_socket_directory(near: str | Path) -> Path:
    """Create an empty directory for the server's socket, mode 0700, owned by this process's user.

    ``near/socket`` when its path fits (:func:`socket_path_fits`), so everything stays in one place;
    else a new ``labsrc-pgs-*`` directory under the first of :data:`SHORT_BASES` where one fits.
    The caller deletes it (the embedded server's reaper does, however the process ends).
    """
    near = Path(near)
    candidate = near / "socket"
    if socket_path_fits(candidate):
        candidate.mkdir(mode=0o700)
        return _private(candidate)
    for base in SHORT_BASES:
        if Path(base).is_dir() and socket_path_fits(Path(base) / "labsrc-pgs-xxxxxxxx"):
            try:
                made = Path(tempfile.mkdtemp(prefix="labsrc-pgs-", dir=base))
            except OSError:  # not writable here (a read-only /tmp): try the next base
                continue
            return _private(made)
    raise LabError(
        f"no directory for the PostgreSQL socket: {candidate} is too long for a Unix socket "
        f"({SUN_PATH_BYTES - 1} bytes at most, socket name included) or needs quoting, and none of "
        f"{', '.join(SHORT_BASES)} is writable; start the server in a shorter directory"
    )


def _private(directory: Path) -> Path:
    """``directory`` set to exactly mode 0700 (a umask may have taken bits away), checked to be ours."""
    directory.chmod(0o700)
    info = directory.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) != 0o700:
        raise LabError(f"socket directory {directory} is not a private directory of this user (mode 0700)")
    return directory
