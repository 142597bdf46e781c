"""Reader connections: one per request, from a pool, each started from settings the reader role cannot change.

A psycopg connection runs one transaction at a time. Sharing one between
threads makes a second thread's ``BEGIN`` a savepoint inside the first thread's
transaction, and its authorization overwrites the first caller's. So every
request borrows its own connection from a :class:`psycopg_pool.ConnectionPool`
and runs in its own transaction on it, as psycopg's documentation shows::

    with pool.connection() as conn, conn.transaction():
        ...  # authorize, bm25, dense

The transaction is read-only, so it writes nothing. When a connection returns
to the pool, ``RESET ALL; DISCARD TEMP`` undoes any ``SET`` a buggy or injected
statement made and drops any temporary table, so none of it reaches the next
request on that connection.

Every reader session starts from :func:`reader_options`: the timeouts, the
search path, read-only repeatable-read transactions and row security, sent in
the connection's start-up packet, which outranks ``ALTER ROLE ... SET`` defaults.
A new session also checks that the role has no such defaults at all
(PostgreSQL lets every role set its own, and nothing can forbid it); if it
finds some, the store's owner removes them and the session is replaced.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from labsrc.errors import InvalidArgument

__all__ = ["DEFAULT_TIMEOUTS", "Timeouts", "reader_options", "role_has_defaults"]

# The pool logs each failed reconnection as a warning; the engine reports the failure itself, as one
# LabError. A NullHandler keeps Python's last-resort handler from printing them when the application
# configured no logging (an application that did configure logging still receives them).
logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())


@dataclass(frozen=True)
class Timeouts:
    """How long the engine waits, in seconds, before a request ends in a :class:`~labsrc.errors.LabError`.

    ``connect``: to open a session (libpq's ``connect_timeout``; PostgreSQL's minimum is 2 s) and to wait
    for a free pooled connection. ``statement``: for one SQL statement to finish (``statement_timeout``).
    ``lock``: for a lock another session holds, e.g. an owner's ``LOCK TABLE`` (``lock_timeout``).
    """

    connect: float = 10.0
    statement: float = 30.0
    lock: float = 5.0

    def __post_init__(self) -> None:
        for name in ("connect", "statement", "lock"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise InvalidArgument(f"timeouts.{name} must be a finite number of seconds > 0, not {value!r}")
        if self.connect < 2:
            raise InvalidArgument(f"timeouts.connect must be at least 2 s (libpq's minimum), not {self.connect!r}")

    @property
    def connect_s(self) -> int:
        """``connect_timeout`` as libpq takes it: whole seconds, rounded up."""
        return math.ceil(self.connect)

    @staticmethod
    def ms(seconds: float) -> int:
        return max(1, round(seconds * 1000))


#: The timeouts a retriever uses unless given others.
DEFAULT_TIMEOUTS = Timeouts()


def reader_options(search_path: str, timeouts: Timeouts) -> str:
    """The ``options`` start-up string of every reader session (outranks the role's own defaults)."""
    settings = {
        "search_path": search_path,
        "statement_timeout": f"{timeouts.ms(timeouts.statement)}ms",
        "lock_timeout": f"{timeouts.ms(timeouts.lock)}ms",
        "idle_in_transaction_session_timeout": f"{timeouts.ms(max(timeouts.statement, 60.0))}ms",
        "default_transaction_read_only": "on",
        "default_transaction_isolation": "repeatable\\ read",
        "row_security": "on",
        "extra_float_digits": "1",  # shortest exact float8 text: scores arrive bit for bit
        "client_encoding": "UTF8",
        "DateStyle": "ISO",
        "TimeZone": "UTC",
    }
    return " ".join(f"-c {name}={value}" for name, value in settings.items())


def role_has_defaults(conn: Any) -> bool:
    """Whether the session's role has ``ALTER ROLE ... SET`` defaults (read from the catalog, qualified names)."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_db_role_setting s JOIN pg_catalog.pg_roles r ON r.oid = s.setrole "
        "WHERE r.rolname = current_user)"
    ).fetchone()
    return bool(row[0])
