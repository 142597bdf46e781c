import pytest

import labsrc
from labsrc.patterns.categories import category_values, search_by_category

PROSE = [
    {"chunk_id": f"prose-{i}", "text": f"How to reset the user password in account settings, step {i}. User password user name.", "category": "prose"}
    for i in range(8)
]
CODE = [
    {
        "chunk_id": "code-0",
        "text": "def resetCredentials(account, new_password): account.credentials.update(hash(new_password)); audit.log(account.id)",
        "category": "code",
    }
]


def test_one_index_lets_prose_drown_code():
    retriever = labsrc.HybridRetriever.from_chunks(PROSE + CODE)
    ranked = [h["chunk_id"] for h in retriever.search("reset user password", k=20)]
    assert ranked.index("code-0") + 1 == len(PROSE) + 1  # last, behind every prose chunk


def test_split_category_search_gives_each_category_a_first_place():
    retriever = labsrc.HybridRetriever.from_chunks(PROSE + CODE)
    hits = search_by_category(retriever, "reset user password", k=3)
    assert {h["category"] for h in hits[:2]} == {"code", "prose"}
    assert hits[0]["fused_score"] == pytest.approx(1 / 61) and hits[1]["fused_score"] == pytest.approx(1 / 61)
    assert [h["chunk_id"] for h in hits[:2]] == sorted(h["chunk_id"] for h in hits[:2])  # tie: chunk_id
    assert hits[2]["category"] == "prose" and hits[2]["category_rank"] == 2
    assert hits[2]["fused_score"] == pytest.approx(1 / 62)


def test_categories_and_where():
    retriever = labsrc.HybridRetriever.from_chunks(PROSE + CODE)
    assert category_values(retriever) == ("code", "prose")
    only_code = search_by_category(retriever, "reset user password", categories=["code"])
    assert [h["chunk_id"] for h in only_code] == ["code-0"]
    none = search_by_category(retriever, "reset user password", where={"chunk_id": {"$prefix": "prose-7"}})
    assert [h["chunk_id"] for h in none] == ["prose-7"]
    with pytest.raises(labsrc.InvalidArgument):
        search_by_category(retriever, "x", categories=["code", "code"])
