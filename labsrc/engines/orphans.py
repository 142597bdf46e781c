"""Orphaned stores: a schema and reader role left on someone else's server by a process that died.

A :class:`~labsrc.engines.store.PostgresStore` on a server given by DSN drops
its ``lab_<8 hex>`` schema (every chunk's text, hidden ones included) and its
LOGIN role ``lab_<8 hex>_reader`` in ``close()``. A process killed by
``SIGTERM`` or ``SIGKILL``, or one that exits without ``close()``, never gets
there, and the copy stays on a server that is not ours to delete.

Nothing in the dead process can fix that, so the next one does. Each store
marks what it makes:

* its owner session (the store's ``admin`` connection, which lives as long as
  the store) takes a session-level advisory lock keyed on the schema's name
  (:func:`lock_key`). PostgreSQL releases it when that session ends, and the
  session ends when the client dies. So "is the owner alive?" is "is the lock
  held?", a question any session can ask through ``pg_locks``, with no clocks,
  heartbeats or guesses about host names and pids;
* a comment on the schema (:func:`mark_owned`), starting with
  :data:`MARKER_PREFIX`, names its reader role and who made it;
* a comment on the reader role (:func:`mark_reader`), starting with
  :data:`READER_MARKER_PREFIX`, names the schema, the database and the owner.

A comment is only text, and anyone who may create a schema can copy one. So a
schema is an orphan (:func:`find_orphans`) only if, besides its name and the
marker, it is *owned by the cleaner's own role* (``nspowner`` is
``current_user``; a superuser "has" every role, so ``pg_has_role`` would prove
nothing), no session in this database holds its lock, and its reader role, if
it has one yet, was granted ``USAGE`` on the schema by the schema's owner and
carries a reader marker for this schema, this database and this owner (only a
role with ``ADMIN`` on the reader role can write that comment). A store made by
alice is therefore cleaned by alice: :func:`clean_orphans` reports the
schemas of other owners that look orphaned (``owned by alice, not by you``)
and leaves them.

:func:`clean_orphans` drops each orphan holding its lock (two cleaners never
race), and refuses, leaving everything in place, when an object outside the
schema depends on something in it (:func:`~labsrc.engines.teardown.outside_dependents`:
``view other.v depends on lab_1234abcd.lab_chunks``) or when the role has a
session, objects or privileges in another database, or when another role
holds a lock on what the store made (:func:`~labsrc.engines.owner.drop_or_say`
names it; every statement gives up after the connection's lock timeout). Anyone
may take any advisory lock: one held by a role other than the schema's
owner is not a live store's session, and the schema is reported as kept while
it is held. It drops with
:func:`~labsrc.engines.schema.drop_store`, which ends the role's sessions in
this database only and never uses ``CASCADE``. ``labsrc engines clean --dsn
URL`` runs it from the command line; a store runs :func:`drop_orphans` when
it starts.

Limits: advisory locks belong to one database, so a store is checked in the
database it was created in (``conn``'s). A connection pooler in transaction
mode (PgBouncer) does not keep session locks; point the DSN at the server. A
client whose machine vanished (no FIN, no RST) holds its lock until the
server's TCP keepalive gives up; its schema is an orphan only after that. A
store made before reader markers existed leaves a role the cleaner will not
vouch for: it is reported, and dropped by hand.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import socket
import warnings
from dataclasses import dataclass
from typing import Any

from labsrc.engines.errors import first_line
from labsrc.engines.lasting import unlink_taken_over
from labsrc.engines.owner import drop_or_say
from labsrc.engines.teardown import outside_dependents
from labsrc.errors import InvalidArgument, LabError

__all__ = [
    "LOCK_CLASS",
    "MARKER_PREFIX",
    "READER_MARKER_PREFIX",
    "Cleaned",
    "Skipped",
    "clean_orphans",
    "drop_orphans",
    "find_orphans",
    "is_store_schema",
    "lock_key",
    "mark_owned",
    "mark_reader",
    "reader_role",
]

#: The first key of every store's advisory lock: ``b"labs"`` read as a big-endian int4.
LOCK_CLASS = int.from_bytes(b"labs", "big")

#: How the comment on a store's schema begins (a JSON object follows).
MARKER_PREFIX = "labsrc store "

#: How the comment on a store's reader role begins (a JSON object naming schema, database and owner follows).
READER_MARKER_PREFIX = "labsrc store reader "

# Every schema named like a store's, with what proves (or disproves) it is the cleaner's: its marker, its owner,
# whether that owner is the cleaner's role, and its reader role: whether it exists, whether the schema's owner
# granted it USAGE on the schema, and the role's marker.
_CANDIDATES = """
SELECT n.nspname, pg_catalog.obj_description(n.oid, 'pg_namespace'), pg_catalog.pg_get_userbyid(n.nspowner),
       n.nspowner = (SELECT u.oid FROM pg_catalog.pg_roles u WHERE u.rolname = CURRENT_USER),
       r.oid IS NOT NULL,
       EXISTS (SELECT 1 FROM pg_catalog.aclexplode(n.nspacl) a
               WHERE a.grantee = r.oid AND a.grantor = n.nspowner AND a.privilege_type = 'USAGE'),
       pg_catalog.shobj_description(r.oid, 'pg_authid')
