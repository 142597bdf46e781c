"""What a reader session can make that outlives it, and how the engine removes it at any count.

A large object or a prepared transaction outlives the session that made it,
and every session of the reader role can read it (``lo_get``,
``pg_prepared_xacts.gid``); the reader owns its large objects, so it may even
grant them to ``PUBLIC``, where a co-tenant reads them. Making one takes an
injected ``COMMIT`` and ``SET default_transaction_read_only = off`` (the
threat model's assumption). Which defence holds depends on the server:

=====================  ==================================================  =========================================
server                 the reader creates large objects?                   what is left is removed
=====================  ==================================================  =========================================
embedded               no: ``EXECUTE`` on every function that creates     (nothing to remove)
                       one is revoked from ``PUBLIC`` when it starts
                       (:func:`forbid_large_objects`; the store is a
                       superuser there and the server is its alone)
by DSN                 yes: revoking is server-wide and needs a            when the session is returned, in batches
                       superuser, and would break other tenants that use   of :data:`LARGE_OBJECT_BATCH` per transaction, by the
                       large objects                                       reader (:func:`remove_lasting`), or else
                                                                           by the owner (:func:`owner_removes`); the
                                                                           session is discarded either way
=====================  ==================================================  =========================================

Each ``lo_unlink`` takes a lock that lasts to the end of its transaction, and
a transaction's locks share one table of ``max_locks_per_transaction ×
(max_connections + max_prepared_transactions)`` slots (6,400 by default):
unlinking 20,000 objects in one transaction fails with "out of shared memory"
every time. :data:`LARGE_OBJECT_BATCH` objects a transaction cannot exhaust it. A grant
dies with its object. If a co-tenant holds an object (by writing it, where the
reader granted ``UPDATE``), the owner first takes it over and revokes every
grant on it (no lock on its pages needed), so no reader session and no other
role reads it again; the store unlinks it when it closes (:func:`unlink_objects`),
or names it if it is still held then.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "LARGE_OBJECT_BATCH",
    "LARGE_OBJECT_MAKERS",
    "TAKEN_OVER",
    "forbid_large_objects",
    "owner_removes",
    "remove_lasting",
    "unlink_objects",
    "unlink_taken_over",
]

#: Large objects unlinked per transaction: well under the server's shared lock table (6,400 slots by default).
LARGE_OBJECT_BATCH = 500

#: How the comment on a large object the owner took over from a store's reader begins (the schema follows).
TAKEN_OVER = "labsrc store reader's object, taken over by the owner: "

#: Every function that creates a large object (``lo_put`` and ``lo_open`` write only ones that exist).
LARGE_OBJECT_MAKERS = (
    "pg_catalog.lo_creat(integer)",
    "pg_catalog.lo_create(oid)",
    "pg_catalog.lo_from_bytea(oid, bytea)",
    "pg_catalog.lo_import(text)",
    "pg_catalog.lo_import(text, oid)",
)

_UNLINK_BATCH = """
SELECT count(pg_catalog.lo_unlink(m.oid)) FROM (
    SELECT oid FROM pg_catalog.pg_largeobject_metadata
    WHERE lomowner = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = %(role)s) ORDER BY oid LIMIT %(batch)s
) AS m
"""

# A batch of a role's large objects, with every role they are granted to (0: PUBLIC).
_OWNED_BATCH = """
SELECT m.oid, array_remove(array_agg(DISTINCT a.grantee), NULL) FROM pg_catalog.pg_largeobject_metadata m
LEFT JOIN LATERAL pg_catalog.aclexplode(m.lomacl) AS a ON a.grantee <> m.lomowner
WHERE m.lomowner = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = %(role)s)
GROUP BY m.oid ORDER BY m.oid LIMIT %(batch)s
"""


def remove_lasting(conn: Any) -> int:
    """Roll back the session role's prepared transactions and unlink its large objects, :data:`LARGE_OBJECT_BATCH` per
    transaction, as that role (their owner; ``conn`` in autocommit mode). Returns the objects unlinked.

    On a hot standby nothing can be removed (nor made): the primary's own reset removes them there.
    """
    from psycopg import sql

    if conn.execute("SELECT pg_catalog.pg_is_in_recovery()").fetchone()[0]:
        return 0
    gids = [row[0] for row in conn.execute(
        "SELECT gid FROM pg_catalog.pg_prepared_xacts WHERE owner = session_user "
        "AND database = pg_catalog.current_database()"
    )]
    for gid in gids:
        conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
    role = conn.execute("SELECT session_user").fetchone()[0]
    done = 0
    while True:
        # Not conn.transaction(): its plain BEGIN would be read-only, the reader's sessions' default.
        conn.execute("BEGIN TRANSACTION READ WRITE")
        try:
            count = conn.execute(_UNLINK_BATCH, {"role": role, "batch": LARGE_OBJECT_BATCH}).fetchone()[0]
            conn.execute("COMMIT")
        except BaseException:
            if not conn.closed:
                conn.execute("ROLLBACK")
            raise
        done += int(count)
        if count < LARGE_OBJECT_BATCH:
            return done


def owner_removes(conn: Any, schema: str, role: str) -> tuple[int, list[int]]:
    """As the owner (a member of ``role``, ``conn`` in autocommit mode): take ``role``'s large objects over,
    revoking every grant on them, then unlink them, :data:`LARGE_OBJECT_BATCH` per transaction.

    Taking over touches the objects' metadata only, so a co-tenant holding one's pages does not hold it up:
    afterwards no reader session and no other role may read any of them. Returns how many were unlinked and
    the objects left (the owner's now, readable by nobody else) because a lock on them timed out; each carries
    :data:`TAKEN_OVER` and ``schema`` as its comment, so :func:`unlink_taken_over` finds it once the store is gone.
    """
    from psycopg import errors, sql

    unlinked, left = 0, []
    while rows := conn.execute(_OWNED_BATCH, {"role": role, "batch": LARGE_OBJECT_BATCH}).fetchall():
        oids = [int(oid) for oid, _ in rows]
        grantees = sorted({int(g) for _, granted in rows for g in granted})
        with conn.transaction():
            for grantee in grantees:
                who = sql.SQL("PUBLIC") if grantee == 0 else sql.SQL("{}").format(
                    sql.Identifier(conn.execute("SELECT rolname FROM pg_catalog.pg_roles WHERE oid = %s", (grantee,)).fetchone()[0])
                )
                conn.execute(sql.SQL("REVOKE ALL ON LARGE OBJECT {} FROM {}").format(
                    sql.SQL(", ").join(sql.Literal(o) for o in oids), who
                ))
            for oid in oids:
                conn.execute(sql.SQL("ALTER LARGE OBJECT {} OWNER TO CURRENT_USER").format(sql.Literal(oid)))
                conn.execute(sql.SQL("COMMENT ON LARGE OBJECT {} IS {}").format(sql.Literal(oid), sql.Literal(TAKEN_OVER + schema)))
        try:
            with conn.transaction():
                conn.execute("SELECT count(pg_catalog.lo_unlink(o)) FROM unnest(%s::oid[]) AS o", (oids,))
            unlinked += len(oids)
        except errors.LockNotAvailable:
            left.extend(oids)
    return unlinked, left


def unlink_objects(conn: Any, oids: list[int]) -> list[int]:
    """Unlink the owner's large objects ``oids`` (taken over by :func:`owner_removes`), :data:`LARGE_OBJECT_BATCH` per
    transaction; returns those left when a lock timed out (the batch that waited and every later one), so the wait
    is one lock timeout at most. Objects already gone are skipped."""
    from psycopg import errors

    for start in range(0, len(oids), LARGE_OBJECT_BATCH):
        batch = oids[start : start + LARGE_OBJECT_BATCH]
        try:
            with conn.transaction():
                conn.execute(
                    "SELECT count(pg_catalog.lo_unlink(o)) FROM unnest(%s::oid[]) AS o "
                    "WHERE o IN (SELECT oid FROM pg_catalog.pg_largeobject_metadata)",
                    (batch,),
                )
        except errors.LockNotAvailable:
            return list(oids[start:])  # one wait for a lock at most: the rest are kept, and named, too
    return []


def unlink_taken_over(conn: Any, live: Sequence[str]) -> tuple[int, list[int]]:
    """Unlink the large objects :func:`owner_removes` took over for stores that are gone (not in ``live``), as
    their owner, :data:`LARGE_OBJECT_BATCH` per transaction; returns how many, and those a lock still holds."""
    oids = [
        int(oid)
        for oid, comment in conn.execute(
            "SELECT m.oid, pg_catalog.obj_description(m.oid, 'pg_largeobject') FROM pg_catalog.pg_largeobject_metadata m "
            "WHERE m.lomowner = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = CURRENT_USER) ORDER BY m.oid"
        ).fetchall()
        if comment and comment.startswith(TAKEN_OVER) and comment[len(TAKEN_OVER) :] not in live
    ]
    left = unlink_objects(conn, oids)
    return len(oids) - len(left), left


def forbid_large_objects(conn: Any) -> None:
    """Revoke ``EXECUTE`` on :data:`LARGE_OBJECT_MAKERS` from ``PUBLIC`` (a superuser's statement, server-wide:
    the engine runs it on its embedded server only)."""
    conn.execute("REVOKE EXECUTE ON FUNCTION " + ", ".join(LARGE_OBJECT_MAKERS) + " FROM PUBLIC")
