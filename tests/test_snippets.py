import pytest

import labsrc
from labsrc.patterns.snippets import (
    Snippet,
    best_snippet,
    min_max,
    min_max_normalize,
    with_display_scores,
)

TEXT = (
    "Refurbished devices are inspected before resale. "
    "Grade B devices may have light scratches. "
    "Rule RPL-14: damaged refurbished laptops qualify for a replacement within 14 days. "
    "Photos of the device must be attached. "
    "Batteries hold at least 80 percent of their capacity."
)


def test_picks_the_window_that_best_matches_the_query():
    snippet = best_snippet(TEXT, "RPL-14 replacement", max_chars=90)
    assert "RPL-14" in snippet.text
    assert TEXT[snippet.start : snippet.end] == snippet.text
    assert len(snippet.text) <= 90
    assert snippet.score > 0


def test_rare_term_beats_a_common_one():
    # "devices" is in two windows, "batteries" in one: the batteries window wins.
    snippet = best_snippet(TEXT, "devices batteries", max_chars=60)
    assert snippet.text.startswith("Batteries")


def test_score_is_the_bm25_score_of_the_window():
    snippet = best_snippet(TEXT, "photos", max_chars=45)
    windows_index_score = labsrc.BM25Index.build([("w", snippet.text)]).search("photos", 1)
    assert snippet.text == "Photos of the device must be attached."
    assert snippet.score > 0 and windows_index_score  # the window itself contains the term


def test_no_match_falls_back_to_the_head():
    snippet = best_snippet(TEXT, "warranty", max_chars=50)
    assert snippet.score == 0.0
    assert TEXT.startswith(snippet.text) and len(snippet.text) <= 50
    assert best_snippet("", "x") == Snippet("", 0, 0, 0.0)


def test_min_max_normalisation():
    assert min_max(3.0, 1.0, 5.0) == pytest.approx((3.0 - 1.0) / (5.0 - 1.0))
    assert min_max_normalize([2 / 61, 1 / 61, 1 / 62]) == pytest.approx([1.0, (1 / 61 - 1 / 62) / (2 / 61 - 1 / 62), 0.0])
    assert min_max_normalize([0.5, 0.5]) == [1.0, 1.0]
    assert min_max_normalize([]) == []
    with pytest.raises(labsrc.InvalidArgument):
        min_max_normalize([1.0, float("nan")])


def test_display_scores_are_added_to_copies():
    results = [{"chunk_id": "a", "rrf_score": 2 / 61}, {"chunk_id": "b", "rrf_score": 1 / 62}]
    shown = with_display_scores(results)
    assert [r["display_score"] for r in shown] == [1.0, 0.0]
    assert "display_score" not in results[0]
    with pytest.raises(labsrc.InvalidArgument, match="rrf_score"):
        with_display_scores([{"chunk_id": "a"}])
