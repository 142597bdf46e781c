from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from beir_fixture import DOC_VECTORS, QUERIES, QUERY_VECTORS, unit_rows, write_vectors
from factories import make_chunk

from labsrc.errors import InvalidArgument, InvalidRecord
from labsrc.lanes.dense import DenseSource, dense_rank
from labsrc.lanes.vectordir import (
    NORM_TOLERANCE,
    VectorDirectory,
    load_vector_dir,
    read_id_list,
)


@pytest.fixture
def vdir(tmp_path: Path) -> Path:
    return write_vectors(tmp_path / "vectors" / "tiny")


def load(path: Path) -> VectorDirectory:
    return load_vector_dir(path, corpus_ids=DOC_VECTORS, queries=QUERIES)


def test_loads_a_valid_directory(vdir: Path):
    vectors = load(vdir)
    assert isinstance(vectors, DenseSource)
    assert vectors.version == "tiny-topic-vectors"
    assert vectors.model["dim"] == 3 == vectors.dimension
    assert vectors.doc_ids == tuple(DOC_VECTORS)
    assert vectors.query_ids == tuple(QUERY_VECTORS)
    assert np.linalg.norm(vectors.documents, axis=1) == pytest.approx(np.ones(5), abs=1e-6)


def test_query_vectors_by_text_and_by_id(vdir: Path):
    vectors = load(vdir)
    by_id = vectors.query_vector_by_id("q3")
    assert by_id == pytest.approx(unit_rows([QUERY_VECTORS["q3"]])[0], abs=1e-7)
    assert np.array_equal(vectors.query_vector(QUERIES["q3"]), by_id)
    assert vectors.query_id_for(QUERIES["q3"]) == "q3"
    # Unknown text is the zero vector, like FixtureVectors: it matches nothing.
    assert not vectors.query_vector("never asked").any()
    assert vectors.query_matrix(["q2", "q1"]).shape == (2, 3)
    with pytest.raises(InvalidArgument, match="'q9'"):
        vectors.query_vector_by_id("q9")


def test_document_matrix_follows_the_chunk_order(vdir: Path):
    vectors = load(vdir)
    chunks = [make_chunk("d3"), make_chunk("d1")]
    matrix = vectors.document_matrix(chunks)
    assert np.array_equal(matrix, vectors.documents[[2, 0]])
    with pytest.raises(InvalidArgument, match="no vector for 1 chunk"):
        vectors.document_matrix([make_chunk("d1"), make_chunk("zz")])


def test_cosine_scores_are_dot_products_of_unit_vectors(vdir: Path):
    vectors = load(vdir)
    q = vectors.query_vector_by_id("q3")
    scores = vectors.cosine_scores(q)
    assert scores == pytest.approx(vectors.documents @ q)
    assert vectors.cosine_scores(np.zeros(3)) == pytest.approx(np.zeros(5))
    assert vectors.cosine_scores(np.stack([q, q])).shape == (2, 5)


def test_is_a_dense_source_for_the_lesson_lane(vdir: Path):
    vectors = load(vdir)
    chunks = [make_chunk(doc_id) for doc_id in DOC_VECTORS]
    ranked = dense_rank(QUERIES["q3"], chunks, vectors, top_k=1)
    assert [chunk.chunk_id for chunk, _ in ranked] == ["d3"]


def _model(vdir: Path, **changes: object) -> None:
    record = json.loads((vdir / "MODEL.json").read_text())
    record.update(changes)
    (vdir / "MODEL.json").write_text(json.dumps(record))


def test_ids_must_match_the_corpus(vdir: Path):
    (vdir / "corpus_ids.txt").write_text("d1\nd2\nd3\nd4\nextra\n")
    with pytest.raises(InvalidRecord, match="'extra' is not in the corpus") as info:
        load(vdir)
    assert (Path(info.value.path).name, info.value.line, info.value.field) == ("corpus_ids.txt", 5, "id")


def test_every_corpus_document_needs_a_vector(vdir: Path):
    with pytest.raises(InvalidRecord, match=r"1 corpus id\(s\) have no vector, e.g. 'd9'"):
        load_vector_dir(vdir, corpus_ids=[*DOC_VECTORS, "d9"], queries=QUERIES)


def test_duplicate_ids_name_both_lines(tmp_path):
    path = tmp_path / "ids.txt"
    path.write_text("a\nb\na\n")
    with pytest.raises(InvalidRecord, match="first seen on line 1") as info:
        read_id_list(path)
    assert info.value.line == 3
    path.write_text("a\n\nb\n")
    with pytest.raises(InvalidRecord, match="blank id") as info:
        read_id_list(path)
    assert info.value.line == 2


def test_row_count_must_match_the_ids(vdir: Path):
    np.save(vdir / "corpus.npy", unit_rows(list(DOC_VECTORS.values())[:4]))
    with pytest.raises(InvalidRecord, match="has 4 rows but corpus_ids.txt lists 5 ids"):
        load(vdir)


def test_dimensions_must_agree(vdir: Path):
    np.save(vdir / "queries.npy", unit_rows([[1.0, 0.0, 0.0, 0.0]] * 4))
    with pytest.raises(InvalidRecord, match="dimension 3 but queries.npy has 4"):
        load(vdir)


