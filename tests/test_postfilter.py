import datetime as dt

import pytest

import labsrc
from labsrc.patterns.postfilter import (
    acl_overlay_chunks,
    compare_filter_placement,
    post_filter,
)

DAY = dt.date(2026, 1, 1)
ANALYST = labsrc.Caller("analyst", "GLOBAL", frozenset({"team:a"}))


def corpus():
    # 12 chunks about refunds: the 'team:b' ones repeat the query words, so they rank first.
    records = [(f"hidden-{i:02d}", "refund refund refund policy laptop") for i in range(8)]
    records += [(f"visible-{i:02d}", f"refund policy {i}") for i in range(4)]
    chunks = []
    for chunk_id, text in records:
        tag = "team:b" if chunk_id.startswith("hidden") else "team:a"
        chunks.append(
            labsrc.PolicyChunk(chunk_id, chunk_id, chunk_id, "v1", "GLOBAL", tag, dt.date(2020, 1, 1), None, text)
        )
    return chunks


def test_post_filter_keeps_only_permitted_and_cuts():
    chunks = corpus()
    ranked = labsrc.bm25_rank("refund", chunks, 12)
    kept = post_filter(ranked, ANALYST, DAY, 3)
    assert [c.chunk_id for c, _ in kept] == ["visible-00", "visible-01", "visible-02"]
    assert post_filter(ranked[:4], ANALYST, DAY, 3) == []  # hidden chunks filled the top 4


def test_comparison_counts_lost_recall_short_lists_and_drift():
    chunks = corpus()
    queries = {"q1": "refund laptop policy", "q2": "refund policy"}
    # hidden-00 is relevant but not permitted: it never counts.
    qrels = {"q1": ["visible-00", "hidden-00"], "q2": ["visible-03"]}
    pre, one, four = compare_filter_placement(queries, qrels, chunks, ANALYST, DAY, top_k=2, overfetch=(1, 4))
    # Pre-filtering ranks the 4 visible chunks (tied, so by id): q1 finds visible-00, q2 misses visible-03.
    assert (pre.queries, pre.recall, pre.lost_queries, pre.short_lists, pre.hidden_ranked, pre.score_drift) == (
        2, (1.0 + 0.0) / 2, 0, 0, 0.0, 0.0
    )
    # Post-filtering at 1x: the whole corpus's top 2 are hidden, so nothing is left to show.
    assert (one.recall, one.lost_queries, one.short_lists, one.hidden_ranked) == (0.0, 1, 2, 2.0)
    # At 4x, 8 fetched: all 8 hidden chunks outrank every visible one. Over-fetching did not help.
    assert (four.recall, four.lost_queries, four.short_lists, four.hidden_ranked) == (0.0, 1, 2, 8.0)


def test_pre_filter_recall_is_permitted_recall():
    chunks = corpus()
    (pre,) = compare_filter_placement({"q": "refund policy 3"}, {"q": ["visible-03", "hidden-01"]}, chunks, ANALYST, DAY, top_k=1, overfetch=())
    # hidden-01 is not permitted, so only visible-03 counts; it ranks first among the visible chunks.
    assert pre.recall == 1.0 and pre.strategy.startswith("pre-filter")


def test_score_drift_shows_the_statistics_leak():
    chunks = corpus()
    pre, post = compare_filter_placement({"q": "policy 1"}, {"q": ["visible-01"]}, chunks, ANALYST, DAY, top_k=4, overfetch=(3,))
    # Hidden chunks change N, n_t and avgdl, so every shared chunk scores differently.
    assert pre.score_drift == 0.0 and post.score_drift == 1.0


def test_overlay_is_deterministic_and_spreads_tags():
    records = [(f"doc-{i}", "text") for i in range(200)]
    first = acl_overlay_chunks(records, ["a", "b", "c", "d"])
    again = acl_overlay_chunks(list(reversed(records)), ["a", "b", "c", "d"])
    assert {c.chunk_id: c.acl_tag for c in first} == {c.chunk_id: c.acl_tag for c in again}
    counts = {tag: sum(c.acl_tag == tag for c in first) for tag in "abcd"}
    assert all(30 <= n <= 70 for n in counts.values())
    with pytest.raises(labsrc.InvalidArgument):
        acl_overlay_chunks(records, [])


def test_no_countable_query_is_an_error():
    with pytest.raises(labsrc.InvalidArgument, match="nothing to compare"):
        compare_filter_placement({"q": "refund"}, {"q": ["hidden-00"]}, corpus(), ANALYST, DAY)


def test_graded_qrels_count_grades_above_zero():
    chunks = corpus()
    (pre,) = compare_filter_placement(
        {"q": "refund policy 3"}, {"q": {"visible-03": 1, "visible-02": 0}}, chunks, ANALYST, DAY, top_k=1, overfetch=()
    )
    assert pre.recall == 1.0  # visible-02 (grade 0) is not relevant, so 1 of 1 found
