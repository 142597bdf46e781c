"""Orphaned stores: a schema and reader role left on someone else's server by a process that died.

A :class:`~labsrc.engines.store.PostgresStore` on a server given by DSN drops
its ``lab_<8 hex>`` schema (every chunk's text, hidden ones included) and its
LOGIN role ``lab_<8 hex>_reader`` in ``close()``. A process killed by
``SIGTERM`` or ``SIGKILL``, or one that exits without ``close()``, never gets
there, and the copy stays on a server that is not ours to delete.

Nothing in the dead process can fix that, so the next one does. Each store
marks its schema with :func:`mark_owned` right after creating it:

* its owner session (the store's ``admin`` connection, which lives as long as
  the store) takes a session-level advisory lock keyed on the schema's name
  (:func:`lock_key`). PostgreSQL releases it when that session ends, and the
  session ends when the client dies: the kernel closes the dead process's
  socket and the backend reads end-of-file. So "is the owner alive?" is "is the
  lock held?", a question any session can ask through ``pg_locks``, with no
  clocks, heartbeats or guesses about host names and pids;
* a comment on the schema, starting with :data:`MARKER_PREFIX`, says the
  schema is the lab's and who made it (host, pid, backend pid, time), for
  people reading ``\\dn+``.

A schema is an orphan (:func:`find_orphans`) only when all three hold: its
name is the lab's (``lab_`` and 8 hex digits), it carries the lab's marker
naming its reader role, and no session holds its lock. A live store's schema,
a schema the lab did not make (even one named ``lab_deadbeef``), and one still
being created (not marked yet) are never touched. :func:`drop_orphans` drops
each orphan as :meth:`PostgresStore.close` would (end the reader role's
sessions, then :func:`~labsrc.engines.schema.drop_store`), holding its lock
while it does, so two cleaners never race. ``labsrc engines clean --dsn URL``
runs it from the command line.

Limits: advisory locks belong to one database, so a store is checked in the
database it was created in (``conn``'s). A connection pooler in transaction
mode (PgBouncer) does not keep session locks; point the DSN at the server. A
client whose machine vanished (no FIN, no RST) holds its lock until the
server's TCP keepalive gives up; its schema is an orphan only after that.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import socket
import warnings
from typing import Any

from labsrc.engines.errors import first_line
from labsrc.engines.schema import drop_store
from labsrc.errors import InvalidArgument, LabError

__all__ = [
    "LOCK_CLASS",
    "MARKER_PREFIX",
    "drop_orphans",
    "find_orphans",
    "is_store_schema",
    "lock_key",
    "mark_owned",
    "reader_role",
]

#: The first key of every store's advisory lock: ``b"labs"`` read as a big-endian int4.
LOCK_CLASS = int.from_bytes(b"labs", "big")

#: How the comment on a store's schema begins (a JSON object follows).
MARKER_PREFIX = "labsrc store "

# The names PostgresStore gives its schemas: "lab_" and secrets.token_hex(4).
_STORE_SCHEMA = re.compile(r"lab_[0-9a-f]{8}")


def is_store_schema(name: str) -> bool:
    """Whether ``name`` is a schema name :class:`~labsrc.engines.store.PostgresStore` could have made."""
    return isinstance(name, str) and _STORE_SCHEMA.fullmatch(name) is not None


def reader_role(schema: str) -> str:
    """The reader role a store's schema comes with (``lab_1234abcd`` → ``lab_1234abcd_reader``)."""
    return f"{schema}_reader"


def lock_key(schema: str) -> tuple[int, int]:
    """The two int4 keys of ``schema``'s advisory lock: :data:`LOCK_CLASS` and 32 bits of SHA-256 of the name.

    Computed here rather than with the server's ``hashtext()``, which is internal and may change between
    versions; a collision could only make an orphan look alive (kept), never a live store look dead.
    """
    digest = hashlib.sha256(schema.encode("utf-8")).digest()
    return LOCK_CLASS, int.from_bytes(digest[:4], "big", signed=True)


