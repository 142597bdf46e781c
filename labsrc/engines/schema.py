"""The tables, the reader role and the row-level security policies: the boundary, inside the database.

Four tables hold the corpus, each laid out so that a request reads its
caller's rows and not the others':

* ``lab_chunks``: one row per chunk (its boundary columns, its analysed
  length, its text and its exact float64 vector, for rescoring);
* ``lab_postings``: one row per (term, chunk) with the term frequency and,
  copied from the chunk, the length and the boundary columns; its key leads
  with region and tag, so a term's postings are read for the caller's region
  and tags only, and keys the date window too;
* ``lab_vectors``: the dense lane's narrow table, the boundary columns and
  one float32 ``vector(d)`` kept in the row, loaded in boundary order, so
  the exact scan reads the pages of the caller's region and tags, not a
  wide row and its TOAST for every chunk;
* ``lab_group_stats``: N and total length per boundary group
  (:mod:`labsrc.engines.groups`), kept by triggers.

All four carry the *same* policy, :data:`BOUNDARY_POLICY`, which compares the
row with the claims of the current request:

=================  =====================================  ================
claim              value                                  boundary rule
=================  =====================================  ================
``region``         the caller's region                    same region
``acl_tags``       the caller's tags                      tag held
``on_date``        the request date                       effective window
=================  =====================================  ================

This is :func:`labsrc.boundary.is_permitted`, written in SQL. The claims come
from ``lab_request()``, a ``SECURITY DEFINER`` function owned by the store's
owner: it verifies the request token the retriever signed for this session and
this transaction (:mod:`labsrc.engines.authorize`) with a key kept in
``lab_signing_key``, a table the reader role cannot read. A missing, forged,
copied or expired token yields no claims, and no claims match no row, so a
session that is not authorized sees an empty corpus (fail closed). Each claim is
read once per statement, in a scalar subquery (an *InitPlan*), not once per row.

Every B-tree index on these tables keys region, tag and the date window, so each
condition of the policy is an index condition: a scan never fetches a hidden row,
and ``EXPLAIN (ANALYZE)`` has no hidden row to count (no index on ``chunk_id`` or
``term`` alone, which would let the reader test each one for existence).

The retriever queries as a dedicated role that may log in, ``SELECT`` from the
four tables and call ``lab_request()``, and nothing else: not the owner, not a
superuser, no ``BYPASSRLS``, no role memberships. Policies are ``FORCE``d, so
they filter the owner too, and the owner has a policy of its own, ``lab_owner``
(every row: its maintenance, and the statistics triggers its writes fire); an
owner that is not a superuser would otherwise see and write no row. Neither
``SECURITY DEFINER`` function reads a table under row security, so that policy
widens nothing the reader can reach (:mod:`labsrc.engines.privileges` lists the
owner's grants). Whatever SQL a
lane runs as that role, a hidden row never reaches it: not in a result, not in a
``count(*)``, not in a ``df``. The planner statistics of the content columns
(terms, ids, text) are switched off (``SET STATISTICS 0``), so ``pg_stats``
cannot show the role hidden terms or ids as "most common values" either. Region
and tag keep theirs: without them the planner cannot size a caller's share and
picks slow plans (an exact scan instead of the HNSW index), so their values and
shares stay visible, like the row counts (see the threat model in docs/postgres.md).
"""

from __future__ import annotations

from typing import Any

from labsrc.engines.authorize import REQUEST_SETTING, RequestSigner
from labsrc.engines.groups import create_group_table
from labsrc.engines.privileges import owner_step
from labsrc.engines.teardown import drop_members, role_elsewhere
from labsrc.engines.term_dates import DF_FUNCTION
from labsrc.errors import InvalidArgument, LabError

__all__ = [
    "BOUNDARY_POLICY",
    "INDEX_BUILD_MEMORY",
    "PLAIN_VECTOR_MAX_DIM",
    "READER_FUNCTIONS",
    "READER_TABLES",
    "REQUEST_FUNCTION",
    "create_indexes",
    "create_request_function",
    "create_reader_role",
    "create_tables",
    "drop_store",
    "enable_row_security",
    "reset_role_settings",
]

