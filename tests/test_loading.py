import datetime as dt
import json

import pytest

import labsrc

GOOD = {
    "chunk_id": "eu-refurb-v2-rule",
    "document_id": "eu-electronics",
    "parent_id": "eu-electronics-v2",
    "version": "eu-electronics/2026-04-01",
    "region": "EU",
    "acl_tag": "support:eu",
    "effective_from": "2026-04-01",
    "effective_to": None,
    "text": "Rule RPL-14. Damaged refurbished laptops qualify for replacement.",
}


def write_lines(tmp_path, *lines):
    path = tmp_path / "chunks.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def record(**changes):
    out = dict(GOOD)
    for key, value in changes.items():
        if value is ...:
            out.pop(key)
        else:
            out[key] = value
    return json.dumps(out, ensure_ascii=False)


def test_lesson_chunks_load_in_spec_order(data):
    assert [c.chunk_id for c in data.chunks] == [
        "eu-refurb-v2-rule", "eu-refurb-v1-rule", "merchant-vip-refurb", "eu-footwear-v1-rule", "eu-carrier-loss-v1",
    ]  # fmt: skip
    v1 = data.chunks[1]
    assert (v1.effective_from, v1.effective_to) == (dt.date(2025, 2, 1), dt.date(2026, 3, 31))
    assert data.eval_date == dt.date(2026, 5, 27)
    assert data.luna == labsrc.Caller("luna-48291", "EU", frozenset({"support:eu"}))
    assert data.no_access == labsrc.Caller("visitor-9000", "APAC", frozenset())


def test_blank_lines_skipped_and_unicode_kept_exactly(tmp_path):
    text = "  Rückerstattung für beschädigte Geräte — 14 Tage.\tÉtape 2 ✓  "
    path = write_lines(tmp_path, "", record(text=text, chunk_id="ü-1"), "   ", record(chunk_id="b"))
    chunks = labsrc.load_chunks(path)
    assert [c.chunk_id for c in chunks] == ["ü-1", "b"]
    assert chunks[0].text == text  # not trimmed, not normalised


def test_optional_fields(tmp_path):
    path = write_lines(tmp_path, record(title="Refurb", path="eu/refurb.md", metadata={"topic": "returns"}))
    chunk = labsrc.load_chunks(path)[0]
    assert (chunk.title, chunk.path, dict(chunk.metadata)) == ("Refurb", "eu/refurb.md", {"topic": "returns"})


@pytest.mark.parametrize(
    "line, field, message",
    [
        ('{"chunk_id": "a",', None, "malformed JSON"),
        ("[1, 2]", None, "JSON object"),
        (record(region=...), "region", "missing"),
        (record(acl_tag=7), "acl_tag", "must be a string"),
        (record(effective_from="2026-02-30"), "effective_from", "day is out of range"),
        (record(effective_from="27/05/2026"), "effective_from", "ISO date"),
        (record(effective_to="2026-03-01"), "effective_to", "before effective_from"),
        (record(text="   "), "text", "empty or blank"),
        (record(text=""), "text", "empty or blank"),
        (record(chunk_id=" "), "chunk_id", "empty or blank"),
        (record(metadata=[1]), "metadata", "JSON object"),
        (record(colour="red"), "colour", "unknown field"),
    ],
)
def test_bad_lines_name_file_line_and_field(tmp_path, line, field, message):
    path = write_lines(tmp_path, record(chunk_id="first"), "", line)
    with pytest.raises(labsrc.InvalidRecord, match=message) as info:
        labsrc.load_chunks(path)
    error = info.value
    assert error.path == str(path) and error.line == 3 and error.field == field
    assert str(path) in str(error) and "line 3" in str(error)
    assert isinstance(error, labsrc.LabError) and isinstance(error, ValueError)


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_a_record_cut_short_is_reported_where_it_stops_not_at_column_1(tmp_path, ending):
    # 360 characters of a good record, then it stops: the parser gives up at column 361 of that line.
    whole = record(text="x" * 400)
    cut = whole[:360]
    assert cut.endswith("x")
    path = tmp_path / "chunks.jsonl"
    path.write_bytes((record(chunk_id="first") + ending + cut + ending).encode())
    with pytest.raises(labsrc.InvalidRecord) as info:
        labsrc.load_chunks(path)
    message = str(info.value)
    assert info.value.line == 2
    # The string that never closes starts where "text": "... opens; the message shows where the parser stopped.
    opened = cut.index('"xxx') + 1
    assert f"Unterminated string starting at (column {opened}, where the parser stopped: " in message, message
    assert "column 1," not in message


def test_malformed_json_shows_twenty_characters_either_side_of_the_stop(tmp_path):
    path = tmp_path / "chunks.jsonl"
    path.write_text('{"chunk_id": "a", "region": "EU" "acl_tag": "public"}\n')
    with pytest.raises(labsrc.InvalidRecord) as info:
        labsrc.load_chunks(path)
    assert str(info.value).endswith(
        "malformed JSON: Expecting ',' delimiter (column 34, where the parser stopped: "
        """'"a", "region": "EU" '⟨here⟩'"acl_tag": "public"}')"""
    ), str(info.value)


def test_duplicate_chunk_id(tmp_path):
    path = write_lines(tmp_path, record(), record())
    with pytest.raises(labsrc.InvalidRecord, match="first seen on line 1") as info:
        labsrc.load_chunks(path)
    assert (info.value.line, info.value.field) == (2, "chunk_id")


def test_missing_file_and_bad_utf8(tmp_path):
    with pytest.raises(labsrc.InvalidRecord, match="cannot open"):
        labsrc.load_chunks(tmp_path / "nope.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"chunk_id": "\xff"}\n')
    with pytest.raises(labsrc.InvalidRecord, match="UTF-8"):
        labsrc.load_chunks(bad)


def test_callers(tmp_path):
    path = tmp_path / "callers.json"
    path.write_text(json.dumps([{"actor_id": "a", "region": "EU", "acl_tags": ["x", "y"]}]))
    assert labsrc.load_callers(path) == [labsrc.Caller("a", "EU", frozenset({"x", "y"}))]
    path.write_text(json.dumps([{"actor_id": "a", "region": "EU", "acl_tags": "x"}]))
    with pytest.raises(labsrc.InvalidRecord, match="acl_tags") as info:
        labsrc.load_callers(path)
    assert "record 1" in str(info.value)
    path.write_text('[\n{"actor_id": "a",\n]')
    with pytest.raises(labsrc.InvalidRecord, match="line 3"):
        labsrc.load_callers(path)


def test_vectors(tmp_path):
    path = tmp_path / "vectors.json"
    path.write_text(json.dumps({"documents": {"a": [1, 0]}, "queries": {"q": [0, 1]}, "dimension": 2}))
    vectors = labsrc.load_vectors(path)
    assert vectors.dimension == 2 and vectors.version == "fixture-embeddings-v1"
    path.write_text(json.dumps({"documents": {"a": [1, 0]}, "queries": {"q": [0, 1, 2]}}))
    with pytest.raises(labsrc.InvalidRecord, match="dimension 3, expected 2"):
        labsrc.load_vectors(path)
    path.write_text(json.dumps({"documents": {"a": [1, 0]}, "queries": {}, "dimension": 3}))
    with pytest.raises(labsrc.InvalidRecord, match="dimension"):
        labsrc.load_vectors(path)
    path.write_text('{"documents": {"a": [NaN, 0]}, "queries": {}}')
    with pytest.raises(labsrc.InvalidRecord, match="NaN"):
        labsrc.load_vectors(path)