FROM pg_catalog.pg_namespace n LEFT JOIN pg_catalog.pg_roles r ON r.rolname = n.nspname || '_reader'
WHERE n.nspname ~ '^lab_[0-9a-f]{8}$' ORDER BY n.nspname
"""


@dataclass(frozen=True)
class Skipped:
    """A schema that looks orphaned but was left in place, and why, in one line."""

    schema: str
    reason: str
    #: Whether the cleaner's role owns it (a refusal to drop its own orphan), not another role (theirs to clean).
    yours: bool


@dataclass(frozen=True)
class Cleaned:
    """What :func:`clean_orphans` did: schemas dropped, reader roles dropped with them, and schemas left."""

    dropped: tuple[str, ...]
    #: A store killed before it created its role (the last step of loading) leaves a schema without one.
    roles: tuple[str, ...]
    skipped: tuple[Skipped, ...]
    #: Large objects a store's owner took over from its reader (:func:`~labsrc.engines.lasting.owner_removes`)
    #: and unlinked now that the store is gone; and those another role's lock still holds.
    objects: int = 0
    objects_held: tuple[int, ...] = ()


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


def mark_reader(conn: Any, schema: str) -> None:
    """Mark ``schema``'s reader role as the store's: a comment naming the schema, ``conn``'s database and user.

    Call it as the store's owner right after creating the role. PostgreSQL lets only a superuser or a role with
    ``ADMIN`` on the reader role (its creator) comment on it, so, unlike the schema's marker, a copy made by
    someone else cannot vouch for a role: the cleaner drops a reader role only if its marker names this schema,
    this database and the cleaner's role.
    """
    if not is_store_schema(schema):
        raise InvalidArgument(f"schema must be named lab_ and 8 hex digits (a store's), not {schema!r}")
    from psycopg import sql

    database, owner = conn.execute("SELECT pg_catalog.current_database(), CURRENT_USER").fetchone()
    marker = READER_MARKER_PREFIX + json.dumps({"database": database, "owner": owner, "schema": schema}, sort_keys=True)
    with conn.transaction():
        conn.execute(sql.SQL("COMMENT ON ROLE {} IS {}").format(sql.Identifier(reader_role(schema)), sql.Literal(marker)))


def find_orphans(conn: Any) -> list[str]:
    """The store schemas in ``conn``'s database that ``conn``'s role made and whose owner is gone, sorted.

    Only schemas named like a store's, carrying the lab's marker for their own reader role, owned by
    ``conn``'s role itself (not merely one it is a member of: a superuser is a member of all), whose advisory
    lock no session holds (``conn``'s own locks count as held: a store never finds itself), and whose reader
    role, if it exists, is proven the store's (``USAGE`` granted by the schema's owner, and :func:`mark_reader`'s
    marker for this schema, database and owner). Whether something outside depends on it is asked when it is
    dropped (:func:`clean_orphans`).
    """
    return _survey(conn)[0]


def clean_orphans(conn: Any) -> Cleaned:
    """Drop every orphan :func:`find_orphans` finds, with its reader role; report what was dropped and left.

    Run it as the role that made the stores: a store alice made is cleaned by alice, and schemas of other owners
    that look orphaned are reported as skipped (``owned by alice, not by you``), never touched. Each orphan is
    dropped in its own transaction while ``conn`` holds its lock (a second cleaner skips it), unless an object
    outside the schema depends on something in it (skipped, naming the objects) or its role has sessions,
    objects or privileges in another database (skipped, naming where): nothing of either is ever dropped or
    ended. A lost connection raises.
    """
    import psycopg

    orphans, skipped = _survey(conn)
    dropped: list[str] = []
    roles: list[str] = []
    for schema in orphans:
        first, second = lock_key(schema)
        if not conn.execute("SELECT pg_catalog.pg_try_advisory_lock(%s::int4, %s::int4)", (first, second)).fetchone()[0]:
            continue  # another cleaner is dropping it right now
        role = reader_role(schema)
        try:
            blocking = outside_dependents(conn, schema)
            if blocking:
                skipped.append(Skipped(schema, f"{'; '.join(blocking)} (nothing dropped)", True))
                continue
            had_role = conn.execute("SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = %s", (role,)).fetchone()
            held_up = drop_or_say(conn, schema, role)  # ends the role's sessions in this database first, as close() does
            if held_up:
                skipped.append(Skipped(schema, f"kept with role {role}: {held_up}", True))
                continue
            dropped.append(schema)
            roles.extend([role] if had_role else [])
        except psycopg.OperationalError:
            raise
        except (psycopg.DatabaseError, LabError) as exc:
            skipped.append(Skipped(schema, first_line(exc), True))
        finally:
            if not conn.closed:
                conn.execute("SELECT pg_catalog.pg_advisory_unlock(%s::int4, %s::int4)", (first, second))
    live = [row[0] for row in conn.execute("SELECT nspname FROM pg_catalog.pg_namespace WHERE nspname ~ '^lab_[0-9a-f]{8}$'")]
    objects, held = unlink_taken_over(conn, live)
    return Cleaned(tuple(dropped), tuple(roles), tuple(sorted(skipped, key=lambda each: each.schema)), objects, tuple(held))


def drop_orphans(conn: Any) -> list[str]:
    """:func:`clean_orphans`, returning the schemas dropped, sorted; a :class:`RuntimeWarning` for each of
    ``conn``'s own orphans it had to leave (other owners' schemas are theirs to clean, and pass in silence)."""
    cleaned = clean_orphans(conn)
    for each in cleaned.skipped:
        if each.yours:
            warnings.warn(f"orphaned schema {each.schema} was not dropped: {each.reason}", RuntimeWarning, stacklevel=2)
    return list(cleaned.dropped)


def _survey(conn: Any) -> tuple[list[str], list[Skipped]]:
    """The orphans ``conn``'s role may drop, and the unlocked, marked schemas it may not, each with why."""
    rows = conn.execute(_CANDIDATES).fetchall()
    marked = [row for row in rows if is_store_schema(row[0]) and _is_marker_for(row[1], row[0])]
    if not marked:
        return [], []
    database, me = conn.execute("SELECT pg_catalog.current_database(), CURRENT_USER").fetchone()
    held = {
        (int(classid), int(objid)): (user, pid)
        for classid, objid, user, pid in conn.execute(
            "SELECT l.classid::int8, l.objid::int8, a.usename, l.pid FROM pg_catalog.pg_locks l "
            "LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.objsubid = 2 "
            "AND l.granted AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database())"
        ).fetchall()
    }
    orphans: list[str] = []
    skipped: list[Skipped] = []
    for name, _, owner, mine, has_role, granted, role_comment in marked:
        holder = held.get(tuple(key & 0xFFFFFFFF for key in lock_key(name)))  # pg_locks shows the int4 keys as oids
        if holder is not None and holder[0] in (owner, None):  # None: a session whose role pg_stat_activity hides
            continue  # a live store's: its owner's session holds the lock
        if holder is not None:  # anyone may take any advisory lock: a store's owner session is its owner's role
            reason = f"its lock is held by role {holder[0]} (pid {holder[1]}), not by a session of its owner {owner}; kept while it is"
            skipped.append(Skipped(name, reason, bool(mine)))
            continue
        if not mine:
            skipped.append(Skipped(name, f"owned by {owner}, not by you ({me}); run clean as {owner}", False))
            continue
        reason = _role_doubt(name, has_role, granted, role_comment, database, me)
        if reason is None:
            orphans.append(name)
        else:
            skipped.append(Skipped(name, reason, True))
    return orphans, skipped


