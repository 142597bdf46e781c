import json
import time

import numpy as np
import pytest

import labsrc
from labsrc.lanes.analysis import Analyzer, english_analyzer
from labsrc.lanes.persistence import load_bm25_index, save_bm25_index

DOCS = [
    ("eu-refurb-v2-rule", "Rule RPL-14. Damaged refurbished laptops qualify for replacement within 14 days of delivery."),
    ("eu-footwear-v1-rule", "Unworn footwear may be returned within 30 days of delivery."),
    ("eu-carrier-loss-v1", "Lost parcels: open a carrier loss claim after 10 business days."),
    ("café-rule", "Café vouchers are non-refundable. Café café."),
]
QUERIES = ["damaged laptop replacement", "RPL-14", "delivery days", "café", "nothing matches", "delivery delivery"]


@pytest.mark.parametrize("mmap", [True, False])
def test_round_trip_gives_identical_scores(tmp_path, mmap):
    index = labsrc.BM25Index.build(DOCS, k1=0.5, b=0.6)
    save_bm25_index(index, tmp_path / "idx")
    loaded = load_bm25_index(tmp_path / "idx", mmap=mmap)
    assert loaded.ids == index.ids and loaded.vocabulary == index.vocabulary
    assert (loaded.k1, loaded.b, loaded.avgdl) == (0.5, 0.6, index.avgdl)
    assert isinstance(loaded.doc_pos.base, np.memmap) is mmap  # a row of the packed postings, mapped
    for query in QUERIES:
        assert np.array_equal(loaded.score_all(query), index.score_all(query))
        assert loaded.search(query, 3) == index.search(query, 3)
    assert loaded.explain("RPL-14", "eu-refurb-v2-rule") == index.explain("RPL-14", "eu-refurb-v2-rule")


def test_analyzer_is_stored_by_its_fields(tmp_path):
    analyzer = Analyzer(stopwords=frozenset({"rule"}), name="custom-v3")
    index = labsrc.BM25Index.build(DOCS, analyzer=analyzer)
    save_bm25_index(index, tmp_path)
    params = json.loads((tmp_path / "params.json").read_text(encoding="utf-8"))
    assert params["analyzer"]["stopwords"] == ["rule"] and params["analyzer"]["name"] == "custom-v3"
    loaded = load_bm25_index(tmp_path)
    assert loaded.analyzer == analyzer
    assert loaded.search("rule RPL-14", 2) == index.search("rule RPL-14", 2)


def test_stemming_analyzer_round_trips(tmp_path):
    pytest.importorskip("snowballstemmer")
    index = labsrc.BM25Index.build(DOCS, analyzer=english_analyzer())
    loaded = load_bm25_index(save_bm25_index(index, tmp_path))
    assert loaded.analyzer == english_analyzer()
    assert loaded.search("qualifying deliveries", 4) == index.search("qualifying deliveries", 4)


def test_an_undescribable_analyzer_is_refused_before_writing(tmp_path):
    index = labsrc.BM25Index.build(DOCS, analyzer=str.split)
    with pytest.raises(labsrc.InvalidArgument, match="Analyzer"):
        save_bm25_index(index, tmp_path / "idx")
    assert not (tmp_path / "idx").exists()


def test_unfinished_or_corrupt_saves_are_refused(tmp_path):
    index = labsrc.BM25Index.build(DOCS)
    save_bm25_index(index, tmp_path)
    (tmp_path / "tf.npy").write_bytes(b"garbage")
    with pytest.raises(labsrc.InvalidRecord, match="tf.npy"):
        load_bm25_index(tmp_path)
    (tmp_path / "params.json").unlink()
    with pytest.raises(labsrc.InvalidRecord, match="params.json"):
        load_bm25_index(tmp_path)


def test_wrong_array_length_is_refused(tmp_path):
    save_bm25_index(labsrc.BM25Index.build(DOCS), tmp_path)
    np.save(tmp_path / "doc_len.npy", np.zeros(2))
    with pytest.raises(labsrc.InvalidRecord, match=r"doc_len.npy.*shape"):
        load_bm25_index(tmp_path)


def test_unknown_analyzer_field_lists_valid_ones(tmp_path):
    save_bm25_index(labsrc.BM25Index.build(DOCS), tmp_path)
    params = json.loads((tmp_path / "params.json").read_text(encoding="utf-8"))
    params["analyzer"]["lowercase"] = True
    (tmp_path / "params.json").write_text(json.dumps(params), encoding="utf-8")
    with pytest.raises(labsrc.InvalidRecord) as err:
        load_bm25_index(tmp_path)
    assert err.value.field == "analyzer" and "'pattern'" in str(err.value)


def test_loading_a_1000_document_index_is_fast(tmp_path):
    words = [f"term{i}" for i in range(400)]
    docs = [(f"doc-{i:04d}", " ".join(words[(i * 7 + j) % 400] for j in range(60))) for i in range(1000)]
    index = labsrc.BM25Index.build(docs)
    save_bm25_index(index, tmp_path)
    start = time.perf_counter()
    loaded = load_bm25_index(tmp_path)
    elapsed = time.perf_counter() - start
    print(f"load 1000 docs: {elapsed * 1000:.1f} ms")
    assert elapsed < 2.0
    assert loaded.search("term5 term77", 5) == index.search("term5 term77", 5)


def test_an_index_saved_in_format_2_still_loads(tmp_path):
    # Format 2 kept positions and impacts in two files; loading packs them in memory.
    index = labsrc.BM25Index.build(DOCS, k1=0.9, b=0.4)
    save_bm25_index(index, tmp_path)
    postings = np.load(tmp_path / "postings.npy")
    (tmp_path / "postings.npy").unlink()
    np.save(tmp_path / "doc_pos.npy", postings[0])
    np.save(tmp_path / "impact.npy", postings[1].view(np.float64))
    params = json.loads((tmp_path / "params.json").read_text(encoding="utf-8"))
    params["format"]["version"] = 2
    params["dtypes"] = {**{k: v for k, v in params["dtypes"].items() if k != "postings"}, "doc_pos": "<i8", "impact": "<f8"}
    (tmp_path / "params.json").write_text(json.dumps(params), encoding="utf-8")
    loaded = load_bm25_index(tmp_path)
    for query in QUERIES:
        assert np.array_equal(loaded.score_all(query), index.score_all(query))
    params["format"]["version"] = 1
    (tmp_path / "params.json").write_text(json.dumps(params), encoding="utf-8")
    with pytest.raises(labsrc.InvalidRecord, match="unsupported index format"):
        load_bm25_index(tmp_path)