def mark_owned(conn: Any, schema: str) -> None:
    """Mark ``schema`` as a live store's: take its advisory lock on ``conn`` and write the marker comment.

    Call it on the session that lives exactly as long as the store (its ``admin`` connection), right after
    the schema is created. The lock is taken first, so a cleaner that sees the marker also sees the lock.
    Calling it again on the same session is harmless. Raises :class:`LabError` if another session holds
    the lock (the schema is someone else's).
    """
    if not is_store_schema(schema):
        raise InvalidArgument(f"schema must be named lab_ and 8 hex digits (a store's), not {schema!r}")
    from psycopg import sql

    first, second = lock_key(schema)
    locked = conn.execute("SELECT pg_catalog.pg_try_advisory_lock(%s::int4, %s::int4)", (first, second)).fetchone()[0]
    if not locked:
        raise LabError(f"schema {schema} is held by another live session; it is not this store's to mark")
    backend = conn.execute("SELECT pg_catalog.pg_backend_pid()").fetchone()[0]
    marker = MARKER_PREFIX + json.dumps(
        {
            "reader": reader_role(schema),
            "client": f"{socket.gethostname()}:{os.getpid()}",
            "backend_pid": backend,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "lock": [first, second],
        },
        sort_keys=True,
    )
    with conn.transaction():  # committed now, also on a connection that is not in autocommit mode
        conn.execute(sql.SQL("COMMENT ON SCHEMA {} IS {}").format(sql.Identifier(schema), sql.Literal(marker)))


def find_orphans(conn: Any) -> list[str]:
    """The store schemas in ``conn``'s database whose owner is gone, sorted; the ones ``conn``'s user may drop.

    Only schemas named like a store's, carrying the lab's marker for their own reader role, owned by a role
    whose privileges ``conn``'s user has, and whose advisory lock no session holds (``conn``'s own locks
    count as held: a store never finds itself).
    """
    rows = conn.execute(
        "SELECT n.nspname, pg_catalog.obj_description(n.oid, 'pg_namespace') FROM pg_catalog.pg_namespace n "
        "WHERE n.nspname ~ '^lab_[0-9a-f]{8}$' AND pg_catalog.pg_has_role(n.nspowner, 'USAGE') ORDER BY n.nspname"
    ).fetchall()
    marked = [name for name, comment in rows if is_store_schema(name) and _is_marker_for(comment, name)]
    if not marked:
        return []
    held = {
        (int(classid), int(objid))
        for classid, objid in conn.execute(
            "SELECT classid::int8, objid::int8 FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
            "AND granted AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database())"
        ).fetchall()
    }
    # pg_locks shows the int4 keys as oids, i.e. unsigned.
    return [name for name in marked if tuple(key & 0xFFFFFFFF for key in lock_key(name)) not in held]


def drop_orphans(conn: Any) -> list[str]:
    """Drop every orphan :func:`find_orphans` finds, with its reader role; returns the schemas dropped, sorted.

    Each one is dropped in its own transaction while ``conn`` holds its lock (a second cleaner skips it),
    after ending the reader role's sessions, as :meth:`PostgresStore.close` does. One that cannot be dropped
    (say, its role owns objects in another database) is left in place with a :class:`RuntimeWarning`;
    a lost connection raises.
    """
    import psycopg

    dropped: list[str] = []
    for schema in find_orphans(conn):
        first, second = lock_key(schema)
        if not conn.execute("SELECT pg_catalog.pg_try_advisory_lock(%s::int4, %s::int4)", (first, second)).fetchone()[0]:
            continue  # another cleaner is dropping it right now
        try:
            role = reader_role(schema)
            with conn.transaction():
                drop_store(conn, schema, role)  # ends the role's sessions first, as PostgresStore.close does
            dropped.append(schema)
        except psycopg.OperationalError:
            raise
        except psycopg.DatabaseError as exc:
            warnings.warn(
                f"orphaned schema {schema} and role {role} were not dropped: {first_line(exc)}", RuntimeWarning, stacklevel=2
            )
        finally:
            if not conn.closed:
                conn.execute("SELECT pg_catalog.pg_advisory_unlock(%s::int4, %s::int4)", (first, second))
    return dropped


def _is_marker_for(comment: str | None, schema: str) -> bool:
    """Whether ``comment`` is :func:`mark_owned`'s marker for ``schema`` (a JSON object naming its reader role)."""
    if not comment or not comment.startswith(MARKER_PREFIX):
        return False
    try:
        marker = json.loads(comment[len(MARKER_PREFIX) :])
    except ValueError:
        return False
    return isinstance(marker, dict) and marker.get("reader") == reader_role(schema)
