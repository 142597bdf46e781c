import dataclasses
import datetime as dt

import pytest
from factories import make_chunk

import labsrc


def test_chunk_is_frozen():
    chunk = make_chunk("a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        chunk.text = "changed"  # type: ignore[misc]


def test_metadata_is_a_read_only_copy():
    source = {"topic": "returns"}
    chunk = make_chunk("a", metadata=source)
    source["topic"] = "changed"
    assert chunk.metadata == {"topic": "returns"}
    with pytest.raises(TypeError):
        chunk.metadata["topic"] = "x"  # type: ignore[index]


def test_equal_chunks_hash_equal_and_differ_when_text_differs():
    assert make_chunk("a") == make_chunk("a")
    assert hash(make_chunk("a")) == hash(make_chunk("a"))
    assert make_chunk("a", text="one") != make_chunk("a", text="two")
    assert make_chunk("a", metadata={"k": 1}) != make_chunk("a", metadata={"k": 2})


def test_caller_tags_become_a_frozenset():
    tags = ["support:eu"]
    caller = labsrc.Caller("luna-48291", "EU", tags)  # type: ignore[arg-type]
    tags.append("legal:internal")
    assert caller.acl_tags == frozenset({"support:eu"})


def test_spec_fields_are_present():
    names = [f.name for f in dataclasses.fields(labsrc.PolicyChunk)]
    assert names[:9] == [
        "chunk_id", "document_id", "parent_id", "version", "region", "acl_tag",
        "effective_from", "effective_to", "text",
    ]  # fmt: skip
    assert make_chunk("a").effective_from == dt.date(2026, 1, 1)
