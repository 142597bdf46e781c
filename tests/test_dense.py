import math
from unittest import mock

import numpy as np
import pytest
from factories import make_chunk

import labsrc
from labsrc.lanes.dense import EncoderVectors, HashingEncoder, cosine_similarity

PARAPHRASE = "swap a broken reconditioned notebook"
SHARED = "damaged refurbished laptop replacement after delivery"


def ids_scores(results):
    return [(chunk.chunk_id, score) for chunk, score in results]


def test_paraphrase(data, permitted):
    assert ids_scores(labsrc.dense_rank(PARAPHRASE, permitted, data.vectors)) == [
        ("eu-refurb-v2-rule", pytest.approx(0.98 / math.sqrt(0.98**2 + 0.05**2), abs=1e-12)),
        ("eu-footwear-v1-rule", pytest.approx(0.050954, abs=1e-6)),
    ]
    assert labsrc.dense_rank(PARAPHRASE, permitted, data.vectors)[0][1] == pytest.approx(0.998701, abs=1e-6)


def test_shared_language(data, permitted):
    assert ids_scores(labsrc.dense_rank(SHARED, permitted, data.vectors)) == [
        ("eu-refurb-v2-rule", pytest.approx(0.987803, abs=1e-6)),
        ("eu-footwear-v1-rule", pytest.approx(0.154344, abs=1e-6)),
    ]


def test_code_only_query_maps_to_zero_and_finds_nothing(data, permitted):
    assert np.array_equal(data.vectors.query_vector("RPL-14"), np.zeros(3))
    assert np.array_equal(data.vectors.query_vector("never seen"), np.zeros(3))
    assert labsrc.dense_rank("RPL-14", permitted, data.vectors) == []


def test_cosine_zero_vector_scores_zero():
    matrix = np.array([[1.0, 0.0], [0.0, 0.0], [3.0, 4.0]])
    assert cosine_similarity(matrix, np.array([1.0, 0.0])).tolist() == [1.0, 0.0, pytest.approx(3 / 5)]
    assert cosine_similarity(matrix, np.zeros(2)).tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("dimension", [3, 32, 384])
def test_a_rows_cosine_does_not_depend_on_the_other_rows(dimension):
    # Noninterference down to the last bit: a BLAS matrix-vector product sums a row in an order that
    # depends on its position, so inserting a hidden row above a permitted one used to move the
    # permitted row's score by an ulp (seen at d = 384 on SciFact vectors).
    rng = np.random.default_rng(dimension)
    matrix, query = rng.normal(size=(700, dimension)), rng.normal(size=dimension)
    full = cosine_similarity(matrix, query)
    for start in range(1, 9):
        assert cosine_similarity(matrix[start:], query).tolist() == full[start:].tolist()
    picked = np.sort(rng.choice(700, size=37, replace=False))
    assert cosine_similarity(matrix[picked], query).tolist() == full[picked].tolist()


def test_fixture_vectors_validate_dimensions_and_values():
    with pytest.raises(labsrc.InvalidArgument, match="dimension 2, expected 3"):
        labsrc.FixtureVectors({"a": [1, 0, 0], "b": [1, 0]}, {})
    with pytest.raises(labsrc.InvalidArgument, match="NaN or infinite"):
        labsrc.FixtureVectors({"a": [1, float("nan"), 0]}, {})
    with pytest.raises(labsrc.InvalidArgument, match="NaN or infinite"):
        labsrc.FixtureVectors({"a": [1, 0]}, {"q": [float("inf"), 0]})
    with pytest.raises(labsrc.InvalidArgument, match="at least one vector"):
        labsrc.FixtureVectors({}, {})


def test_fixture_vectors_copy_their_input():
    source = [1.0, 0.0]
    vectors = labsrc.FixtureVectors({"a": source}, {})
    source[0] = 5.0
    assert vectors.documents["a"].tolist() == [1.0, 0.0]
    with pytest.raises(ValueError):
        vectors.documents["a"][0] = 2.0


def test_missing_document_vector_scores_zero_unless_strict(data, permitted):
    chunks = [*permitted, make_chunk("unknown")]
    assert data.vectors.missing(chunks) == ["unknown"]
    assert "unknown" not in [c.chunk_id for c, _ in labsrc.dense_rank(PARAPHRASE, chunks, data.vectors, top_k=10)]
    strict = labsrc.FixtureVectors(data.vectors.documents, data.vectors.queries, strict=True)
    with pytest.raises(labsrc.InvalidArgument, match="no fixture vector"):
        labsrc.dense_rank(PARAPHRASE, chunks, strict)


def test_top_k_beyond_universe_and_bad_top_k(data, permitted):
    assert len(labsrc.dense_rank(SHARED, permitted, data.vectors, top_k=100)) == 3
    with pytest.raises(labsrc.InvalidArgument):
        labsrc.dense_rank(SHARED, permitted, data.vectors, top_k=0)


def test_blank_query(data, permitted):
    assert labsrc.dense_rank("  ", permitted, data.vectors) == []