def _role_doubt(schema: str, has_role: bool, granted: bool, comment: str | None, database: str, me: str) -> str | None:
    """Why ``schema``'s reader role may not be the store's (None: it is, or there is none yet)."""
    role = reader_role(schema)
    if not has_role:
        return None  # the store died before it created its role (the last step of loading): the schema alone
    marker: object = None
    if comment and comment.startswith(READER_MARKER_PREFIX):
        try:
            marker = json.loads(comment[len(READER_MARKER_PREFIX) :])
        except ValueError:
            marker = None
    if not granted or not isinstance(marker, dict):
        why = "has no USAGE on the schema from its owner" if not granted else "carries no labsrc reader marker"
        return f"role {role} {why}, so it may not be the store's; drop both by hand if they are (nothing dropped)"
    if marker.get("database") != database:
        return f"role {role} belongs to a store in database {marker.get('database')}, not {database}; run clean there"
    if marker.get("schema") != schema or marker.get("owner") != me:
        return f"role {role} is marked for {marker.get('schema')} by {marker.get('owner')}, not for this schema by you"
    return None


def _is_marker_for(comment: str | None, schema: str) -> bool:
    """Whether ``comment`` is :func:`mark_owned`'s marker for ``schema`` (a JSON object naming its reader role)."""
    if not comment or not comment.startswith(MARKER_PREFIX):
        return False
    try:
        marker = json.loads(comment[len(MARKER_PREFIX) :])
    except ValueError:
        return False
    return isinstance(marker, dict) and marker.get("reader") == reader_role(schema)
