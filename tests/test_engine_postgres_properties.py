"""The noninterference attacks and parity, against the PostgreSQL engine, on random corpora.

One embedded server serves the module; each example loads its corpus into a
fresh schema (a few tens of milliseconds), so these run fewer examples than the
in-memory property suite (tests/test_properties.py).
"""

from __future__ import annotations

import datetime as dt

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pg_support import lanes_of, replay_stable, requires_postgres
from strategies import BASE_DAY, invisible_chunks, scenarios
from test_properties import ENCODER, fixture_vectors

import labsrc
from labsrc.engines import PostgresRetriever

pytestmark = requires_postgres

SETTINGS = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def observe(retriever, query, caller, on_date, top_k):
    result = retriever.search(query, caller, on_date, top_k, query_kind="property")
    return lanes_of(result), replay_stable(result.trace)


@SETTINGS
@given(data=st.data(), use_encoder=st.booleans())
def test_hidden_rows_change_nothing_and_the_engine_equals_memory(server, data, use_encoder):
    corpus, caller, on_date, query, top_k = data.draw(scenarios())
    hidden = data.draw(invisible_chunks(caller, on_date))
    mixed = list(corpus)
    for chunk in hidden:
        mixed.insert(data.draw(st.integers(0, len(mixed))), chunk)
    vectors = ENCODER if use_encoder else fixture_vectors(mixed, query)
    want = observe(labsrc.PolicyRetriever(corpus, vectors), query, caller, on_date, top_k)
    with PostgresRetriever(mixed, vectors, dsn=server.dsn) as engine:
        with_hidden = observe(engine, query, caller, on_date, top_k)
        permitted = sorted(c.chunk_id for c in labsrc.permitted_chunks(caller, corpus, on_date))
        assert [c.chunk_id for c in engine.universe(caller, on_date)] == permitted
    with PostgresRetriever(corpus, vectors, dsn=server.dsn) as engine:
        without_hidden = observe(engine, query, caller, on_date, top_k)
    assert with_hidden == without_hidden  # ids, order and scores with ==, and the trace
    assert with_hidden == want  # ... and both equal the in-memory retriever's


# --- ties -------------------------------------------------------------------------------------

# Ids whose byte order differs from a case-insensitive or locale order: the engine must sort like Python.
TIE_IDS = ["B", "a", "Z-1", "z", "é", "e", "ä", "Ä", "a-1", "a_1", "A", "10", "9", "ß"]
TIE_TEXTS = ["refund laptop", "refund laptop refund", "laptop refund", "parcel", "refund"]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    picks=st.lists(st.sampled_from(TIE_TEXTS), min_size=len(TIE_IDS), max_size=len(TIE_IDS)),
    query=st.sampled_from(["refund", "refund laptop", "laptop refund refund", "parcel refund", "laptop"]),
    top_k=st.integers(1, 16),
)
def test_ties_break_by_chunk_id_exactly_as_in_memory(server, picks, query, top_k):
    day = BASE_DAY
    corpus = [
        labsrc.PolicyChunk(
            chunk_id=cid, document_id="d", parent_id="p", version="v", region="EU", acl_tag="t",
            effective_from=day - dt.timedelta(days=1), effective_to=None, text=text,
        )
        for cid, text in zip(TIE_IDS, picks)
    ]  # fmt: skip
    # Identical vectors for identical texts: the dense lane ties exactly where BM25 does.
    vectors = labsrc.FixtureVectors(
        {c.chunk_id: [1.0 + TIE_TEXTS.index(c.text), 1.0, 0.5] for c in corpus}, {query: [1.0, 1.0, 1.0]}
    )
    caller = labsrc.Caller("u", "EU", {"t"})
    memory = labsrc.PolicyRetriever(corpus, vectors)
    # Only corpora whose matching chunks really tie (the top_k cut may still fall between scores).
    every_score = [s for _, s in observe(memory, query, caller, day, len(corpus))[0]["sparse"]]
    assume(len(every_score) > len(set(every_score)))
    want = observe(memory, query, caller, day, top_k)
    with PostgresRetriever(corpus, vectors, dsn=server.dsn) as engine:
        got = observe(engine, query, caller, day, top_k)
    assert got == want


def test_a_large_tied_corpus_ranks_identically(server):
    # 600 chunks over 6 texts: every score is shared by ~100 chunks, and the order is all tie-breaks.
    day = BASE_DAY
    texts = ["refund laptop damaged", "refund refund", "laptop", "damaged parcel refund", "parcel days", "refund days laptop"]
    corpus = [
        labsrc.PolicyChunk(
            chunk_id=f"c{(i * 7919) % 600:04d}", document_id="d", parent_id="p", version="v",
            region=("EU", "US")[i % 2], acl_tag=("t1", "t2", "t3")[i % 3],
            effective_from=day - dt.timedelta(days=i % 5), effective_to=None if i % 4 else day + dt.timedelta(days=1),
            text=texts[i % len(texts)],
        )
        for i in range(600)
    ]  # fmt: skip
    caller = labsrc.Caller("u", "EU", {"t1", "t3"})
    with PostgresRetriever(corpus, ENCODER, dsn=server.dsn) as engine:
        memory = labsrc.PolicyRetriever(corpus, ENCODER)
        for query in ["refund", "refund laptop damaged", "days days parcel", "laptop refund refund"]:
            for top_k in (5, 60, 600):
                assert observe(engine, query, caller, day, top_k) == observe(memory, query, caller, day, top_k)
