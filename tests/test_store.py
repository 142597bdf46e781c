import subprocess
import sys
import textwrap

import numpy as np
import pytest

import labsrc
from labsrc.patterns.store import SQLiteStore


def fill(store):
    store.add_document("eu-returns", title="EU returns", path="eu/returns.md", metadata={"region": "EU"})
    store.add_chunk(
        "eu-returns#chunk-0",
        "eu-returns",
        "Damaged refurbished laptops qualify for replacement within 14 days.",
        embedding=np.array([0.1, -0.25, 1e-8, 3.0], dtype=np.float32),
        enriched_text="laptops, replacement | RPL-14\n\nDamaged refurbished laptops qualify for replacement within 14 days.",
        metadata={"tier": "std", "days": 14},
    )
    store.add_chunk("eu-returns#chunk-1", "eu-returns", "Unworn footwear may be returned within 30 days.", metadata={"tier": "vip", "days": 30})


def test_embedding_round_trip_is_exact_float32(tmp_path):
    with SQLiteStore(tmp_path / "lab.sqlite") as store:
        fill(store)
        chunk = store.get_chunk("eu-returns#chunk-0")
    assert chunk["embedding"].dtype == np.float32
    assert np.array_equal(chunk["embedding"], np.array([0.1, -0.25, 1e-8, 3.0], dtype=np.float32))
    assert chunk["enriched_text"].startswith("laptops, replacement | RPL-14\n\n")
    assert chunk["metadata"] == {"tier": "std", "days": 14}
    assert (chunk["doc_id"], chunk["title"], chunk["path"]) == ("eu-returns", "EU returns", "eu/returns.md")


def test_float64_embeddings_are_stored_as_float32(tmp_path):
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        store.add_document("d")
        store.add_chunk("c", "d", "text", embedding=[1 / 3, 2 / 3])
        assert np.array_equal(store.get_chunk("c")["embedding"], np.array([1 / 3, 2 / 3], dtype=np.float32))


def test_get_missing_and_iteration_order(tmp_path):
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        fill(store)
        assert store.get_chunk("nope") is None
        assert [c["chunk_id"] for c in store.iter_chunks()] == ["eu-returns#chunk-0", "eu-returns#chunk-1"]
        assert store.get_chunk("eu-returns#chunk-1")["embedding"] is None
        assert store.count_chunks() == 2


def test_iter_chunks_filters_inside_sqlite(tmp_path):
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        fill(store)
        assert [c["chunk_id"] for c in store.iter_chunks({"days": {"$gt": 20}})] == ["eu-returns#chunk-1"]
        assert [c["chunk_id"] for c in store.iter_chunks({"tier": "x' OR '1'='1"})] == []


def test_bad_writes_are_errors(tmp_path):
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        fill(store)
        with pytest.raises(labsrc.InvalidArgument, match="add_document"):
            store.add_chunk("x", "no-such-doc", "text")
        with pytest.raises(labsrc.InvalidArgument, match="already"):
            store.add_chunk("eu-returns#chunk-0", "eu-returns", "again")
        with pytest.raises(labsrc.InvalidArgument, match="already"):
            store.add_document("eu-returns")
        with pytest.raises(labsrc.InvalidArgument, match="NaN"):
            store.add_chunk("y", "eu-returns", "t", embedding=[1.0, float("nan")])
        with pytest.raises(labsrc.InvalidArgument, match="1-D"):
            store.add_chunk("y", "eu-returns", "t", embedding=[[1.0], [2.0]])
        with pytest.raises(labsrc.InvalidArgument, match="JSON"):
            store.add_chunk("y", "eu-returns", "t", metadata={"x": object()})
        assert store.count_chunks() == 2


