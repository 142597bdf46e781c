"""The dense lane's float32 fast pass: the margin's arithmetic, the slices it reads, and exactness (==)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from factories import make_chunk
import labsrc
from labsrc.lanes import dense
from labsrc.lanes.candidates import Float32Pass, float32_cosine_margin
from labsrc.ranking import top_k_positions


def test_margin_is_twice_d_plus_4_units_in_the_last_place_of_float32() -> None:
    assert float32_cosine_margin(384) == 2 * (384 + 4) * 2.0**-24 + 1e-12
    assert float32_cosine_margin(384) == pytest.approx(4.6253e-5, rel=1e-4)


def test_a_mask_inside_one_group_reads_only_that_groups_slice() -> None:
    matrix = np.eye(6)
    keys = ["b", "a", "b", "c", "a", "b"]  # stored as a a | b b b | c
    fast = Float32Pass(matrix, np.ones(6), keys)
    assert fast.perm.tolist() == [1, 4, 0, 2, 5, 3]
    mask = np.array([False, False, True, False, False, False])  # row 2: group b
    assert fast._slices(mask[fast.perm]) == [(2, 5)]
    both = np.array([True, False, False, True, False, False])  # rows 0 (b) and 3 (c): adjacent groups merge
    assert fast._slices(both[fast.perm]) == [(2, 6)]
    assert fast._slices(None) == [(0, 6)]


def test_candidates_are_permitted_rows_only_and_include_the_whole_tie_at_the_cut() -> None:
    rng = np.random.default_rng(3)
    query = rng.standard_normal(16)
    matrix = rng.standard_normal((50, 16))
    matrix[[7, 21, 40]] = query * np.array([[1.0], [3.0], [0.5]])  # three exact ties at cosine 1
    mask = np.ones(50, dtype=bool)
    mask[21] = False
    fast = Float32Pass(matrix, np.linalg.norm(matrix, axis=1), [i % 3 for i in range(50)])
    rows = fast.candidates(query, 1, mask)
    assert 21 not in rows and {7, 40} <= set(rows.tolist())
    assert rows.tolist() == sorted(rows.tolist())


def _exact(matrix, query, mask, top_k):
    """The lane before the fast pass: float64 cosine of every permitted row, top k by (score desc, row asc)."""
    rows = np.flatnonzero(mask)
    scores = dense._cosine(matrix[rows], np.linalg.norm(matrix[rows], axis=1), query)
    return [(int(rows[p]), float(scores[p])) for p in top_k_positions(scores, top_k)]


@st.composite
def dense_worlds(draw):
    n = draw(st.integers(1, 60))
    dim = draw(st.sampled_from([2, 3, 8, 32]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    query = rng.standard_normal(dim)
    matrix = rng.standard_normal((n, dim))
    # Hard cases: exact duplicates of the query, rows a few float32 ulps apart, zero rows.
    for i in draw(st.lists(st.integers(0, n - 1), max_size=6)):
        matrix[i] = query * rng.uniform(0.5, 2.0)
    for i in draw(st.lists(st.integers(0, n - 1), max_size=6)):
        matrix[i] = query + rng.standard_normal(dim) * 1e-7
    for i in draw(st.lists(st.integers(0, n - 1), max_size=3)):
        matrix[i] = 0.0
    mask = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    keys = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    return matrix, query, mask, keys, draw(st.integers(1, 12))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dense_worlds())
def test_fast_pass_then_rescore_equals_the_exact_lane(world) -> None:
    matrix, query, mask, keys, top_k = world
    fast = Float32Pass(matrix, np.linalg.norm(matrix, axis=1), keys)
    rows = fast.candidates(query, top_k, mask)
    scores = dense._cosine(matrix[rows], np.linalg.norm(matrix[rows], axis=1), query)
    got = [(int(rows[p]), float(scores[p])) for p in top_k_positions(scores, top_k)]
    assert got == _exact(matrix, query, mask, top_k)  # ids, order and every bit of every score


def test_dense_index_with_boundary_groups_equals_an_index_of_the_permitted_rows(data: labsrc.Lesson) -> None:
    rng = np.random.default_rng(11)
    regions, tags = ["EU", "US"], ["t1", "t2", "t3"]
    chunks = [make_chunk(f"c{i:03d}", f"chunk {i}", region=regions[i % 2], acl_tag=tags[i % 3]) for i in range(90)]
    vectors = labsrc.FixtureVectors({c.chunk_id: rng.standard_normal(24) for c in chunks}, {"q": rng.standard_normal(24)})
    index = dense.DenseIndex(chunks, vectors)
    for region in regions:
        for tag in tags:
            mask = np.array([c.region == region and c.acl_tag == tag for c in index.chunks])
            alone = dense.DenseIndex([c for c, keep in zip(index.chunks, mask) if keep], vectors)
            got = [(c.chunk_id, s) for c, s in index.search("q", 5, mask)]
            assert got == [(c.chunk_id, s) for c, s in alone.search("q", 5)]
