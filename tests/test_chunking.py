import re

import pytest

import labsrc
from labsrc.patterns.chunking import chunk_markdown, markdown_sections

DOC = """Preface before any heading.

# Returns

Items can be returned within 30 days. Refunds are issued within 5 business days.

## Laptops

Rule RPL-14. Damaged refurbished laptops qualify for replacement within 14 days. Damage must be reported within 48 hours of delivery. Photos must be attached.

- item one
- item two

```
# not a heading inside a code fence
```

# Shipping

Standard delivery takes 3 to 5 business days.
"""


def test_chunk_ids_parents_indexes_and_ranges():
    chunks = chunk_markdown("eu-policy", DOC, max_chars=120)
    assert [c["chunk_id"] for c in chunks] == [f"eu-policy#chunk-{i}" for i in range(len(chunks))]
    assert [c["index"] for c in chunks] == list(range(len(chunks)))
    assert {c["parent_id"] for c in chunks} == {"eu-policy"}
    for chunk in chunks:
        start, end = chunk["range"]
        assert DOC[start:end] == chunk["text"]
        assert len(chunk["text"]) <= 120
    starts = [c["range"][0] for c in chunks]
    assert starts == sorted(starts)


def test_reassembling_the_chunks_loses_no_text():
    chunks = chunk_markdown("d", DOC, max_chars=80)
    rebuilt = "".join(c["text"] for c in sorted(chunks, key=lambda c: c["index"]))
    assert re.sub(r"\s+", "", rebuilt) == re.sub(r"\s+", "", DOC)


def test_headings_split_and_label_chunks():
    chunks = chunk_markdown("d", DOC, max_chars=1000)
    assert [c["heading"] for c in chunks] == ["", "Returns", "Returns > Laptops", "Shipping"]
    assert chunks[2]["text"].startswith("## Laptops")
    assert "# not a heading" in chunks[2]["text"]  # fenced code is not split at its '#'
    assert [c["section"] for c in chunks] == [0, 1, 2, 3]


def test_long_sections_split_on_paragraphs_then_sentences():
    chunks = chunk_markdown("d", DOC, max_chars=120)
    laptops = [c["text"] for c in chunks if c["heading"] == "Returns > Laptops"]
    assert len(laptops) > 1
    # Cuts fall between sentences, never inside one.
    assert laptops[0].endswith(".")
    assert all(len(t) <= 120 for t in laptops)


def test_a_word_longer_than_the_limit_is_the_only_mid_word_cut():
    chunks = chunk_markdown("d", "x" * 25, max_chars=10)
    assert [c["text"] for c in chunks] == ["x" * 10, "x" * 10, "x" * 5]


def test_sibling_headings_replace_each_other_in_the_path():
    sections = markdown_sections("# A\n## B\ntext\n## C\nmore\n# D\n")
    assert [heading for _, heading in sections] == ["A", "A > B", "A > C", "D"]


def test_chunks_name_their_document_as_policy_records_do():
    # Issue 59: the records said doc_id where PolicyChunk and chunks.jsonl say document_id; doc_id stays as an alias
    # (the drop-in retriever and notebook 10 read it).
    chunks = chunk_markdown("eu-policy", DOC, max_chars=120)
    assert [c["document_id"] for c in chunks] == [c["doc_id"] for c in chunks] == ["eu-policy"] * len(chunks)
    assert list(chunks[0])[:3] == ["chunk_id", "document_id", "doc_id"]


def test_plain_text_has_no_headings():
    text = "# of seats: 4\n\nBook a room."
    assert [c["heading"] for c in chunk_markdown("d", text)] == ["of seats: 4"]  # as markdown, a heading
    [plain] = chunk_markdown("d", text, headings=False)
    assert (plain["heading"], plain["text"], plain["section"]) == ("", text, 0)


def test_bad_arguments():
    assert chunk_markdown("d", "   \n\n ") == []
    with pytest.raises(labsrc.InvalidArgument, match="max_chars"):
        chunk_markdown("d", DOC, max_chars=0)
    with pytest.raises(labsrc.InvalidArgument, match="doc_id"):
        chunk_markdown("", DOC)


def test_chunks_feed_the_dropin_retriever():
    retriever = labsrc.HybridRetriever.from_chunks(chunk_markdown("eu-policy", DOC, max_chars=200), title_key="heading")
    hit = retriever.search("RPL-14", k=1)[0]
    assert hit["doc_id"] == "eu-policy" and hit["title"] == "Returns > Laptops"
    assert hit["metadata"]["parent_id"] == "eu-policy"
