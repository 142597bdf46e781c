"""The dense lane's fast pass: the bounds' arithmetic (float32 and int8), the slices it reads, and exactness (==)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from factories import make_chunk
import labsrc
from labsrc.lanes import dense
from labsrc.errors import InvalidArgument
from labsrc.lanes.candidates import GATHER_BELOW, CandidatePass, float32_cosine_margin
from labsrc.lanes.codes import Int8Rows, int8_bounds, int8_codes
from labsrc.ranking import top_k_positions


def test_margin_is_twice_d_plus_4_units_in_the_last_place_of_float32() -> None:
    assert float32_cosine_margin(384) == 2 * (384 + 4) * 2.0**-24 + 1e-12
    assert float32_cosine_margin(384) == pytest.approx(4.6253e-5, rel=1e-4)


def test_a_mask_inside_one_group_reads_only_that_groups_slice() -> None:
    matrix = np.eye(6)
    keys = ["b", "a", "b", "c", "a", "b"]  # stored as a a | b b b | c
    fast = CandidatePass(matrix, np.ones(6), keys)
    assert fast.perm.tolist() == [1, 4, 0, 2, 5, 3]
    mask = np.array([False, False, True, True, False, True])  # rows 2 and 5 (b: 2 of 3), row 3 (c: 1 of 1)
    runs, gathered = fast._plan(mask[fast.perm])
    assert runs == [(2, 6)] and gathered.size == 0  # b and c are filled at least half, and adjacent: one run
    one = np.array([False, False, True, False, False, False])  # row 2 only: 1 of b's 3 rows, below half
    runs, gathered = fast._plan(one[fast.perm])
    assert runs == [] and gathered.tolist() == [3]  # stored row 3 is row 2: gathered as int8 codes
    runs, gathered = fast._plan(None)
    assert runs == [(0, 6)] and gathered.size == 0


def test_candidates_are_permitted_rows_only_and_include_the_whole_tie_at_the_cut() -> None:
    rng = np.random.default_rng(3)
    query = rng.standard_normal(16)
    matrix = rng.standard_normal((50, 16))
    matrix[[7, 21, 40]] = query * np.array([[1.0], [3.0], [0.5]])  # three exact ties at cosine 1
    mask = np.ones(50, dtype=bool)
    mask[21] = False
    fast = CandidatePass(matrix, np.linalg.norm(matrix, axis=1), [i % 3 for i in range(50)])
    rows = fast.candidates(query, 1, mask)
    assert 21 not in rows and {7, 40} <= set(rows.tolist())
    assert rows.tolist() == sorted(rows.tolist())


def _exact(matrix, query, mask, top_k):
    """The lane before the fast pass: float64 cosine of every permitted row, top k by (score desc, row asc)."""
    rows = np.flatnonzero(mask)
    scores = dense._cosine(matrix[rows], np.linalg.norm(matrix[rows], axis=1), query)
    return [(int(rows[p]), float(scores[p])) for p in top_k_positions(scores, top_k)]


def _fast_then_rescored(matrix, query, mask, keys, top_k):
    """The lane now: the fast pass's candidates, each rescored in float64, top k by (score desc, row asc)."""
    rows = CandidatePass(matrix, np.linalg.norm(matrix, axis=1), keys).candidates(query, top_k, mask)
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
    assert _fast_then_rescored(matrix, query, mask, keys, top_k) == _exact(matrix, query, mask, top_k)  # every bit


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


def test_int8_codes_of_a_row_show_the_arithmetic() -> None:
    codes, scales, errors = int8_codes(np.array([[0.6, 0.8], [0.0, 0.0]]))
    assert scales[0] == 0.8 / 127 and codes[0].tolist() == [95, 127]  # 0.6 / (0.8/127) = 95.25 → 95
    assert errors[0] == pytest.approx(abs(0.6 - 95 * 0.8 / 127), rel=1e-12)  # ≈ 0.00157; 127·s = 0.8 exactly
    assert (scales[1], codes[1].tolist(), errors[1]) == (0.0, [0, 0], 0.0)  # a zero row: nothing to scale
    assert int8_bounds(np.array([0.0]), 384)[0] == pytest.approx(1.01 * 388 * 2.0**-24 + 1e-12, rel=1e-12)
    with pytest.raises(InvalidArgument, match="2-D"):
        int8_codes(np.array([0.6, 0.8]))


def test_every_int8_approximation_is_within_its_rows_bound() -> None:
    rng = np.random.default_rng(5)
    query = rng.standard_normal(384)
    unit_query = query / np.linalg.norm(query)
    rows = rng.standard_normal((3000, 384))
    rows[:500] = unit_query + rng.standard_normal((500, 384)) * rng.uniform(1e-6, 0.3, (500, 1))  # near the query
    rows[500:520] = rng.integers(-3, 4, (20, 384))  # few distinct values: codes with no rounding at all
    unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    coded = Int8Rows(unit)
    picked = np.arange(0, 3000, 3)
    approx, bounds = coded.dots(picked, unit_query.astype(np.float32))
    exact = dense._cosine(rows[picked], np.linalg.norm(rows[picked], axis=1), query)
    assert np.all(np.abs(approx - exact) <= bounds)
    assert np.median(bounds) < 0.02  # tight enough to prune: ~√d quantisation steps of ~0.0008 / √12