def test_not_a_database_is_a_clear_error(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(labsrc.InvalidRecord, match="junk.sqlite"):
        SQLiteStore(junk)


def test_retriever_rebuilt_after_restart_without_reembedding(tmp_path):
    path = tmp_path / "lab.sqlite"
    encoder = labsrc.HashingEncoder(dimension=64, analyzer=labsrc.patterns.dropin.DROPIN_ANALYZER)
    chunks = [
        ("d1#chunk-0", "Damaged refurbished laptops qualify for replacement within 14 days."),
        ("d1#chunk-1", "Unworn footwear may be returned within 30 days."),
        ("d1#chunk-2", "Lost parcels are replaced after a carrier loss claim."),
    ]
    with SQLiteStore(path) as store:
        store.add_document("d1", title="Policy")
        for (chunk_id, text), vector in zip(chunks, encoder.encode([f"Policy\n{t}" for _, t in chunks])):
            store.add_chunk(chunk_id, "d1", text, embedding=vector)
    # A fresh interpreter: nothing survives but the file.
    script = textwrap.dedent(
        f"""
        import json, labsrc, labsrc.patterns
        class Spy:
            def __init__(self):
                self.inner = labsrc.HashingEncoder(dimension=64, analyzer=labsrc.patterns.dropin.DROPIN_ANALYZER)
                self.batches = []
            def encode(self, texts):
                self.batches.append(len(texts))
                return self.inner.encode(texts)
        spy = Spy()
        with labsrc.patterns.SQLiteStore({str(path)!r}) as store:
            retriever = labsrc.HybridRetriever.from_store(store, embedder=spy)
        hits = retriever.search("carrier loss claim", k=2)
        print(json.dumps({{"ids": [h["chunk_id"] for h in hits], "embed": [h["embed_rank"] for h in hits], "batches": spy.batches}}))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    result = __import__("json").loads(out.stdout)
    assert result["ids"][0] == "d1#chunk-2"
    assert result["embed"][0] == 1
    assert result["batches"] == [1]  # only the query was encoded: no chunk was re-embedded


def test_from_store_indexes_enriched_text(tmp_path):
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        store.add_document("d")
        store.add_chunk("d#0", "d", "Damaged laptops are replaced.", enriched_text="RPL-14\n\nDamaged laptops are replaced.")
        store.add_chunk("d#1", "d", "Footwear returns.")
        retriever = labsrc.HybridRetriever.from_store(store)
    hit = retriever.search("RPL-14")[0]
    assert hit["chunk_id"] == "d#0" and hit["bm25_rank"] == 1
    assert "RPL-14" not in hit["snippet"]  # users see the original text


def test_from_store_refuses_mixed_dimensions(tmp_path):
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        fill(store)  # one chunk has a 4-d vector, the other none (the default embedder gives 256-d)
        with pytest.raises(labsrc.InvalidArgument, match="different shapes"):
            labsrc.HybridRetriever.from_store(store)


def test_the_poc_ports_own_calls_work_as_written(tmp_path):
    # The acceptance scenario of the POC port (spec, "Persistence"), call for call.
    vec = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    storage = SQLiteStore(tmp_path / "poc.sqlite")
    storage.create_tables()
    storage.create_tables()  # idempotent
    storage.add_document("doc1", "test.md")
    storage.add_chunk("chunk1", "doc1", "Test content", embedding=vec, enriched_content="enriched")
    chunk = storage.get_chunk_by_id("chunk1")
    assert chunk["path"] == "test.md"
    assert chunk["embedding"].dtype == np.float32 and np.array_equal(chunk["embedding"], vec)
    assert chunk["enriched_content"] == chunk["enriched_text"] == "enriched"
    assert [c["chunk_id"] for c in storage.get_all_chunks()] == ["chunk1"]
    assert storage.get_chunk_by_id("nope") is None
    with pytest.raises(labsrc.InvalidArgument, match="not both"):
        storage.add_chunk("chunk2", "doc1", "x", enriched_text="a", enriched_content="b")
    storage.close()


# --- issue 22: a damaged store is an InvalidRecord naming the file and the field -----------------


def _store_with_chunks(path, n=400):
    with SQLiteStore(path) as store:
        store.add_document("d", "d.md", metadata={"lang": "en"})
        for i in range(n):
            store.add_chunk(f"c{i:04d}", "d", f"chunk {i} " + "text " * 30, embedding=[1.0, 2.0, 3.0],
                            metadata={"i": i})  # fmt: skip
    return path


def test_a_corrupt_page_is_an_invalid_record(tmp_path):
    # Issue 22: a corrupt page raised sqlite3.DatabaseError from iter_chunks.
    path = _store_with_chunks(tmp_path / "lab.sqlite")
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 8 * page
    data[3 * page : 6 * page] = b"\xff" * (3 * page)
    path.write_bytes(bytes(data))
    with pytest.raises(labsrc.InvalidRecord, match=r"lab\.sqlite, field 'database'.*damaged"):
        with SQLiteStore(path) as store:
            store.get_all_chunks()


def test_a_truncated_embedding_blob_is_an_invalid_record(tmp_path):
    import sqlite3

    path = _store_with_chunks(tmp_path / "lab.sqlite", n=2)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE chunks SET embedding = substr(embedding, 1, 7) WHERE chunk_id = 'c0001'")
    with SQLiteStore(path) as store:
        assert store.get_chunk("c0000")["embedding"].tolist() == [1.0, 2.0, 3.0]
        with pytest.raises(labsrc.InvalidRecord, match=r"field \"chunks\['c0001'\]\.embedding\".*7 bytes"):
            store.get_chunk("c0001")
        with pytest.raises(labsrc.InvalidRecord, match="embedding"):
            labsrc.patterns.HybridRetriever.from_store(store)


@pytest.mark.parametrize(("table", "key", "bad"), [("chunks", "chunk_id", "{not json"), ("documents", "doc_id", "[1, 2]")])
def test_bad_metadata_json_is_an_invalid_record(tmp_path, table, key, bad):
    import sqlite3

    path = _store_with_chunks(tmp_path / "lab.sqlite", n=1)
    with sqlite3.connect(path) as db:
        db.execute(f"UPDATE {table} SET metadata = ?", (bad,))
    with SQLiteStore(path) as store:
        with pytest.raises(labsrc.InvalidRecord, match=r"lab\.sqlite, field .*\.metadata"):
            store.get_chunk("c0000") if table == "chunks" else store.get_document("d")
