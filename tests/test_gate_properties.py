"""Property tests of the outside-in gates on random corpora (hypothesis).

* The lab's ``PolicyRetriever`` is never flagged: no hidden id returned, the
  same answer as a build over the caller's permitted chunks, the same answer
  with bait, and none of the requests the gate generates breaks the invariant.
* A post-filtering retriever (BM25 over every stored chunk, drop what the
  caller may not see, keep k) is always flagged whenever a hidden chunk
  outranks a permitted one in its unfiltered ranking.
"""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import labsrc
from labsrc.boundary import is_permitted
from labsrc.lanes.dense import EncoderVectors, HashingEncoder
from labsrc.records.cases import Case
from strategies import REGIONS, TAGS, chunk_records, days, invisible_chunks, texts

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NEW_GATES = ("boundary on every returned id", "noninterference by rebuild", "noninterference by bait")
PROBES = "generated probes"
VECTORS = EncoderVectors(HashingEncoder(dimension=32))


@st.composite
def worlds(draw):
    """A random store (visible and hidden chunks), one caller, a date, a few queries, top_k."""
    caller = labsrc.Caller("u", draw(st.sampled_from(REGIONS)), frozenset(draw(st.sets(st.sampled_from(TAGS), min_size=1))))
    on_date = draw(days)
    mine = [  # chunks this caller may see, so that rankings mix permitted and hidden chunks
        labsrc.PolicyChunk(f"m{i:02d}", "mine", "mine", "v1", caller.region, draw(st.sampled_from(sorted(caller.acl_tags))),
                           on_date, None, draw(texts))
        for i in range(draw(st.integers(0, 4)))
    ]
    stored = mine + draw(st.integers(0, 6).flatmap(lambda n: chunk_records("c", n))) + draw(invisible_chunks(caller, on_date))
    queries = draw(st.lists(texts, min_size=1, max_size=3, unique=True))
    cases = [Case(f"q{i}", q, "u", "positive") for i, q in enumerate(queries)]
    return stored, caller, on_date, cases, draw(st.integers(1, 4))


def statuses(run, names=NEW_GATES) -> dict[str, str]:
    return {g.name: g.status for g in run.gates if g.name in names}


@SETTINGS
@given(worlds())
def test_the_gates_never_flag_the_labs_retriever(world) -> None:
    stored, caller, on_date, cases, top_k = world
    run = labsrc.gate_retriever(labsrc.PolicyRetriever, stored, [caller], cases, VECTORS,
                                labsrc.GateConfig(top_k=top_k, min_recall={}), on_date=on_date, measure=False)
    assert statuses(run, (*NEW_GATES, PROBES)) == dict.fromkeys((*NEW_GATES, PROBES), "PASS"), [g.findings for g in run.gates]


class PostFilter:
    """Rank every stored chunk with the lab's BM25, then drop what the caller may not see; keep k."""

    def __init__(self, chunks, vectors):
        self.chunks = tuple(chunks)

    def search(self, query, caller, on_date, top_k):
        ranked = labsrc.bm25_rank(query, self.chunks, top_k=max(top_k, 1)) if self.chunks else []
        return [(c.chunk_id, s) for c, s in ranked if is_permitted(caller, c, on_date)][:top_k]


@SETTINGS
@given(worlds())
def test_a_post_filtering_retriever_is_flagged_when_a_hidden_chunk_outranks_a_permitted_one(world) -> None:
    stored, caller, on_date, cases, top_k = world
    outranked = False
    for case in cases:
        ranking = labsrc.bm25_rank(case.query, stored, top_k=len(stored)) if stored else []
        seen_hidden = False
        for chunk, _ in ranking:
            if not is_permitted(caller, chunk, on_date):
                seen_hidden = True
            elif seen_hidden:
                outranked = True
    # The property is about the replay's gates: no generated requests (probe_budget 0), half the run's cost.
    run = labsrc.gate_retriever(PostFilter, stored, [caller], cases, None,
                                labsrc.GateConfig(top_k=top_k, min_recall={}, probe_budget=0), on_date=on_date,
                                measure=False)
    flagged = "FAIL" in statuses(run).values()
    event("a hidden chunk outranks a permitted one" if outranked else "no hidden chunk outranks a permitted one")
    if outranked:
        assert flagged, statuses(run)
