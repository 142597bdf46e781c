"""The tables, the reader role and the row-level security policies: the boundary, inside the database.

Two tables hold the corpus. ``lab_chunks`` has one row per chunk (its boundary
columns, its analysed length, its text and its vector); ``lab_postings`` has one
row per (term, chunk) with the term frequency and, copied from the chunk, the
length and the boundary columns. Both carry the *same* policy,
:data:`BOUNDARY_POLICY`, which compares the row with three per-request
settings the retriever writes with ``set_config(name, value, true)`` (that is,
``SET LOCAL``: they vanish when the request's transaction ends):

=================  =====================================  ================
setting            value                                  boundary rule
=================  =====================================  ================
``lab.region``     the caller's region                    same region
``lab.acl_tags``   the caller's tags, a ``text[]`` literal  tag held
``lab.on_date``    the request date, ISO                  effective window
=================  =====================================  ================

This is :func:`labsrc.boundary.is_permitted`, written in SQL. An unset or
empty setting matches nothing, so a session that forgot to authorize sees an
empty corpus (fail closed). Each setting is read once per statement, in a
scalar subquery (an *InitPlan*), not once per row.

The retriever queries as a dedicated role that may log in and ``SELECT`` from
the two tables and nothing else: not the owner, not a superuser, no
``BYPASSRLS``. Policies are ``FORCE``d, so even the owner's own queries are
filtered (the owner has no policy, so it sees no rows; loading happens before
the policies are switched on). Whatever SQL a lane runs as that role, a hidden
row never reaches it: not in a result, not in a ``count(*)``, not in a ``df``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from labsrc.errors import InvalidArgument
from labsrc.records.policy import Caller

__all__ = [
    "BOUNDARY_POLICY",
    "REQUEST_SETTINGS",
    "apply_request",
    "create_indexes",
    "create_reader_role",
    "create_tables",
    "drop_store",
    "enable_row_security",
]

#: The per-request settings the policies read, in the order :func:`apply_request` sets them.
REQUEST_SETTINGS = ("lab.region", "lab.acl_tags", "lab.on_date")

#: The evidence boundary as a row-security predicate (region, ACL tag, effective window).
BOUNDARY_POLICY = """
    region = (SELECT nullif(current_setting('lab.region', true), ''))
    AND acl_tag = ANY (CAST((SELECT nullif(current_setting('lab.acl_tags', true), '')) AS text[]))
    AND effective_from <= (SELECT nullif(current_setting('lab.on_date', true), '')::date)
    AND (effective_to IS NULL OR (SELECT nullif(current_setting('lab.on_date', true), '')::date) <= effective_to)