def test_a_scattered_slice_is_read_as_int8_codes_and_a_filled_one_in_float32() -> None:
    rng = np.random.default_rng(8)
    matrix = rng.standard_normal((400, 32))
    keys = ["a"] * 200 + ["b"] * 200  # two adjacent groups: stored rows 0-199 and 200-399, judged apart
    fast = CandidatePass(matrix, np.linalg.norm(matrix, axis=1), keys)
    mask = np.zeros(400, dtype=bool)
    mask[:200:5] = True  # group a: 40 of 200 permitted (20 % < GATHER_BELOW)
    mask[200:390] = True  # group b: 190 of 200 (95 %)
    query = rng.standard_normal(32)
    stored, approx, bounds = fast._approx(mask[fast.perm], (query / np.linalg.norm(query)).astype(np.float32))
    assert stored.tolist() == list(range(200, 390)) + list(range(0, 200, 5))  # float32 runs, then gathered rows
    assert np.all(bounds[:190] == fast.margin / 2)  # group b, float32: the rounding bound
    assert bounds[190:].tolist() == fast.int8.bounds[:200:5].tolist()  # group a, int8: each row's own bound
    assert GATHER_BELOW == 0.5


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dense_worlds(), st.floats(0.02, 0.45))
def test_scattered_masks_give_the_exact_lane_through_int8_codes(world, share) -> None:
    matrix, query, _, keys, top_k = world
    mask = np.random.default_rng(len(keys)).random(len(keys)) < share  # below half of every group, mostly
    assert _fast_then_rescored(matrix, query, mask, keys, top_k) == _exact(matrix, query, mask, top_k)


def test_dense_index_with_a_scattered_mask_equals_an_index_of_the_permitted_rows() -> None:
    rng = np.random.default_rng(12)
    chunks = [make_chunk(f"c{i:04d}", f"chunk {i}") for i in range(1500)]  # one boundary group
    base = rng.standard_normal(48)
    vectors = labsrc.FixtureVectors(
        {c.chunk_id: base + rng.standard_normal(48) * (0.05 if i % 7 == 0 else 1.0) for i, c in enumerate(chunks)},
        {"q": base},
    )
    index = dense.DenseIndex(chunks, vectors)
    for seed in range(5):
        mask = np.random.default_rng(seed).random(len(index.chunks)) < 0.3
        alone = dense.DenseIndex([c for c, keep in zip(index.chunks, mask) if keep], vectors)
        got = [(c.chunk_id, s) for c, s in index.search("q", 10, mask)]
        assert got == [(c.chunk_id, s) for c, s in alone.search("q", 10)]
        assert len(got) == 10


def test_sixteen_threads_with_scattered_and_filled_masks_each_get_the_answer_alone() -> None:
    rng = np.random.default_rng(21)
    regions, tags = ["EU", "US"], ["t1", "t2", "t3", "t4"]
    chunks = [make_chunk(f"c{i:04d}", f"chunk {i}", region=regions[i % 2], acl_tag=tags[i % 4]) for i in range(2400)]
    queries = {f"q{j}": rng.standard_normal(64) for j in range(8)}
    vectors = labsrc.FixtureVectors({c.chunk_id: rng.standard_normal(64) for c in chunks}, queries)
    index = dense.DenseIndex(chunks, vectors)
    masks = []
    for seed in range(16):  # half of them whole groups (float32), half a random share inside them (int8 codes)
        pick = np.random.default_rng(seed)
        in_groups = np.array([c.acl_tag in {tags[seed % 4], tags[(seed + 1) % 4]} for c in index.chunks])
        masks.append(in_groups if seed % 2 else in_groups & (pick.random(len(index.chunks)) < 0.2))
    jobs = [(m, q) for m in range(16) for q in queries]
    alone = {(m, q): [(c.chunk_id, s) for c, s in index.search(q, 10, masks[m])] for m, q in jobs}
    start = threading.Barrier(16)

    def worker(offset: int) -> list[tuple[tuple[int, str], list[tuple[str, float]]]]:
        start.wait(timeout=30)
        out = []
        for _ in range(3):
            for m, q in jobs[offset:] + jobs[:offset]:
                out.append(((m, q), [(c.chunk_id, s) for c, s in index.search(q, 10, masks[m])]))
        return out

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = [f.result(timeout=120) for f in [pool.submit(worker, 8 * t) for t in range(16)]]
    seen = [(key, got) for result in results for key, got in result]
    assert len(seen) == 16 * 3 * len(jobs)
    assert all(got == alone[key] for key, got in seen)
    plans = [index.fast._plan(mask[index.fast.perm]) for mask in masks]
    assert [gathered.size > 0 for _, gathered in plans] == [m % 2 == 0 for m in range(16)]  # int8 codes
    assert [bool(runs) for runs, _ in plans] == [m % 2 == 1 for m in range(16)]  # float32 slices