def test_model_json_dimension_must_agree(vdir: Path):
    _model(vdir, dim=384)
    with pytest.raises(InvalidRecord, match="says 384") as info:
        load(vdir)
    assert info.value.field == "dim"


def test_model_json_needs_a_model_name(vdir: Path):
    _model(vdir, model=" ")
    with pytest.raises(InvalidRecord, match="model name") as info:
        load(vdir)
    assert info.value.field == "model"


def test_values_must_be_finite(vdir: Path):
    rows = unit_rows(list(DOC_VECTORS.values()))
    rows[3, 1] = np.nan
    np.save(vdir / "corpus.npy", rows)
    with pytest.raises(InvalidRecord, match=r"row 4 \(corpus_ids.txt line 4\) contains NaN"):
        load(vdir)


def test_vectors_must_be_unit_length(vdir: Path):
    rows = unit_rows(list(QUERY_VECTORS.values()))
    rows[1] *= 1.0 + 10 * NORM_TOLERANCE
    np.save(vdir / "queries.npy", rows)
    with pytest.raises(InvalidRecord, match="row 2 .* L2 norm 1.010000"):
        load(vdir)


def test_missing_directory_or_file(tmp_path, vdir: Path):
    with pytest.raises(InvalidRecord, match="vector directory not found"):
        load_vector_dir(tmp_path / "nowhere")
    (vdir / "queries.npy").unlink()
    with pytest.raises(InvalidRecord, match="queries.npy"):
        load(vdir)


def test_constructor_checks_shapes():
    with pytest.raises(InvalidArgument, match="2 document rows for 1 ids"):
        VectorDirectory(["a"], np.eye(2), ["q"], np.eye(2)[:1], version="v")


@pytest.mark.parametrize(
    ("damage", "field"),
    [
        (lambda data: b"", "header"),  # issue 22: a 0-byte corpus.npy raised EOFError
        (lambda data: data[:-7], "shape"),  # truncated
        (lambda data: data + b"\0" * 12, "shape"),  # padded
        (lambda data: data.replace(b"(5, 3)", b"(5000000000, 3)"), "shape"),  # a header promising 120 GB
        (lambda data: b"\x93NUMPY\x01\x00garbage", "header"),
    ],
)
def test_a_damaged_matrix_is_an_invalid_record_naming_the_file_and_field(vdir: Path, damage, field):
    path = vdir / "corpus.npy"
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(InvalidRecord, match=rf"corpus\.npy, field '{field}'"):
        load(vdir)


def test_a_pickled_matrix_is_refused_without_unpickling(vdir: Path):
    np.save(vdir / "corpus.npy", np.array([{"a": 1}] * 5, dtype=object), allow_pickle=True)
    with pytest.raises(InvalidRecord, match=r"corpus\.npy, field 'dtype'"):
        load(vdir)


def _unit(rows: int, dim: int, seed: int) -> np.ndarray:
    matrix = np.random.default_rng(seed).normal(size=(rows, dim)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def test_write_vector_dir_replaces_a_directory_whole_and_refuses_a_foreign_one(tmp_path: Path):
    from labsrc.lanes.vectordir import write_vector_dir

    out = tmp_path / "vectors" / "m"
    write_vector_dir(out, ["a", "b"], _unit(2, 4, 1), ["q"], _unit(1, 4, 2), {"model": "m1"})
    write_vector_dir(out, ["a", "b", "c"], _unit(3, 4, 3), ["q"], _unit(1, 4, 4), {"model": "m2"})
    loaded = load_vector_dir(out)
    assert (loaded.version, loaded.doc_ids) == ("m2", ("a", "b", "c"))
    assert sorted(p.name for p in out.parent.iterdir()) == ["m"]  # no staging or old folder left
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(InvalidArgument, match="notes.txt"):
        write_vector_dir(out, ["a"], _unit(1, 4, 5), ["q"], _unit(1, 4, 6), {"model": "m3"})
    assert (out / "notes.txt").read_text(encoding="utf-8") == "mine"


def test_a_vector_write_killed_at_any_point_leaves_the_old_directory_or_the_new(tmp_path: Path):
    import os
    import random
    import signal
    import time

    from labsrc.lanes.vectordir import write_vector_dir

    out = tmp_path / "m"
    versions = {name: ([f"d{i}" for i in range(n)], _unit(n, 64, n)) for name, n in (("m1", 4000), ("m2", 2000))}

    def write(name):
        ids, matrix = versions[name]
        write_vector_dir(out, ids, matrix, ["q"], _unit(1, 64, 0), {"model": name})

    write("m1")
    started = time.perf_counter()
    write("m2")
    one_write = time.perf_counter() - started
    chooser = random.Random(22)
    for _ in range(15):
        pid = os.fork()
        if pid == 0:
            try:
                while True:
                    write("m1")
                    write("m2")
            finally:
                os._exit(1)
        time.sleep(chooser.uniform(0, 3 * one_write))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        loaded = load_vector_dir(out)
        assert len(loaded.doc_ids) == len(versions[loaded.version][0])
    write("m1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # the killed writes' staging folders are gone