"""

_CHUNKS = """
CREATE TABLE {schema}.lab_chunks (
    chunk_id       text COLLATE "C" NOT NULL,     -- "C": byte order, i.e. Python's str order, for tie-breaks
    document_id    text NOT NULL,
    version        text NOT NULL,
    region         text NOT NULL,
    acl_tag        text NOT NULL,
    effective_from date NOT NULL,
    effective_to   date,                          -- inclusive; NULL = still in force
    doc_len        int4 NOT NULL,                 -- analysed terms, duplicates counted (BM25's |d|)
    text           text NOT NULL,
    embedding64    float8[],                      -- the exact vector, for rescoring
    embedding      vector({dimension}) GENERATED ALWAYS AS (embedding64::vector({dimension})) STORED
)
"""

_POSTINGS = """
CREATE TABLE {schema}.lab_postings (
    term           text COLLATE "C" NOT NULL,
    chunk_id       text COLLATE "C" NOT NULL,
    tf             int4 NOT NULL,                 -- occurrences of term in the chunk
    doc_len        int4 NOT NULL,
    region         text NOT NULL,
    acl_tag        text NOT NULL,
    effective_from date NOT NULL,
    effective_to   date
)
"""

# Built after the bulk load (faster than maintaining them row by row during COPY).
_INDEXES = (
    "ALTER TABLE {schema}.lab_chunks ADD PRIMARY KEY (chunk_id)",
    # Covering: a term's postings, with everything the policy and the score read, from the index alone.
    "ALTER TABLE {schema}.lab_postings ADD PRIMARY KEY (term, chunk_id)"
    " INCLUDE (tf, doc_len, region, acl_tag, effective_from, effective_to)",
    # Covering the boundary columns and the length: N and avgdl for a caller are an index-only scan.
    "CREATE INDEX lab_chunks_boundary ON {schema}.lab_chunks (region, acl_tag, effective_from)"
    " INCLUDE (effective_to, doc_len, chunk_id)",
)



def _sql() -> Any:
    from psycopg import sql

    return sql


def create_tables(conn: Any, schema: str, dimension: int) -> None:
    """Create the schema, pgvector (if absent) and the two tables, without indexes or policies yet."""
    sql = _sql()
    if not isinstance(dimension, int) or not 1 <= dimension <= 16000:
        raise InvalidArgument(f"vector dimension must be an int in [1, 16000] (pgvector's limit), not {dimension!r}")
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    ident = sql.Identifier(schema)
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
    conn.execute(sql.SQL(_CHUNKS).format(schema=ident, dimension=sql.Literal(dimension)))
    conn.execute(sql.SQL(_POSTINGS).format(schema=ident))


def create_indexes(conn: Any, schema: str) -> None:
    """Primary keys and the covering indexes, built once the rows are in; then fresh planner statistics."""
    sql = _sql()
    for statement in _INDEXES:
        conn.execute(sql.SQL(statement).format(schema=sql.Identifier(schema)))
    for table in ("lab_chunks", "lab_postings"):
        # A visibility map too, so the covering indexes answer without touching the table.
        conn.execute(sql.SQL("VACUUM (ANALYZE) {}.{}").format(sql.Identifier(schema), sql.Identifier(table)))


def create_reader_role(conn: Any, schema: str, role: str, password: str) -> None:
    """The retriever's role: may log in and read the two tables; nothing else, and never past RLS."""
    sql = _sql()
    conn.execute(
        sql.SQL(
            "CREATE ROLE {role} LOGIN PASSWORD {pw} NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE "
            "NOREPLICATION NOINHERIT"
        ).format(role=sql.Identifier(role), pw=sql.Literal(password))
    )
    conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), sql.Identifier(role)))
    for table in ("lab_chunks", "lab_postings"):
        conn.execute(
            sql.SQL("GRANT SELECT ON {}.{} TO {}").format(
                sql.Identifier(schema), sql.Identifier(table), sql.Identifier(role)
            )
        )


def enable_row_security(conn: Any, schema: str, role: str) -> None:
    """Switch on (and force) row-level security with :data:`BOUNDARY_POLICY` on both tables."""
    sql = _sql()
    for table in ("lab_chunks", "lab_postings"):
        name = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))
        conn.execute(sql.SQL("ALTER TABLE {} ENABLE ROW LEVEL SECURITY").format(name))
        conn.execute(sql.SQL("ALTER TABLE {} FORCE ROW LEVEL SECURITY").format(name))
        conn.execute(
            sql.SQL("CREATE POLICY lab_boundary ON {} AS PERMISSIVE FOR SELECT TO {} USING ({})").format(
                name, sql.Identifier(role), sql.SQL(BOUNDARY_POLICY)
            )
        )


def drop_store(conn: Any, schema: str, role: str) -> None:
    """Drop the schema (tables, policies, indexes) and the reader role."""
    sql = _sql()
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    if exists:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def apply_request(conn: Any, caller: Caller, on_date: dt.date) -> None:
    """Write the caller and date into the open transaction's settings (``SET LOCAL``).

    Must run inside the request's transaction; the settings end with it.
    """
    if not isinstance(caller, Caller):
        raise InvalidArgument(f"caller must be a Caller, not {type(caller).__name__}")
    if not isinstance(on_date, dt.date) or isinstance(on_date, dt.datetime):
        raise InvalidArgument(f"on_date must be a datetime.date, not {type(on_date).__name__}")
    conn.execute(
        "SELECT set_config('lab.region', %s, true), set_config('lab.acl_tags', %s::text[]::text, true), "
        "set_config('lab.on_date', %s, true)",
        (caller.region, sorted(caller.acl_tags), on_date.isoformat()),
    )
