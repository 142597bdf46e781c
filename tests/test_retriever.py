import datetime as dt

import pytest
from factories import make_chunk

import labsrc

PARAPHRASE = "swap a broken reconditioned notebook"


def test_hidden_code_attack(data):
    assert labsrc.hybrid_rank("VIP-RPL-1", data.luna, data.chunks, data.vectors, data.eval_date) == []


def test_no_access_caller(data):
    assert labsrc.hybrid_rank("RPL-14", data.no_access, data.chunks, data.vectors, data.eval_date) == []


def test_superseded_wording_returns_only_the_current_rule(data):
    results = labsrc.hybrid_rank(
        "Damaged refurbished laptops qualify for return within 30 days",
        data.luna, data.chunks, data.vectors, data.eval_date, top_k=10,
    )  # fmt: skip
    ids = [c.chunk_id for c, _ in results]
    assert "eu-refurb-v1-rule" not in ids and ids[0] == "eu-refurb-v2-rule"


def test_before_v2_took_effect_luna_gets_v1(data):
    day = dt.date(2026, 3, 1)
    results = labsrc.hybrid_rank("RPL-14", data.luna, data.chunks, data.vectors, day)
    assert [c.chunk_id for c, _ in results] == ["eu-refurb-v1-rule"]


def test_blank_query_and_bad_top_k(data):
    assert labsrc.hybrid_rank("  ", data.luna, data.chunks, data.vectors, data.eval_date) == []
    with pytest.raises(labsrc.InvalidArgument, match="top_k"):
        labsrc.hybrid_rank("RPL-14", data.luna, data.chunks, data.vectors, data.eval_date, top_k=0)


def test_retriever_result_carries_lanes_and_ranks(data):
    retriever = labsrc.PolicyRetriever(data.chunks, data.vectors)
    result = retriever.search(PARAPHRASE, data.luna, data.eval_date, 2)
    assert result.sparse == ()
    assert [c.chunk_id for c, _ in result.dense] == ["eu-refurb-v2-rule", "eu-footwear-v1-rule"]
    assert result.lane_ranks("eu-refurb-v2-rule") == {"bm25": None, "dense": 1, "hybrid": 1}


def test_retriever_copies_the_corpus(data):
    chunks = list(data.chunks)
    retriever = labsrc.PolicyRetriever(chunks, data.vectors)
    chunks.clear()
    assert len(retriever.chunks) == 5


def test_retriever_rejects_duplicate_ids_and_unknown_weights(data):
    with pytest.raises(labsrc.InvalidArgument, match="duplicate"):
        labsrc.PolicyRetriever([make_chunk("a"), make_chunk("a", "x")], data.vectors)
    with pytest.raises(labsrc.InvalidArgument, match="unknown lane"):
        labsrc.PolicyRetriever(data.chunks, data.vectors, weights={"splade": 1.0})


def test_one_index_for_every_permission_set(data, monkeypatch):
    builds = []
    original = labsrc.BM25Index.build.__func__

    def counting_build(cls, pairs, **kwargs):
        builds.append(1)
        return original(cls, pairs, **kwargs)

    monkeypatch.setattr(labsrc.BM25Index, "build", classmethod(counting_build))
    retriever = labsrc.PolicyRetriever(data.chunks, data.vectors)
    visitor = labsrc.Caller("visitor", "APAC", frozenset())
    for on_date in (data.eval_date, dt.date(2026, 3, 1), dt.date(2025, 1, 1)):
        for caller in (data.luna, visitor):
            for query in ("RPL-14", "CLM-7", "refund"):
                retriever.search(query, caller, on_date)
    assert len(builds) == 1  # one shared index; each permitted set only changes N, avgdl and df
    # The statistics are cached per distinct mask, never per caller: two masks were seen
    # for Luna (before and after the v2 rule took effect); the visitor's is empty.
    assert len(retriever.engine.bm25._stats) <= 4


def test_hashing_encoder_hybrid_on_a_larger_corpus():
    chunks = [make_chunk(f"c{i:04d}", f"policy {i} rule RPL-{i} refund window {i % 7} days") for i in range(2000)]
    chunks.append(make_chunk("hidden", "policy rule RPL-5 refund", acl_tag="legal:internal"))
    caller = labsrc.Caller("u", "EU", {"support:eu"})
    results = labsrc.hybrid_rank(
        "RPL-5 refund", caller, chunks, labsrc.HashingEncoder(dimension=128), dt.date(2026, 5, 27), top_k=5
    )
    ids = [c.chunk_id for c, _ in results]
    assert ids[0] == "c0005" and "hidden" not in ids


