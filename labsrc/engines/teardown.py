"""What dropping a store may touch: its schema's own objects and its reader role, in its own database, nothing else.

:func:`~labsrc.engines.schema.drop_store` (used by ``close()`` and by the
orphan cleaner, :mod:`labsrc.engines.orphans`) asks these three questions:

* :func:`outside_dependents`: which objects outside the schema depend on
  something in it (another role's view on ``lab_chunks``)? ``DROP SCHEMA ...
  CASCADE`` would drop them too, so the cleaner refuses and names them;
* :func:`drop_members`: drop the schema's tables, routines and composite types
  by name, then the empty schema, never with ``CASCADE``, so PostgreSQL itself
  refuses if such an object appeared since the question was asked;
* :func:`role_elsewhere`: does the reader role have a session in another
  database, or own or hold anything outside this one? Roles are cluster-wide
  and ``pg_stat_activity`` spans databases, so a store is dropped from its own
  database and its role only when nothing elsewhere would feel it.
"""

from __future__ import annotations

from typing import Any

from labsrc.engines.errors import first_line
from labsrc.errors import LabError

__all__ = ["drop_members", "outside_dependents", "role_elsewhere"]

# Everything DROP SCHEMA ... CASCADE would take that belongs to the schema: its members (a dependency on the
# namespace) and their parts (indexes, TOAST tables, policies, triggers, row types: auto or internal
# dependencies). Then every dependency on one of those from outside, shown as the outside object's owner (a view,
# not its _RETURN rule; a table, not its trigger).
_OUTSIDE_DEPENDENTS = """
WITH RECURSIVE inside(classid, objid) AS (
    SELECT 'pg_catalog.pg_namespace'::regclass::oid, n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = %(schema)s
  UNION
    SELECT d.classid, d.objid FROM pg_catalog.pg_depend d JOIN inside i ON d.refclassid = i.classid AND d.refobjid = i.objid
    WHERE i.classid = 'pg_catalog.pg_namespace'::regclass OR d.deptype IN ('a', 'i')
)
SELECT DISTINCT
    (pg_catalog.pg_identify_object(COALESCE(up.refclassid, d.classid), COALESCE(up.refobjid, d.objid), 0)).type,
    (pg_catalog.pg_identify_object(COALESCE(up.refclassid, d.classid), COALESCE(up.refobjid, d.objid), 0)).identity,
    (pg_catalog.pg_identify_object(d.refclassid, d.refobjid, 0)).identity
FROM pg_catalog.pg_depend d
JOIN inside i ON d.refclassid = i.classid AND d.refobjid = i.objid
LEFT JOIN pg_catalog.pg_depend up ON up.classid = d.classid AND up.objid = d.objid AND up.deptype IN ('a', 'i')
    AND NOT EXISTS (SELECT 1 FROM inside k WHERE k.classid = up.refclassid AND k.objid = up.refobjid)
WHERE NOT EXISTS (SELECT 1 FROM inside j WHERE j.classid = d.classid AND j.objid = d.objid)
"""

# The schema's members, in the order they can be dropped without CASCADE: views and materialized views the
# owner built on the store (notebook 12 does), tables (with their indexes, policies, triggers and owned
# sequences), sequences of their own, then routines, then composite types. Identities are quoted by the server.
_MEMBERS = """
SELECT m.kind, (pg_catalog.pg_identify_object(m.classid, m.objid, 0)).identity
FROM pg_catalog.pg_namespace n, LATERAL (
    SELECT 0, CASE c.relkind WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'VIEW' END, 'pg_catalog.pg_class'::regclass, c.oid
    FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid AND c.relkind IN ('v', 'm')
  UNION ALL
    SELECT 1, 'TABLE', 'pg_catalog.pg_class'::regclass, c.oid FROM pg_catalog.pg_class c
    WHERE c.relnamespace = n.oid AND c.relkind IN ('r', 'p')
  UNION ALL
    SELECT 1, 'SEQUENCE', 'pg_catalog.pg_class'::regclass, c.oid FROM pg_catalog.pg_class c
    WHERE c.relnamespace = n.oid AND c.relkind = 'S' AND NOT EXISTS (
        SELECT 1 FROM pg_catalog.pg_depend d WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid
        AND d.deptype IN ('a', 'i'))
  UNION ALL
    SELECT 2, 'ROUTINE', 'pg_catalog.pg_proc'::regclass, p.oid FROM pg_catalog.pg_proc p WHERE p.pronamespace = n.oid
  UNION ALL
    SELECT 3, 'TYPE', 'pg_catalog.pg_type'::regclass, c.reltype FROM pg_catalog.pg_class c
    WHERE c.relnamespace = n.oid AND c.relkind = 'c'
) m(step, kind, classid, objid)
WHERE n.nspname = %s
ORDER BY m.step, 2
"""