#: The evidence boundary as a row-security predicate (region, ACL tag, effective window), over the verified claims.
#:
#: Every condition costs the planner one operator, so a scan evaluates all of them before any predicate of the
#: reader's own (those sort after them): which claim subqueries ran then depends on visible rows only, and
#: EXPLAIN (ANALYZE) cannot show whether a row the reader named exists among the hidden ones. Region and tag
#: are checked twice for that reason: first in forms that cost one operator and keep their place at the front
#: (``IS NOT DISTINCT FROM``, ``array_position(tags, acl_tag) IS NOT NULL``), then in the forms an index scan is keyed on
#: (``region = ...``, which the planner moves to the end with its equivalence classes, and ``acl_tag = ANY
#: (tags)``, which it costs as several operators).
BOUNDARY_POLICY = """
    region IS NOT DISTINCT FROM (SELECT (lab_request()).region)
    AND array_position(CAST((SELECT (lab_request()).acl_tags) AS text[]), acl_tag) IS NOT NULL
    AND effective_from <= (SELECT (lab_request()).on_date)
    AND COALESCE(effective_to, 'infinity'::date) >= (SELECT (lab_request()).on_date)
    AND region = (SELECT (lab_request()).region)
    AND acl_tag = ANY (CAST((SELECT (lab_request()).acl_tags) AS text[]))
"""

#: The date window's end as every boundary index keys it (NULL, still in force, sorts as infinity), written
#: exactly as in :data:`BOUNDARY_POLICY` so the planner matches the two.
WINDOW_END = "(COALESCE(effective_to, 'infinity'::date))"

#: ``lab_request()``: the claims of a token signed for this session and transaction, or NULL (no rows).
#: It runs as its owner (``SECURITY DEFINER``) with a fixed search_path, so the reader's settings cannot
#: redirect it; HMAC-SHA256 (RFC 2104) from the built-in ``sha256``, with the padded keys stored by the owner.
REQUEST_FUNCTION = """
CREATE FUNCTION {schema}.lab_request() RETURNS {schema}.lab_claims
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    token  text := current_setting({setting}, true);
    payload text;
    claims jsonb;
    pads   record;
BEGIN
    IF token IS NULL OR length(token) < 66 OR substr(token, length(token) - 64, 1) <> '.' THEN
        RETURN NULL;
    END IF;
    payload := left(token, -65);
    SELECT inner_pad, outer_pad INTO pads FROM {schema}.lab_signing_key;
    IF encode(sha256(pads.outer_pad || sha256(pads.inner_pad || convert_to(payload, 'UTF8'))), 'hex')
       IS DISTINCT FROM right(token, 64) THEN
        RETURN NULL;
    END IF;
    claims := payload::jsonb;
    IF (claims->>'pid')::int4 IS DISTINCT FROM pg_backend_pid()
       OR claims->>'xact' IS DISTINCT FROM extract(epoch FROM transaction_timestamp())::text THEN
        RETURN NULL;
    END IF;
    RETURN ROW(claims->>'region',
               ARRAY(SELECT jsonb_array_elements_text(claims->'acl_tags')),
               (claims->>'on_date')::date)::{schema}.lab_claims;
END
$fn$
"""

