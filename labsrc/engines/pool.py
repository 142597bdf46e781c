"""Reader connections: one per request, from a pool, each started from settings the reader role cannot change.

A psycopg connection runs one transaction at a time. Sharing one between
threads makes a second thread's ``BEGIN`` a savepoint inside the first thread's
transaction, and its authorization overwrites the first caller's. So every
request borrows its own connection from a :class:`psycopg_pool.ConnectionPool`
and runs in its own transaction on it, as psycopg's documentation shows::

    with pool.connection() as conn, conn.transaction():
        ...  # authorize, bm25, dense

The transaction is read-only, so it writes nothing. A connection goes back to
the pool exactly as it came, or not at all (:func:`leftover_state`). Session
state that outlives a transaction is what a buggy or injected statement could
leave for the next caller on the same connection:

* a setting (``SET``, ``set_config``) could change a later plan or search
  path: ``RESET ALL`` undoes it;
* a temporary table, view or function shadows nothing (``pg_temp`` comes last
  in the search path) but takes space: ``DISCARD TEMP`` drops it;
* a prepared statement (``PREPARE``) could replace one of the engine's own and
  change another caller's scores: the connection is closed;
* a ``WITH HOLD`` cursor could hand one caller's rows to the next request: the
  connection is closed;
* a session advisory lock could spell ids into ``pg_locks`` for any session to
  read: the connection is closed;
* a ``LISTEN`` would receive notifications meant for someone else: the
  connection is closed;
* a ``SET ROLE`` survives ``RESET ALL``: the connection is closed;
* a large object or a prepared transaction outlives the session, and every
  session of the role can read it (``lo_get``, ``pg_prepared_xacts.gid``):
  the reader removes its own in bounded batches, or else the owner does
  (:mod:`labsrc.engines.lasting`), and the connection is closed; an embedded
  server does not let the reader create large objects at all. Making one
  takes an injected ``COMMIT`` (the engine's transactions are read-only) and
  ``SET default_transaction_read_only = off``, which no privilege can take
  from a role;
* ``ALTER ROLE CURRENT_USER SET ...`` defaults, which ``pg_db_role_setting``
  shows every session: the store's owner removes them and the connection is
  closed;
* a placeholder setting's *name* (``set_config('leak.x', '', false)``)
  survives ``RESET ALL`` and ``DISCARD ALL``, and PostgreSQL lists
  placeholders nowhere (not in ``pg_settings``, not in ``SHOW ALL``), so no
  check can see one: a session serves only requests of one boundary
  (:mod:`labsrc.engines.sessions`).

The engine itself leaves none of the closing kinds: its statements are
prepared by psycopg through the protocol (``pg_prepared_statements.from_sql``
is false, and SQL cannot make such a statement), so they survive and keep the
next request cheap, as long as the server holds exactly the ones psycopg
prepared. Anything else, and the pool replaces the session with a new one.

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

__all__ = [
    "DEFAULT_TIMEOUTS",
    "LEFTOVER_STATE",
    "ROLE_DEFAULTS",
    "Timeouts",
    "leftover_state",
    "reader_options",
    "reset_session",
    "role_has_defaults",
]

# psycopg logs what the engine reports itself, as one LabError: the pool each failed reconnection or
# discarded connection, a pipeline the error it ignored while ending ("error ignored terminating
# <psycopg.Pipeline [BAD]>"). A NullHandler on "psycopg" (the pool's logger is its child) keeps Python's
# last-resort handler from printing them to stderr when the application configured no logging; an
# application that did configure logging still receives them.
logging.getLogger("psycopg").addHandler(logging.NullHandler())


@dataclass(frozen=True)
class Timeouts:
    """How long the engine waits, in seconds, before a request ends in a :class:`~labsrc.errors.LabError`.

    ``connect``: to open a session (libpq's ``connect_timeout``; PostgreSQL's minimum is 2 s) and to wait
    for a free pooled connection. ``statement``: for one SQL statement to finish (``statement_timeout``).
    ``lock``: for a lock another session holds, e.g. an owner's ``LOCK TABLE`` (``lock_timeout``).
    ``build``: for one statement of the owner's load (``COPY``, an index build), which at 100k chunks takes
    minutes; every other owner statement has ``statement`` (:mod:`labsrc.engines.owner`).

    The first three are enforced by the server. A server that does not run at all (stopped, frozen,
    unreachable without a reset) enforces nothing, so a request also has a deadline in this process,
    :attr:`request`: ``connect + statement`` seconds from the moment it has a connection
    (:mod:`labsrc.engines.deadline`). Waiting for a connection is bounded by ``connect`` on top.
    """

    connect: float = 10.0
    statement: float = 30.0
    lock: float = 5.0
    build: float = 3600.0

    def __post_init__(self) -> None:
        for name in ("connect", "statement", "lock", "build"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise InvalidArgument(f"timeouts.{name} must be a finite number of seconds > 0, not {value!r}")
            if value > 86_400:  # PostgreSQL's timeouts are int milliseconds (at most 24.8 days); a day is plenty
                raise InvalidArgument(f"timeouts.{name} must be at most 86,400 seconds (a day), not {value!r}")
        if self.connect < 2:
            raise InvalidArgument(f"timeouts.connect must be at least 2 s (libpq's minimum), not {self.connect!r}")

    @property
    def connect_s(self) -> int:
        """``connect_timeout`` as libpq takes it: whole seconds, rounded up."""
        return math.ceil(self.connect)

    @property
    def request(self) -> float:
        """The client-side deadline of one request once it has a connection: ``connect + statement`` seconds."""
        return self.connect + self.statement

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


#: What a returned session still holds, by kind; each count must be 0 (catalog names qualified, so a
#: temporary view named ``pg_cursors`` cannot answer instead).
LEFTOVER_STATE = """
SELECT (SELECT count(*) FROM pg_catalog.pg_prepared_statements WHERE from_sql),
       (SELECT count(*) FROM pg_catalog.pg_prepared_statements WHERE NOT from_sql),
       (SELECT count(*) FROM pg_catalog.pg_cursors WHERE name <> ''),  -- '': this very query's portal
       (SELECT count(*) FROM pg_catalog.pg_locks WHERE pid = pg_catalog.pg_backend_pid() AND locktype = 'advisory'),
       (SELECT count(*) FROM pg_catalog.pg_listening_channels()),
       current_user <> session_user,
       (SELECT count(*) FROM pg_catalog.pg_largeobject_metadata
         WHERE lomowner = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = session_user)),
       (SELECT count(*) FROM pg_catalog.pg_prepared_xacts WHERE owner = session_user),
       (SELECT count(*) FROM pg_catalog.pg_db_role_setting s JOIN pg_catalog.pg_roles r ON r.oid = s.setrole
         WHERE r.rolname = session_user)