def test_retriever_for_keys_a_tuple_by_identity_and_a_list_by_value():
    from labsrc.retriever.policy import corpus_key, retriever_for

    chunks = tuple(make_chunk(f"c{i}", f"refund rule {i}") for i in range(3))
    encoder = labsrc.HashingEncoder(dimension=8)
    assert corpus_key(chunks) == ("identity", id(chunks))  # O(1): no hashing of the corpus
    assert retriever_for(chunks, encoder) is retriever_for(chunks, encoder)
    as_list = list(chunks)
    assert corpus_key(as_list) == ("values", chunks)
    first = retriever_for(as_list, encoder)
    as_list.append(make_chunk("c9", "new rule"))  # a list can change: keyed by value, a new retriever
    assert retriever_for(as_list, encoder) is not first
    assert len(retriever_for(as_list, encoder).chunks) == 4


# --- issue 22: hostile queries and arguments ---------------------------------------------------


def test_a_long_repeated_query_answers_in_linear_time(data):
    # Issue 22: "refurbished laptops " * 8,000 took 36 s (MaxScore's quadratic fallback); now ~0.03 s.
    import time

    retriever = labsrc.PolicyRetriever(data.chunks, data.vectors, max_query_chars=None)  # 160,000 characters
    started = time.perf_counter()
    result = retriever.search("refurbished laptops " * 8_000, data.luna, data.eval_date)
    assert time.perf_counter() - started < 5  # generous for a loaded CI machine
    assert [c.chunk_id for c, _ in result.sparse] == [
        c.chunk_id for c, _ in retriever.search("refurbished laptops " * 40, data.luna, data.eval_date).sparse
    ]


def test_a_megabyte_query_is_refused_at_once_or_answered_without_the_cap(data):
    import time

    query = "refurbished laptops " * 52_429  # 1 MB
    capped = labsrc.PolicyRetriever(data.chunks, data.vectors)
    started = time.perf_counter()
    with pytest.raises(labsrc.InvalidArgument, match=r"query is 1,048,580 characters long; the limit is 100,000"):
        capped.search(query, data.luna, data.eval_date)
    uncapped = labsrc.PolicyRetriever(data.chunks, data.vectors, max_query_chars=None)
    assert uncapped.search(query, data.luna, data.eval_date).sparse
    assert time.perf_counter() - started < 5  # measured 0.2 s


def test_max_query_chars_is_configurable(data):
    retriever = labsrc.PolicyRetriever(data.chunks, data.vectors, max_query_chars=10)
    assert retriever.search("RPL-14", data.luna, data.eval_date).fused
    with pytest.raises(labsrc.InvalidArgument, match="limit is 10 "):
        retriever.search("RPL-14 refurbished", data.luna, data.eval_date)
    for bad in (0, -1, 2.5, "10", True):
        with pytest.raises(labsrc.InvalidArgument, match="max_query_chars"):
            labsrc.PolicyRetriever(data.chunks, data.vectors, max_query_chars=bad)


@pytest.mark.parametrize(
    ("query", "caller", "message"),
    [
        (None, "luna", "query must be a str, not NoneType"),
        (b"RPL-14", "luna", r"query must be a str, not bytes \(decode it first"),
        (14, "luna", "query must be a str, not int"),
        ("RPL-14", "luna-48291", "caller must be a labsrc.Caller, not str"),
        ("RPL-14", None, "caller must be a labsrc.Caller, not NoneType"),
    ],
)
def test_wrong_types_name_the_argument_and_the_type(data, query, caller, message):
    # Issue 22: search(None), a bytes query or a string as caller raised AttributeError / TypeError.
    retriever = labsrc.PolicyRetriever(data.chunks, data.vectors)
    who = data.luna if caller == "luna" else caller
    with pytest.raises(labsrc.InvalidArgument, match=message):
        retriever.search(query, who, data.eval_date)
    with pytest.raises(labsrc.InvalidArgument, match=message):
        labsrc.hybrid_rank(query, who, data.chunks, data.vectors, data.eval_date)
    with pytest.raises(labsrc.InvalidArgument, match="on_date must be a datetime.date, not str"):
        retriever.search("RPL-14", data.luna, "2026-05-27")