# The content columns whose planner statistics (pg_stats: most common values, histograms) would show hidden
# terms, ids or text. Region and tag keep theirs: the planner needs them to size a caller's share.
_NO_STATISTICS = {
    "lab_chunks": ("chunk_id", "document_id", "version", "text"),
    "lab_postings": ("term", "chunk_id"),
    "lab_vectors": ("chunk_id",),
}

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
    embedding64    float8[]                       -- the exact vector, for rescoring (NULL: no vector)
)
"""

# The dense lane's own narrow table: a row is the boundary and one float32 vector, stored in the row (PLAIN,
# never TOASTed), loaded in boundary order so a caller's rows sit on pages of their own.
_VECTORS = """
CREATE TABLE {schema}.lab_vectors (
    region         text NOT NULL,
    acl_tag        text NOT NULL,
    effective_from date NOT NULL,
    effective_to   date,
    chunk_id       text COLLATE "C" NOT NULL,
    embedding      vector({dimension}) NOT NULL
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
#
# Every index on a table the reader reads leads with region and tag and keys the date window too, so every
# condition of BOUNDARY_POLICY is an *index* condition of any scan of it. A scan then never fetches a row the
# caller may not see, and EXPLAIN (ANALYZE) has none to count: a reader who steers a scan with its own
# predicates (an id, a term, a range) and reads "Rows Removed by Filter" learns nothing about hidden rows,
# where an index keyed on chunk_id or term alone would let it test each id or term for existence
# (tests/test_engine_enumeration.py runs that attack). chunk_id is unique in the corpus (the loader checks);
# the database keys it within the boundary only.
_INDEXES = (
    # A chunk by id (the dense lane's rescoring join), and a caller's rows for counts: region, tag, id, window.
    "CREATE UNIQUE INDEX lab_chunks_key ON {schema}.lab_chunks (region, acl_tag, chunk_id, effective_from, "
    + WINDOW_END + ") INCLUDE (doc_len, effective_to)",
    # Covering: a term's postings, with everything the policy and the score read, from the index alone.
    # Region and tag lead the key, so the policy's equality conditions bound the scan: a request reads the
    # postings of its own region and tags only, and a term that only hidden chunks hold costs no more
    # than an absent one (the threat model in docs/postgres.md measures it). The window is checked inside the index.
    "CREATE UNIQUE INDEX lab_postings_key ON {schema}.lab_postings (region, acl_tag, term, effective_from, "
    + WINDOW_END + ", chunk_id) INCLUDE (tf, doc_len, effective_to)",
    # The exact dense scan reads the caller's region and tags only (a bitmap scan over contiguous pages).
    "CREATE INDEX lab_vectors_boundary ON {schema}.lab_vectors (region, acl_tag, effective_from, "
    + WINDOW_END + ") INCLUDE (effective_to)",
)

#: ``maintenance_work_mem`` while indexes are built: the postings key sorts millions of rows, and the HNSW
#: graph (100k 384-d vectors: about 200 MB) is built fastest when it fits.
INDEX_BUILD_MEMORY = "1GB"

#: Every table the reader role may read, each behind :data:`BOUNDARY_POLICY`.
READER_TABLES = ("lab_chunks", "lab_postings", "lab_vectors", "lab_group_stats")

#: Every function the reader role may call: the claims, and df over them (:mod:`labsrc.engines.term_dates`).
READER_FUNCTIONS = ("lab_request()", DF_FUNCTION)

#: Widest vector kept in the row (PLAIN storage): 4 bytes a dimension plus the row must fit in an 8 kB page.
PLAIN_VECTOR_MAX_DIM = 1900



def _sql() -> Any:
    from psycopg import sql

    return sql


def create_tables(conn: Any, schema: str, dimension: int) -> None:
    """Create the schema, pgvector (if absent) and the four tables, without indexes or policies yet."""
    sql = _sql()
    if not isinstance(dimension, int) or not 1 <= dimension <= 16000:
        raise InvalidArgument(f"vector dimension must be an int in [1, 16000] (pgvector's limit), not {dimension!r}")
    with owner_step(conn, "pgvector"):
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    ident = sql.Identifier(schema)
    with owner_step(conn, "schema"):
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
    conn.execute(sql.SQL(_CHUNKS).format(schema=ident, dimension=sql.Literal(dimension)))
    conn.execute(sql.SQL(_POSTINGS).format(schema=ident))
    conn.execute(sql.SQL(_VECTORS).format(schema=ident, dimension=sql.Literal(dimension)))
    # The exact vectors are read a few rows a request (the candidates), never searched: stored out of line
    # without compression. pglz tried (and mostly failed) to compress each 3 kB float8[] at 384-d, which made
    # COPY of 30k SciFact chunks take 9.0 s against 2.4 s without it (docs/postgres.md, "Loading").
    conn.execute(sql.SQL("ALTER TABLE {}.lab_chunks ALTER COLUMN embedding64 SET STORAGE EXTERNAL").format(ident))
    if dimension <= PLAIN_VECTOR_MAX_DIM:
        conn.execute(sql.SQL("ALTER TABLE {}.lab_vectors ALTER COLUMN embedding SET STORAGE PLAIN").format(ident))
    create_group_table(conn, schema)


def create_indexes(conn: Any, schema: str) -> None:
    """Primary keys and the covering indexes, built once the rows are in; then fresh planner statistics.

    The content columns get no statistics (``SET STATISTICS 0``): the reader role can read ``pg_stats`` for
    any column it may ``SELECT``, and their most common values would name hidden terms and ids.
    """
    sql = _sql()
    conn.execute(sql.SQL("SET maintenance_work_mem = {}").format(sql.Literal(INDEX_BUILD_MEMORY)))
    try:
        for statement in _INDEXES:
            conn.execute(sql.SQL(statement).format(schema=sql.Identifier(schema)))
    finally:
        conn.execute("RESET maintenance_work_mem")
    for table, columns in _NO_STATISTICS.items():
        for column in columns:
            conn.execute(
                sql.SQL("ALTER TABLE {}.{} ALTER COLUMN {} SET STATISTICS 0").format(
                    sql.Identifier(schema), sql.Identifier(table), sql.Identifier(column)
                )
            )
    for table in ("lab_chunks", "lab_postings", "lab_vectors", "lab_group_stats"):
        # A visibility map too, so the covering indexes answer without touching the table.
        conn.execute(sql.SQL("VACUUM (ANALYZE) {}.{}").format(sql.Identifier(schema), sql.Identifier(table)))


def create_request_function(conn: Any, schema: str, signer: RequestSigner) -> None:
    """The claims type, the owner-only signing key table and ``lab_request()`` (callable by nobody yet)."""
    sql = _sql()
    ident = sql.Identifier(schema)
    conn.execute(sql.SQL("CREATE TYPE {}.lab_claims AS (region text, acl_tags text[], on_date date)").format(ident))
    conn.execute(sql.SQL("CREATE TABLE {}.lab_signing_key (inner_pad bytea NOT NULL, outer_pad bytea NOT NULL)").format(ident))
    conn.execute(sql.SQL("REVOKE ALL ON {}.lab_signing_key FROM PUBLIC").format(ident))
    conn.execute(
        sql.SQL("INSERT INTO {}.lab_signing_key VALUES (%s, %s)").format(ident), (signer.inner_pad, signer.outer_pad)
    )
    conn.execute(sql.SQL(REQUEST_FUNCTION).format(schema=ident, setting=sql.Literal(REQUEST_SETTING)))
    conn.execute(sql.SQL("REVOKE ALL ON FUNCTION {}.lab_request() FROM PUBLIC").format(ident))


def create_reader_role(conn: Any, schema: str, role: str, password: str) -> None:
    """The retriever's role: may log in, read the four tables and call :data:`READER_FUNCTIONS`; never past RLS."""
    sql = _sql()
    with owner_step(conn, "role"):
        conn.execute(
            sql.SQL(
                "CREATE ROLE {role} LOGIN PASSWORD {pw} NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE "
                "NOREPLICATION NOINHERIT"
            ).format(role=sql.Identifier(role), pw=sql.Literal(password))
        )
    # The owner a member of its reader (it may: CREATEROLE made the role, with ADMIN on it), so an owner that is
    # not a superuser may still end the reader's sessions, remove what it made and drop what it owns (close()).
    conn.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(sql.Identifier(role)))
    conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), sql.Identifier(role)))
    for table in READER_TABLES:
        conn.execute(
            sql.SQL("GRANT SELECT ON {}.{} TO {}").format(
                sql.Identifier(schema), sql.Identifier(table), sql.Identifier(role)
            )
        )
    for function in READER_FUNCTIONS:
        conn.execute(
            sql.SQL("GRANT EXECUTE ON FUNCTION {}." + function + " TO {}").format(
                sql.Identifier(schema), sql.Identifier(role)
            )
        )


