"""No index lets the reader test whether a hidden id or term exists: EXPLAIN (ANALYZE) counts only visible rows.

The attack (issue 32): as the reader role, authorized for one caller, run
``EXPLAIN (ANALYZE) SELECT 1 FROM lab_chunks WHERE chunk_id = 'x'`` with scans
steered by ``SET LOCAL enable_*`` and range predicates. With an index keyed on
``chunk_id`` alone, a hidden ``x`` was fetched by the index and then removed
by the policy ("Rows Removed by Filter: 1"), an absent one was not (0), and a
prefix search enumerated other tenants' ids. Every reader index now keys the
boundary (region, tag, date window) first, so a scan never fetches a hidden
row. Here every row-count figure of the plan must be the same for a hidden id
(or term, or prefix) as for an absent one, under every steering.
"""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
from pg_support import requires_postgres
from test_engine_concurrency import DAY, corpus
from test_properties import ENCODER

import labsrc
from labsrc.engines import PostgresRetriever

pytestmark = requires_postgres

#: The plan figures a reader reads off EXPLAIN (ANALYZE); buffer counts are left out (see docs/postgres.md,
#: "Threat model": the pages a scan reads can depend on how many rows share them).
COUNTS = ("Actual Rows", "Rows Removed by Filter", "Rows Removed by Index Recheck", "Heap Fetches", "Index Searches")

STEERINGS = {
    "planner's choice": (),
    "index scans only": ("SET LOCAL enable_seqscan = off", "SET LOCAL enable_bitmapscan = off"),
    "bitmap scans only": ("SET LOCAL enable_seqscan = off", "SET LOCAL enable_indexscan = off", "SET LOCAL enable_indexonlyscan = off"),
    "lossy bitmaps": ("SET LOCAL enable_seqscan = off", "SET LOCAL enable_indexscan = off", "SET LOCAL enable_indexonlyscan = off", "SET LOCAL work_mem = '64kB'"),
    "sequential scans only": ("SET LOCAL enable_indexscan = off", "SET LOCAL enable_bitmapscan = off", "SET LOCAL enable_indexonlyscan = off"),
}

CALLER = labsrc.Caller("tenant-eu", "EU", {"support:eu"})


@pytest.fixture(scope="module")
def engine(server):
    with PostgresRetriever(corpus(), ENCODER, dsn=server.dsn) as retriever:
        yield retriever


def figures(plan: dict) -> list[tuple[str, str, object]]:
    """Every row-count figure of every node, in plan order (with the node's type, so plans must match too)."""
    out = []

    def walk(node: dict) -> None:
        for key in COUNTS:
            if key in node:
                out.append((node["Node Type"], key, node[key]))
        for child in node.get("Plans", ()):
            walk(child)

    walk(plan["Plan"])
    return out


@contextmanager
def steered(engine, steering: str):
    """A reader session authorized for CALLER, its scans steered; yields ``explain(query, params) -> figures``."""
    with engine.connect_as(CALLER, DAY) as conn:
        for statement in STEERINGS[steering]:
            conn.execute(statement)

        def explain(query: str, params: tuple) -> list:
            raw = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON, TIMING OFF, BUFFERS OFF) " + query, params).fetchone()[0]
            return figures((raw if isinstance(raw, list) else json.loads(raw))[0])

        yield explain
        conn.rollback()


def hidden_chunks() -> list[labsrc.PolicyChunk]:
    """Chunks the caller may not see: its own group's superseded and future ones, its region's other tags,
    and other regions (up to 8 of each)."""
    hidden = [c for c in corpus() if not labsrc.boundary.is_permitted(CALLER, c, DAY)]
    own_group = [c for c in hidden if c.region == CALLER.region and c.acl_tag in CALLER.acl_tags]
    own_region = [c for c in hidden if c.region == CALLER.region and c.acl_tag not in CALLER.acl_tags]
    elsewhere = [c for c in hidden if c.region != CALLER.region]
    assert own_group and own_region and elsewhere, "the corpus must hide chunks of every kind"
    return own_group[:8] + own_region[:8] + elsewhere[:8]


