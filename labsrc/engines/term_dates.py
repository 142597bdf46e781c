"""A caller's df without reading its postings: each term's effective dates, sorted, behind a function that applies the claims.

Counting a term's visible postings reads every one of them (an index-only
scan of the caller's region and tags: about 1 µs a posting). Yet what the
boundary decides about a posting of a given region and tag is only whether
its window holds the request's date, so for one ``(region, acl_tag, term)``
the count is a function of that date alone:

    df(d) = #{p : from_p ≤ d ≤ to_p} = #{p : from_p ≤ d} − #{p : e_p < d},   e_p = max(to_p, from_p − 1)

(``effective_to`` is inclusive and NULL never ends). When from ≤ to, e = to and
a posting that ended before d began before it too, so the second set lies in
the first. A window that ends before it begins (to < from) is never in force:
then e = from − 1, and the posting leaves the first count exactly when it
enters the second. ``lab_term_dates`` keeps, per ``(region, acl_tag, term)``,
the sorted ``from`` dates and the sorted ``e`` of the postings that end, and
each count is one binary search: PostgreSQL's ``width_bucket(operand,
thresholds)`` returns how many of the sorted thresholds are ≤ the operand,
duplicates included. A caller's df is the
sum over its region and tags:

    df(t) = Σ_{tag ∈ claims} width_bucket(d, froms) − width_bucket(d − 1, tos)

an exact integer, the very count the reader's ``count(*)`` under row-level
security returns (``tests/test_engine_term_dates.py`` compares them).

**The boundary.** A row of ``lab_term_dates`` mixes a region and tag's
current postings with its superseded and future ones, so the reader role may
not read the table at all. It calls ``lab_visible_df(terms)``, a ``SECURITY
DEFINER`` function (like ``lab_request()``, with a fixed search_path) that takes
region, tags and date from the verified claims, never from its arguments, looks
up the caller's own region and tags only, and returns a row for a term only
when its visible df is positive: for a term that only hidden postings hold it
returns what it returns for an absent one, nothing. What it costs still grows
with the caller's own out-of-window versions of a term (a longer array to read),
the same channel the postings index already has (docs/postgres.md, "What a
reader session can still learn").

**Writes.** The rows are built once after the bulk load (one pass over the
postings key, which is already in (region, tag, term, from) order) and then
kept by statement-level triggers on ``lab_postings``: every (region, tag, term)
a statement touched is rebuilt from the postings, inside the writing
transaction, so a reader's snapshot sees postings and dates of the same commits.
The triggers read ``lab_postings`` as the writer; the store writes as the
loading user, which row-level security does not filter.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DF_FUNCTION", "create_df_function", "create_term_dates"]

#: The function the reader role calls for df (its signature, as ``GRANT`` names it).
DF_FUNCTION = "lab_visible_df(text[])"

_ROWS = """
SELECT region, acl_tag, term,
       array_agg(effective_from ORDER BY effective_from) AS froms,
       coalesce(array_agg(greatest(effective_to, effective_from - 1) ORDER BY greatest(effective_to, effective_from - 1))
                FILTER (WHERE effective_to IS NOT NULL), '{{}}') AS tos
FROM {schema}.lab_postings {where}
GROUP BY region, acl_tag, term
"""

_TABLE = "CREATE TABLE {schema}.lab_term_dates AS " + _ROWS
_KEY = "CREATE UNIQUE INDEX lab_term_dates_key ON {schema}.lab_term_dates (region, acl_tag, term)"

# Rebuild every (region, tag, term) the statement touched; each branch reads only the transition tables its
# trigger defines. Deleted first, then inserted from the postings as they now are (none left: no row).
_CHANGED = {
    "INSERT": "SELECT region, acl_tag, term FROM new_rows",
    "DELETE": "SELECT region, acl_tag, term FROM old_rows",
    "UPDATE": "SELECT region, acl_tag, term FROM old_rows UNION SELECT region, acl_tag, term FROM new_rows",
}
_REBUILD = """
    DELETE FROM {schema}.lab_term_dates AS s USING ({changed}) AS k
     WHERE s.region = k.region AND s.acl_tag = k.acl_tag AND s.term = k.term;
    INSERT INTO {schema}.lab_term_dates