def enable_row_security(conn: Any, schema: str, role: str) -> None:
    """Switch on (and force) row-level security with :data:`BOUNDARY_POLICY` on every table the reader reads."""
    sql = _sql()
    for table in READER_TABLES:
        name = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))
        conn.execute(sql.SQL("ALTER TABLE {} ENABLE ROW LEVEL SECURITY").format(name))
        conn.execute(sql.SQL("ALTER TABLE {} FORCE ROW LEVEL SECURITY").format(name))
        conn.execute(
            sql.SQL("CREATE POLICY lab_boundary ON {} AS PERMISSIVE FOR SELECT TO {} USING ({})").format(
                name, sql.Identifier(role), sql.SQL(BOUNDARY_POLICY)
            )
        )
        # The owner reads and writes every row (its own maintenance, and the triggers that keep the statistics);
        # a superuser bypasses row security anyway, an owner that is not one would otherwise see no row.
        conn.execute(
            sql.SQL("CREATE POLICY lab_owner ON {} AS PERMISSIVE FOR ALL TO CURRENT_USER USING (true) WITH CHECK (true)").format(name)
        )


def drop_store(conn: Any, schema: str, role: str) -> None:
    """Drop a store's schema and reader role and nothing else, in one transaction; a refusal drops nothing.

    Nothing goes with ``CASCADE`` (:func:`~labsrc.engines.teardown.drop_members`), so another role's view on
    ``lab_chunks`` makes PostgreSQL refuse. The role's sessions are ended in this database only, and only if it
    has none in another and owns or holds nothing outside this one (:func:`~labsrc.engines.teardown.role_elsewhere`);
    if it has, :class:`LabError` says so before anything is touched.
    """
    sql = _sql()
    with conn.transaction():
        found = conn.execute("SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = %s", (role,)).fetchone() is not None
        if found and (elsewhere := role_elsewhere(conn, role)):
            raise LabError(f"left {schema} and role {role} in place: the role has {', '.join(elsewhere)}")
        if found:
            conn.execute(
                "SELECT pg_catalog.pg_terminate_backend(pid, 5000) FROM pg_catalog.pg_stat_activity "
                "WHERE usename = %s AND datname = pg_catalog.current_database()",
                (role,),
            )
        drop_members(conn, schema)
        if found:
            reset_role_settings(conn, role)
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))  # no CASCADE: its own objects only
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def reset_role_settings(conn: Any, role: str) -> int:
    """Remove every ``ALTER ROLE role [IN DATABASE db] SET`` default; returns how many there were.

    PostgreSQL lets any role set its own session defaults, and no privilege can take that away. The store
    calls this (as the owner) when a new reader session finds defaults, so they never reach a later session.
    """
    sql = _sql()
    rows = conn.execute(
        "SELECT s.setdatabase, d.datname FROM pg_catalog.pg_db_role_setting s "
        "JOIN pg_catalog.pg_roles r ON r.oid = s.setrole LEFT JOIN pg_catalog.pg_database d ON d.oid = s.setdatabase "
        "WHERE r.rolname = %s",
        (role,),
    ).fetchall()
    for database_oid, database in rows:
        if database_oid == 0:
            conn.execute(sql.SQL("ALTER ROLE {} RESET ALL").format(sql.Identifier(role)))
        elif database is not None:
            conn.execute(
                sql.SQL("ALTER ROLE {} IN DATABASE {} RESET ALL").format(sql.Identifier(role), sql.Identifier(database))
            )
    return len(rows)