"""

def _driver_prepared(conn: Any) -> int | None:
    """How many statements psycopg prepared on ``conn`` (its cache), or None if this psycopg does not say."""
    names = getattr(getattr(conn, "_prepared", None), "_names", None)
    return len(names) if isinstance(names, dict) else None


def leftover_state(conn: Any) -> list[str]:
    """What ``conn``'s session holds that must not reach another request (empty: nothing).

    Run between requests, outside any transaction. A prepared statement counts when SQL made it
    (``PREPARE``), or when the protocol-level ones differ in number from psycopg's cache (one was
    deallocated or replaced); held cursors, session advisory locks, ``LISTEN`` channels, a role other
    than the session's own, and the objects the reader role owns beyond any session (large objects,
    prepared transactions, ``ALTER ROLE ... SET`` defaults, which every session can read) count always.
    """
    row = conn.execute(LEFTOVER_STATE).fetchone()
    sql_prepared, protocol_prepared, cursors, locks, channels, other_role, large_objects, prepared_xacts, defaults = row
    found = []
    expected = _driver_prepared(conn)
    if sql_prepared:
        found.append(f"{sql_prepared} statement(s) made with PREPARE")
    if expected is not None and protocol_prepared != expected:
        found.append(f"{protocol_prepared} protocol-prepared statement(s) where psycopg prepared {expected}")
    if cursors:
        found.append(f"{cursors} open cursor(s)")
    if locks:
        found.append(f"{locks} advisory lock(s)")
    if channels:
        found.append(f"{channels} LISTEN channel(s)")
    if other_role:
        found.append("a SET ROLE")
    if large_objects:
        found.append(f"{large_objects} large object(s)")
    if prepared_xacts:
        found.append(f"{prepared_xacts} prepared transaction(s)")
    if defaults:
        found.append(ROLE_DEFAULTS)
    return found


#: How :func:`leftover_state` names ``ALTER ROLE ... SET`` defaults the reader gave itself (the owner removes them).
ROLE_DEFAULTS = "session defaults set on the reader role"


def reset_session(conn: Any) -> list[str]:
    """Put a returned connection back as it came: reset settings and drop temporary objects, then report
    whatever else the session still holds (:func:`leftover_state`); the caller closes it if that is not empty.

    ``RESET ALL`` restores every setting to the session's start-up value (the options of
    :func:`reader_options`), ``DISCARD TEMP`` drops temporary tables, views and functions. Not
    ``DISCARD ALL``: it would also drop the engine's own prepared statements, which make the next request
    on this connection cheaper, and could not drop a ``SET ROLE`` or a lock held for someone else to see
    before it had happened.
    """
    conn.execute("RESET ALL; DISCARD TEMP")
    return leftover_state(conn)