@pytest.mark.parametrize("steering", list(STEERINGS))
@pytest.mark.parametrize(
    "table, column",
    [("lab_chunks", "chunk_id"), ("lab_vectors", "chunk_id"), ("lab_postings", "chunk_id")],
)
def test_a_hidden_id_looks_exactly_like_an_absent_one(engine, steering, table, column):
    with steered(engine, steering) as explain:
        absent = explain(f"SELECT 1 FROM {table} WHERE {column} = %s", ("c999",))
        for chunk in hidden_chunks():
            # The attacker names the hidden row's own region and tag too, so the scan can be keyed on them.
            query = f"SELECT 1 FROM {table} WHERE region = %s AND acl_tag = %s AND {column} = %s"
            seen = explain(query, (chunk.region, chunk.acl_tag, chunk.chunk_id))
            assert seen == explain(query, (chunk.region, chunk.acl_tag, "c999")), (steering, table, chunk.chunk_id)
            assert explain(f"SELECT 1 FROM {table} WHERE {column} = %s", (chunk.chunk_id,)) == absent


@pytest.mark.parametrize("steering", list(STEERINGS))
def test_a_prefix_search_finds_no_hidden_id(engine, steering):
    """The published attack: ranges over chunk_id, narrowed character by character. Each range's figures must
    be what the caller's visible ids alone explain: equal for two ranges holding the same visible ids."""
    visible = sorted(c.chunk_id for c in labsrc.boundary.permitted_chunks(CALLER, corpus(), DAY))
    query = "SELECT 1 FROM lab_chunks WHERE chunk_id >= %s AND chunk_id < %s"
    by_visible: dict[tuple[str, ...], list] = {}
    with steered(engine, steering) as explain:
        for low, high in [("x", "y"), ("c0", "c00"), ("c0", "c1"), ("c00", "c01"), ("c01", "c02"), ("c1", "c2"), ("c2", "c3"), ("c23", "c24"), ("c3", "c4")]:
            holds = tuple(i for i in visible if low <= i < high)
            plan = explain(query, (low, high))
            by_visible.setdefault(holds, plan)
            assert plan == by_visible[holds], (steering, low, high)
    assert () in by_visible and len(by_visible) > 2  # empty ranges (hidden ids or none) and some with visible ids


@pytest.mark.parametrize("steering", list(STEERINGS))
def test_a_hidden_term_looks_exactly_like_an_absent_one(engine, steering):
    analyzer = engine.analyzer
    visible_terms = {t for c in labsrc.boundary.permitted_chunks(CALLER, corpus(), DAY) for t in analyzer(c.text)}
    query = "SELECT 1 FROM lab_postings WHERE region = %s AND acl_tag = %s AND term = %s"
    with steered(engine, steering) as explain:
        for chunk in hidden_chunks():
            for term in sorted(set(analyzer(chunk.text)))[:3]:
                if chunk.region == CALLER.region and chunk.acl_tag in CALLER.acl_tags and term in visible_terms:
                    continue  # a term the caller's visible chunks hold too: its visible postings are rightly counted
                seen = explain(query, (chunk.region, chunk.acl_tag, term))
                assert seen == explain(query, (chunk.region, chunk.acl_tag, "zzz-absent")), (steering, chunk.chunk_id, term)


def test_every_condition_of_the_policy_bounds_every_reader_index(engine):
    """The reason the attacks above find nothing: an index scan fetches only rows the policy lets through."""
    with engine.connect_as(CALLER, DAY) as conn:
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")
        for table in ("lab_chunks", "lab_postings", "lab_vectors", "lab_group_stats"):
            plan = "\n".join(r[0] for r in conn.execute(f"EXPLAIN (COSTS OFF) SELECT 1 FROM {table} WHERE region = 'EU'"))
            index_cond = next(line for line in plan.splitlines() if "Index Cond" in line)
            for condition in ("region = ", "acl_tag = ANY", "effective_from <=", "(COALESCE(effective_to, 'infinity'::date)) >="):
                assert condition in index_cond, (table, condition, plan)
