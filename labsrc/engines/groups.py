"""A caller's N and total length without a scan: statistics kept per boundary group, behind the same RLS.

A *boundary group* is every chunk that shares ``(region, acl_tag,
effective_from, effective_to)``. The boundary treats a group as one: on any
date, any caller sees all of its chunks or none of them. So ``lab_group_stats``
keeps one row per group (its chunk count and the sum of their analysed lengths),
puts :data:`~labsrc.engines.schema.BOUNDARY_POLICY` on it, and a caller's
statistics are the sums over the rows the policy lets it read::

    N         = Σ n_docs     over the caller's visible groups
    total_len = Σ total_len  over the caller's visible groups      (avgdl = total_len / N)

Exact by construction: a visible group holds only permitted chunks, and every
permitted chunk is in a visible group. A row never mixes a hidden chunk into a
count the reader can read, so ``SELECT * FROM lab_group_stats`` shows the
reader nothing the base tables would not.

Each row also carries a ``version``, drawn at random whenever a chunk, posting
or vector of the group is written: a pooled session is bound to the versions of
the groups its first request saw (:mod:`labsrc.engines.sessions`).

The rows are filled once after the bulk load and then kept by statement-level
triggers on ``lab_chunks`` (``INSERT``, ``DELETE`` and ``UPDATE``, through
transition tables), which run inside the writing statement's own transaction:
a reader's snapshot sees the chunks and the statistics of the same commits.

Why not df(t) too: a (group, term) table is as large as the postings when
groups are small. On the benchmark corpus (SciFact cycled to 100k chunks with a
random window per chunk: 25,949 groups) it holds 8.8 M rows against 11.5 M
postings. df comes from :mod:`labsrc.engines.term_dates` instead: one row per
(region, tag, term) with its postings' sorted dates, read by a function that
applies the claims.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GROUP_KEY", "NEW_VERSION", "create_group_table", "create_group_triggers", "fill_group_stats"]

#: The columns a boundary group shares: exactly the columns the boundary policy reads.
GROUP_KEY = ("region", "acl_tag", "effective_from", "effective_to")

_TABLE = """
CREATE TABLE {schema}.lab_group_stats (
    region         text NOT NULL,
    acl_tag        text NOT NULL,
    effective_from date NOT NULL,
    effective_to   date,
    n_docs         int8 NOT NULL,
    total_len      int8 NOT NULL,
    version        int8 NOT NULL      -- drawn at random whenever a chunk of the group changes (sessions.py)
)
"""

# The window's end keyed as the boundary policy reads it (NULL, still in force, as infinity: one group, not
# many), so the policy's every condition is an index condition and a scan never fetches a hidden group
# (labsrc.engines.schema explains why every reader index is built this way).
_KEY = """
CREATE UNIQUE INDEX lab_group_stats_key ON {schema}.lab_group_stats
    (region, acl_tag, effective_from, (COALESCE(effective_to, 'infinity'::date))) INCLUDE (n_docs, total_len, effective_to, version)
"""

#: A group's new version: random, so the numbers a reader sees say nothing about changes to hidden groups
#: (a counter would count them). 4e18 stays inside int8 however ``random()`` rounds.
NEW_VERSION = "(pg_catalog.random() * 4e18)::int8"

_CONFLICT = "ON CONFLICT (region, acl_tag, effective_from, (COALESCE(effective_to, 'infinity'::date)))"

_FILL = """
INSERT INTO {schema}.lab_group_stats
SELECT region, acl_tag, effective_from, effective_to, count(*), sum(doc_len), {version} FROM {schema}.lab_chunks
GROUP BY 1, 2, 3, 4
"""

# One function for the three triggers; each branch reads only the transition tables its trigger defines.
_APPLY = """
CREATE FUNCTION {schema}.lab_group_stats_apply() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        INSERT INTO {schema}.lab_group_stats AS g
        SELECT region, acl_tag, effective_from, effective_to, -count(*), -sum(doc_len), {version} FROM old_rows
        GROUP BY 1, 2, 3, 4
        {conflict}
        DO UPDATE SET n_docs = g.n_docs + excluded.n_docs, total_len = g.total_len + excluded.total_len,
                      version = excluded.version;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO {schema}.lab_group_stats AS g
        SELECT region, acl_tag, effective_from, effective_to, count(*), sum(doc_len), {version} FROM new_rows
        GROUP BY 1, 2, 3, 4
        {conflict}
        DO UPDATE SET n_docs = g.n_docs + excluded.n_docs, total_len = g.total_len + excluded.total_len,
                      version = excluded.version;
    END IF;
    DELETE FROM {schema}.lab_group_stats WHERE n_docs = 0;  -- an emptied group leaves no row behind
    RETURN NULL;
