"""The owner's session: every statement under a lock and a statement timeout, and who holds it up when one fires.

Other roles share a rented server, and some may touch what the lab made: a
large object the reader granted to ``PUBLIC`` (an injected statement can, it
owns the object) can be written by any role, and a co-tenant that keeps that
transaction open holds a row lock that removing the object waits for. The
owner's session therefore never waits unbounded (:func:`connect_owner`):

* ``lock_timeout`` is :attr:`Timeouts.lock <labsrc.engines.pool.Timeouts.lock>`
  for every statement;
* ``statement_timeout`` is :attr:`Timeouts.statement <labsrc.engines.pool.Timeouts.statement>`,
  and :attr:`Timeouts.build <labsrc.engines.pool.Timeouts.build>` while the
  store loads and indexes (:func:`building`), which at 100k chunks takes
  minutes;
* ``idle_in_transaction_session_timeout`` ends a transaction this process
  abandoned.

When a drop gives up on a lock, :func:`holders` names who holds it, so
``close()`` and ``labsrc engines clean`` say in one line what they kept and
why: ``schema lab_1234abcd and role lab_1234abcd_reader kept: role eve (pid
4242) holds a lock on large object 16411``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from labsrc.engines.pool import Timeouts

__all__ = ["building", "connect_owner", "drop_or_say", "holders", "owner_timeouts"]

# Sessions of other roles holding a lock on one of the schema's relations, or on pg_largeobject while the reader
# owns large objects (their pages live there: a co-tenant writing one holds its rows). Other roles only: the
# owner's own sessions (a live store of this owner) are not "someone else".
_HOLDERS = """
WITH mine AS (
    SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %(schema)s
), objects AS (
    SELECT array_agg(m.oid ORDER BY m.oid) AS oids FROM pg_catalog.pg_largeobject_metadata m
    JOIN pg_catalog.pg_roles r ON r.oid = m.lomowner WHERE r.rolname = %(role)s OR m.oid = ANY (%(taken)s::oid[])
)
SELECT DISTINCT a.usename, a.pid,
       CASE WHEN l.relation IN (SELECT oid FROM mine) THEN 'table ' || l.relation::regclass::text
            ELSE 'large object ' || array_to_string((SELECT oids[1:3] FROM objects), ', ')
                 || CASE WHEN cardinality((SELECT oids FROM objects)) > 3 THEN ' and others' ELSE '' END END
FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE l.granted AND a.pid <> pg_catalog.pg_backend_pid() AND a.usename IS DISTINCT FROM CURRENT_USER
  AND (l.relation IN (SELECT oid FROM mine)
       OR (l.relation = 'pg_catalog.pg_largeobject'::regclass AND (SELECT oids FROM objects) IS NOT NULL))
ORDER BY 1, 2, 3
"""


def owner_timeouts(conn: Any, timeouts: Timeouts, *, statement: float | None = None) -> None:
    """Put ``conn`` (the owner's session) under ``timeouts``: lock, statement (or ``statement`` seconds), idle."""
    ms = timeouts.ms
    seconds = timeouts.statement if statement is None else statement
    conn.execute(f"SET lock_timeout = '{ms(timeouts.lock)}ms'")
    conn.execute(f"SET statement_timeout = '{ms(seconds)}ms'")
    conn.execute(f"SET idle_in_transaction_session_timeout = '{ms(max(seconds, 60.0))}ms'")


def connect_owner(psycopg: Any, dsn: str, timeouts: Timeouts) -> Any:
    """An autocommit session as the DSN's user, under :func:`owner_timeouts` (connect errors are the caller's)."""
    conn = psycopg.connect(dsn, autocommit=True, connect_timeout=timeouts.connect_s)
    try:
        owner_timeouts(conn, timeouts)
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def building(conn: Any, timeouts: Timeouts) -> Iterator[None]:
    """Inside the block one statement may take :attr:`Timeouts.build` (a load, an index build); locks still time out."""
    owner_timeouts(conn, timeouts, statement=timeouts.build)
    try:
        yield
    finally:
        if not conn.closed:
            owner_timeouts(conn, timeouts)


def holders(conn: Any, schema: str, role: str, taken: Sequence[int] = ()) -> list[str]:
    """Who else holds a lock on what ``schema`` and ``role`` made (and the large objects ``taken`` over from the
    role), one phrase each, sorted: ``role eve (pid 4242) holds a lock on large object 16411``. Empty: nobody."""
    rows = conn.execute(_HOLDERS, {"schema": schema, "role": role, "taken": list(taken)}).fetchall()
    return [f"role {user} (pid {pid}) holds a lock on {what}" for user, pid, what in rows]


def drop_or_say(conn: Any, schema: str, role: str) -> str | None:
    """:func:`~labsrc.engines.schema.drop_store` under ``conn``'s timeouts; if a lock or the statement timeout
    stops it (nothing is dropped then), why, in one phrase naming who holds it up; else None."""
    from psycopg import errors

    from labsrc.engines.errors import first_line
    from labsrc.engines.schema import drop_store

    try:
        drop_store(conn, schema, role)
    except (errors.LockNotAvailable, errors.QueryCanceled) as exc:
        held = holders(conn, schema, role)
        return "; ".join(held) if held else f"{first_line(exc)} (no other role's lock found; retry with labsrc engines clean)"
    return None