def test_ties_break_on_chunk_id():
    vectors = labsrc.FixtureVectors({"b": [1, 0], "a": [1, 0], "c": [1, 0]}, {"q": [1, 0]})
    chunks = [make_chunk(cid) for cid in ("c", "b", "a")]
    assert [c.chunk_id for c, _ in labsrc.dense_rank("q", chunks, vectors, top_k=2)] == ["a", "b"]


def test_hashing_encoder_is_deterministic_and_normalised():
    encoder = HashingEncoder(dimension=64)
    first = encoder.encode(["refund for a lost parcel", ""])
    again = HashingEncoder(dimension=64).encode(["refund for a lost parcel", ""])
    assert np.array_equal(first, again)
    assert np.linalg.norm(first[0]) == pytest.approx(1.0)
    assert np.array_equal(first[1], np.zeros(64))  # no tokens → zero vector


def test_an_encoder_can_drive_the_dense_lane():
    chunks = [make_chunk("a", "lost parcel refund"), make_chunk("b", "unworn footwear return")]
    results = labsrc.dense_rank("parcel refund", chunks, HashingEncoder(dimension=512))
    assert results[0][0].chunk_id == "a"
    assert isinstance(EncoderVectors(HashingEncoder()), labsrc.DenseSource)


def test_encoder_with_wrong_shape_is_refused():
    class Broken:
        def encode(self, texts):
            return np.zeros(3)

    with pytest.raises(labsrc.InvalidArgument, match="shape"):
        labsrc.dense_rank("q", [make_chunk("a")], Broken())


def test_top_k_positions_never_sorts_more_than_needed():
    from labsrc.ranking import top_k_positions

    scores = np.array([0.5, 0.9, 0.0, 0.9, -1.0, 0.7])
    assert top_k_positions(scores, 2).tolist() == [1, 3]
    assert top_k_positions(scores, 3).tolist() == [1, 3, 5]
    assert top_k_positions(scores, 10).tolist() == [1, 3, 5, 0]  # only positive scores


# --- one matrix, masked per request ---------------------------------------------------------


def _masked_fixture(n: int = 40, dim: int = 8):
    rng = np.random.default_rng(7)
    chunks = [make_chunk(f"c{i:03d}", f"chunk {i}") for i in range(n)]
    vectors = {c.chunk_id: rng.standard_normal(dim) for c in chunks}
    query = rng.standard_normal(dim)
    vectors["c011"] = 2 * query  # an exact tie at the top (cosine 1 up to rounding, the same for both):
    vectors["c005"] = 2 * query  # c005 must rank before c011
    source = labsrc.FixtureVectors(vectors, {"q": query})
    return chunks, source, query


@pytest.mark.parametrize("keep", [2, 5, 13, 14, 31, 40])
def test_a_masked_search_equals_an_index_of_the_permitted_rows_only(keep):
    from labsrc.lanes import dense

    chunks, source, query = _masked_fixture()
    rng = np.random.default_rng(keep)
    mask = np.zeros(len(chunks), dtype=bool)
    mask[[5, 11]] = True  # keep the tied pair
    mask[rng.choice([i for i in range(len(chunks)) if i not in (5, 11)], keep - 2, replace=False)] = True
    shared = dense.DenseIndex(chunks, source)
    scored_rows = []

    def spy(matrix, norms, vector):
        scored_rows.append(matrix.shape[0])
        return cosine(matrix, norms, vector)

    cosine = dense._cosine
    with mock.patch.object(dense, "_cosine", spy):
        got = ids_scores(shared.search("q", 10, mask))
    # Only candidates of the float32 pass are rescored in float64: never a hidden row, never more than the
    # permitted ones, and at least every row returned.
    assert len(scored_rows) == 1 and len(got) <= scored_rows[0] <= keep
    alone = dense.DenseIndex([c for c, kept in zip(chunks, mask) if kept], source)
    assert got == ids_scores(alone.search("q", 10))  # ==: ids, order and every bit of every score
    # And the arithmetic: cosine of the kept rows, best first, the tie broken by id.
    matrix = np.array([source.document_matrix([c])[0] for c in chunks])
    cosines = matrix @ query / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(query))
    expected = sorted(((c.chunk_id, cosines[i]) for i, c in enumerate(chunks) if mask[i] and cosines[i] > 0),
                      key=lambda pair: (-pair[1], pair[0]))[:10]  # fmt: skip
    assert [cid for cid, _ in got] == [cid for cid, _ in expected]
    assert [s for _, s in got] == pytest.approx([s for _, s in expected], abs=1e-12)
    assert [cid for cid, _ in got[:2]] == ["c005", "c011"] and got[0][1] == got[1][1]


def test_a_mask_of_the_wrong_shape_or_type_is_refused():
    from labsrc.lanes.dense import DenseIndex

    chunks, source, _ = _masked_fixture()
    index = DenseIndex(chunks, source)
    with pytest.raises(labsrc.InvalidArgument, match=r"boolean array of shape \(40,\)"):
        index.search("q", 3, np.ones(39, dtype=bool))
    with pytest.raises(labsrc.InvalidArgument, match="boolean array"):
        index.search("q", 3, np.ones(40, dtype=int))