END
$fn$
"""

_TRIGGERS = (
    "CREATE TRIGGER lab_group_stats_insert AFTER INSERT ON {schema}.lab_chunks REFERENCING NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION {schema}.lab_group_stats_apply()",
    "CREATE TRIGGER lab_group_stats_delete AFTER DELETE ON {schema}.lab_chunks REFERENCING OLD TABLE AS old_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION {schema}.lab_group_stats_apply()",
    "CREATE TRIGGER lab_group_stats_update AFTER UPDATE ON {schema}.lab_chunks "
    "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION {schema}.lab_group_stats_apply()",
)


# A direct write to the postings or the vectors (the chunks' own triggers cover lab_chunks) gives each group it
# touched a new version too; TRUNCATE, which has no transition table, gives every group one.
_BUMP = """
CREATE FUNCTION {schema}.lab_group_version_bump() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        UPDATE {schema}.lab_group_stats SET version = {version};
    ELSE
        UPDATE {schema}.lab_group_stats AS g SET version = {version}
        FROM (SELECT DISTINCT region, acl_tag, effective_from, effective_to FROM changed_rows) AS c
        WHERE g.region = c.region AND g.acl_tag = c.acl_tag AND g.effective_from = c.effective_from
          AND g.effective_to IS NOT DISTINCT FROM c.effective_to;
    END IF;
    RETURN NULL;
END
$fn$
"""

_BUMP_TRIGGERS = tuple(
    f"CREATE TRIGGER lab_group_version_{table.removeprefix('lab_')}_{event.lower()} AFTER {event} ON {{schema}}.{table} "
    + ("" if event == "TRUNCATE" else f"REFERENCING {'OLD' if event == 'DELETE' else 'NEW'} TABLE AS changed_rows ")
    + "FOR EACH STATEMENT EXECUTE FUNCTION {schema}.lab_group_version_bump()"
    for table in ("lab_postings", "lab_vectors")
    for event in ("INSERT", "DELETE", "TRUNCATE")
)

# An UPDATE can move rows between groups: both sides get a new version (a trigger has one name per table).
_BUMP_UPDATE = tuple(
    f"CREATE TRIGGER lab_group_version_{table.removeprefix('lab_')}_update_{side.lower()} AFTER UPDATE ON {{schema}}.{table} "
    f"REFERENCING {side} TABLE AS changed_rows FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.lab_group_version_bump()"
    for table in ("lab_postings", "lab_vectors")
    for side in ("OLD", "NEW")
)


def _run(conn: Any, statement: str, schema: str) -> None:
    from psycopg import sql

    conn.execute(
        sql.SQL(statement).format(
            schema=sql.Identifier(schema), conflict=sql.SQL(_CONFLICT), version=sql.SQL(NEW_VERSION)
        )
    )


def create_group_table(conn: Any, schema: str) -> None:
    """The empty ``lab_group_stats`` table (filled after the bulk load)."""
    _run(conn, _TABLE, schema)


def fill_group_stats(conn: Any, schema: str) -> int:
    """Aggregate the loaded chunks into their groups (once, after ``COPY``) and key the table; returns the groups."""
    _run(conn, _FILL, schema)
    _run(conn, _KEY, schema)
    from psycopg import sql

    return int(conn.execute(sql.SQL("SELECT count(*) FROM {}.lab_group_stats").format(sql.Identifier(schema))).fetchone()[0])


def create_group_triggers(conn: Any, schema: str) -> None:
    """From now on every write to ``lab_chunks`` updates its groups' rows in the same transaction."""
    _run(conn, _APPLY, schema)
    _run(conn, _BUMP, schema)
    for statement in (*_TRIGGERS, *_BUMP_TRIGGERS, *_BUMP_UPDATE):
        _run(conn, statement, schema)