""" + _ROWS.replace("{where}", "WHERE (region, acl_tag, term) IN ({changed})") + ";"

_APPLY = """
CREATE FUNCTION {schema}.lab_term_dates_apply() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM {schema}.lab_term_dates;
    ELSIF TG_OP = 'INSERT' THEN {insert}
    ELSIF TG_OP = 'DELETE' THEN {delete}
    ELSE {update}
    END IF;
    RETURN NULL;
END
$fn$
"""

_TRIGGERS = (
    "CREATE TRIGGER lab_term_dates_insert AFTER INSERT ON {schema}.lab_postings REFERENCING NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION {schema}.lab_term_dates_apply()",
    "CREATE TRIGGER lab_term_dates_delete AFTER DELETE ON {schema}.lab_postings REFERENCING OLD TABLE AS old_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION {schema}.lab_term_dates_apply()",
    "CREATE TRIGGER lab_term_dates_update AFTER UPDATE ON {schema}.lab_postings "
    "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION {schema}.lab_term_dates_apply()",
    "CREATE TRIGGER lab_term_dates_truncate AFTER TRUNCATE ON {schema}.lab_postings "
    "FOR EACH STATEMENT EXECUTE FUNCTION {schema}.lab_term_dates_apply()",
)

# The claims come from lab_request() (NULL without a valid token: no row joins, df 0 for every term). Each
# distinct term is looked up in the caller's region and each of its tags; ``d - 1`` turns "to < d" into
# "to ≤ d − 1", which width_bucket counts. A term whose visible df is 0 yields no row at all.
_FUNCTION = """
CREATE FUNCTION {schema}.lab_visible_df(terms text[]) RETURNS TABLE (term text, df int8)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
SELECT q.term, sum(width_bucket(c.on_date, s.froms) - width_bucket(c.on_date - 1, s.tos))::int8 AS df
FROM (SELECT (r).region, (r).acl_tags, (r).on_date FROM (SELECT {schema}.lab_request() AS r) AS z) AS c
CROSS JOIN (SELECT DISTINCT u.term FROM unnest(terms) AS u(term)) AS q
JOIN {schema}.lab_term_dates AS s ON s.region = c.region AND s.acl_tag = ANY (c.acl_tags) AND s.term = q.term
GROUP BY q.term
HAVING sum(width_bucket(c.on_date, s.froms) - width_bucket(c.on_date - 1, s.tos)) > 0
$fn$
"""


def _run(conn: Any, statement: str, schema: str) -> None:
    from psycopg import sql

    conn.execute(sql.SQL(statement).format(schema=sql.Identifier(schema)))


def create_term_dates(conn: Any, schema: str) -> int:
    """Build ``lab_term_dates`` from the loaded postings (after their key is built) and keep it with triggers.

    Returns its rows. Readable by its owner only: nothing grants it to the reader role.
    """
    from psycopg import sql

    _run(conn, _TABLE.replace("{where}", ""), schema)
    _run(conn, _KEY, schema)
    _run(conn, "ANALYZE {schema}.lab_term_dates", schema)  # so the function's join is planned as key lookups
    apply = _APPLY
    for op, changed in _CHANGED.items():
        apply = apply.replace("{" + op.lower() + "}", _REBUILD.replace("{changed}", changed))
    _run(conn, apply, schema)
    for statement in _TRIGGERS:
        _run(conn, statement, schema)
    count = sql.SQL("SELECT count(*) FROM {}.lab_term_dates").format(sql.Identifier(schema))
    return int(conn.execute(count).fetchone()[0])


def create_df_function(conn: Any, schema: str) -> None:
    """``lab_visible_df(text[])`` (it calls ``lab_request()``), executable by nobody until the reader role is granted it."""
    from psycopg import sql

    _run(conn, _FUNCTION, schema)
    conn.execute(sql.SQL("REVOKE ALL ON FUNCTION {}." + DF_FUNCTION + " FROM PUBLIC").format(sql.Identifier(schema)))