# A role's sessions in other databases, and what it owns or was granted outside this one (pg_shdepend's dbid is
# the database of the dependent object, 0 for shared objects such as databases and tablespaces).
_ROLE_ELSEWHERE = """
SELECT 'a session in database ' || COALESCE(a.datname, '(none)') FROM pg_catalog.pg_stat_activity a
WHERE a.usename = %(role)s AND a.datname IS DISTINCT FROM pg_catalog.current_database()
UNION
SELECT CASE WHEN s.dbid = 0 THEN 'privileges on shared objects (databases, tablespaces)'
            ELSE 'objects or privileges in database ' || COALESCE(d.datname, s.dbid::text) END
FROM pg_catalog.pg_shdepend s
JOIN pg_catalog.pg_roles r ON r.oid = s.refobjid AND r.rolname = %(role)s
LEFT JOIN pg_catalog.pg_database d ON d.oid = s.dbid
WHERE s.refclassid = 'pg_catalog.pg_authid'::regclass
  AND s.dbid <> (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database())
"""


def outside_dependents(conn: Any, schema: str) -> list[str]:
    """Every object outside ``schema`` that depends on something in it, one phrase each, sorted:
    ``view other.v depends on lab_1234abcd.lab_chunks``. Empty: dropping the schema touches nothing else."""
    rows = conn.execute(_OUTSIDE_DEPENDENTS, {"schema": schema}).fetchall()
    return sorted({f"{kind} {identity} depends on {target}" for kind, identity, target in rows})


def drop_members(conn: Any, schema: str) -> None:
    """Drop ``schema``'s views, tables, sequences, routines and composite types by name, then the schema, all
    without ``CASCADE``.

    Anything else depending on them, or left in the schema, makes PostgreSQL refuse: :class:`LabError` names it
    (from the server's own list), and nothing is dropped (one transaction, or a savepoint in the caller's). A
    schema that is gone is no error.
    """
    from psycopg import errors, sql

    with conn.transaction():
        pending = [tuple(row) for row in conn.execute(_MEMBERS, (schema,)).fetchall()]
        try:
            while pending:
                # Each kind in one statement (tables, then routines, then types: the store's own order), then what
                # is left one object at a time, each in a savepoint; members that depend on each other in another
                # order go in a later round. A round that drops nothing meets something outside: refuse.
                left, refused = len(pending), None
                order = ("MATERIALIZED VIEW", "VIEW", "TABLE", "SEQUENCE", "ROUTINE", "TYPE")
                kinds = [[m for m in pending if m[0] == kind] for kind in order]
                for batch in [*kinds, *([m] for m in pending)]:
                    if not batch or any(m not in pending for m in batch):
                        continue
                    try:
                        with conn.transaction():
                            names = sql.SQL(", ").join(sql.SQL(name) for _, name in batch)
                            conn.execute(sql.SQL("DROP " + batch[0][0] + " {}").format(names))
                        pending = [m for m in pending if m not in batch]
                    except errors.DependentObjectsStillExist as exc:
                        refused = refused or exc
                if len(pending) == left and refused is not None:
                    raise refused
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {}").format(sql.Identifier(schema)))
        except errors.DependentObjectsStillExist as exc:
            detail = "; ".join(line.strip() for line in (exc.diag.message_detail or first_line(exc)).splitlines())
            raise LabError(f"left {schema} in place: {detail}") from exc


def role_elsewhere(conn: Any, role: str) -> list[str]:
    """What ``role`` has outside ``conn``'s database, sorted: sessions in other databases, objects or privileges
    there or on shared objects. Empty: ending its sessions here and dropping it affects this database only."""
    return sorted(row[0] for row in conn.execute(_ROLE_ELSEWHERE, {"role": role}).fetchall())
