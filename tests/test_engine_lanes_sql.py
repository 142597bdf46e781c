"""The engine's Python-side helpers: rounding margin, literals, rescoring, analysis (one round trip needs a server)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from pg_support import requires_postgres

import labsrc
from labsrc.engines import (
    document_vectors,
    float8_array,
    float32_cosine_margin,
    rescore_dense,
    staging_rows,
    vector_literal,
)
from labsrc.engines.loading import _TERMS_COPY


def test_margin_is_twice_d_plus_4_float32_units():
    assert float32_cosine_margin(384) == 2.0 * (384 + 4) * 2.0**-24 + 1e-12
    assert float32_cosine_margin(3) == pytest.approx(14 * 5.96e-8, rel=1e-3)


@pytest.mark.parametrize("dimension", [3, 64, 384, 768])
def test_float32_cosine_stays_within_half_the_margin(dimension):
    rng = np.random.default_rng(dimension)
    docs = rng.normal(size=(200, dimension))
    query = rng.normal(size=dimension)
    exact = labsrc.cosine_similarity(docs, query)
    d32, q32 = docs.astype(np.float32), query.astype(np.float32)
    single = (d32 @ q32) / (np.linalg.norm(d32, axis=1) * np.linalg.norm(q32))  # all float32, as pgvector
    assert np.max(np.abs(single.astype(np.float64) - exact)) <= float32_cosine_margin(dimension) / 2


def test_vector_literal_writes_every_float_exactly():
    vector = np.array([0.1, -2.5e-7, 1 / 3])
    literal = vector_literal(vector)
    assert literal == "[0.1,-2.5e-07,0.3333333333333333]"
    assert [float(x) for x in literal[1:-1].split(",")] == vector.tolist()


def test_float8_array_reads_array_sends_layout():
    # ndim 1, no NULLs, element type 701 (float8), length 2, lower bound 1; then (byte length 8, value) per element.
    data = struct.pack(">iiIii", 1, 0, 701, 2, 1) + struct.pack(">id", 8, 0.1) + struct.pack(">id", 8, -2.5e-300)
    decoded = float8_array(data)
    assert decoded.dtype == np.float64 and decoded.tolist() == [0.1, -2.5e-300]
    assert float8_array(struct.pack(">iiI", 0, 0, 701)).shape == (0,)  # '{}': no dimension at all


@pytest.mark.parametrize(
    ("data", "names"),
    [
        (struct.pack(">iiIii", 1, 0, 700, 1, 1) + struct.pack(">if", 4, 1.0), "OID 700"),  # float4[]
        (struct.pack(">iiIii", 1, 1, 701, 1, 1) + struct.pack(">i", -1), "has_nulls=1"),  # '{NULL}'
        (struct.pack(">iiIiiii", 2, 0, 701, 1, 1, 1, 1) + struct.pack(">id", 8, 1.0), "ndim=2"),
        (struct.pack(">iiIii", 1, 0, 701, 2, 1) + struct.pack(">id", 8, 1.0), "not 32"),  # one element short
        (b"\x00\x01", "got 2 bytes"),
    ],
)
def test_float8_array_refuses_anything_else_naming_what_it_got(data, names):
    with pytest.raises(labsrc.LabError, match=names):
        float8_array(data)


@requires_postgres
def test_float8_array_decodes_what_the_server_sends_bit_for_bit(server):
    import psycopg

    values = [0.1, 1 / 3, -0.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, -123.456, 1e-7]
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        (data,) = conn.execute("SELECT array_send(%s::float8[])", (values,)).fetchone()
    decoded = float8_array(bytes(data))
    assert decoded.view(np.uint64).tolist() == np.asarray(values).view(np.uint64).tolist()  # -0.0 stays -0.0


def test_rescore_dense_keeps_positive_scores_by_score_then_id():
    query = np.array([1.0, 0.0])
    candidates = [("b", [1.0, 1.0]), ("a", [2.0, 2.0]), ("c", [1.0, 0.0]), ("d", [-1.0, 0.0]), ("e", [0.0, 1.0])]
    # cos: c = 1; a = b = 1/√2 (a tie, broken by id); d = -1 and e = 0 are dropped (score must be > 0).
    assert rescore_dense(candidates, query, 10) == [("c", 1.0), ("a", 2 / np.sqrt(8)), ("b", 1 / np.sqrt(2))]
    assert [cid for cid, _ in rescore_dense(candidates, query, 2)] == ["c", "a"]
    assert rescore_dense([], query, 3) == []


def test_staging_rows_count_each_chunks_terms_in_first_occurrence_order_as_copy_text():
    lengths, text = staging_rows([("c2", "Refund the refund"), ("c1", "laptop refund")], labsrc.lesson_analyzer)
    assert lengths == [2, 2]  # "the" is a stopword
    # chunk_id TAB {"term",...} TAB {tf,...}: the server unnests these into postings
    assert text == b'c2\t{"refund"}\t{2}\nc1\t{"laptop","refund"}\t{1,1}\n'


def test_staging_rows_escape_a_row_with_a_nul_in_a_term_term_by_term():
    # A row is escaped in one pass with NUL standing for the separator; a term holding a NUL itself must not
    # be split in two there. (The server then refuses the row: text cannot hold a NUL.)
    _, text = staging_rows([("c", "ignored")], lambda _: ['a"\0b', "c\\"])
    assert text == b'c\t{"a\\\\"\x00b","c\\\\\\\\"}\t{1,1}\n'


@requires_postgres
def test_staging_rows_reach_the_server_as_the_terms_they_are(server):
    import psycopg

    terms = ["a\\b", 'say "hi"', "NULL", "", "{x,y}", "tab\there", "new\nline", "cr\rx", "é", "a,b", "'q'"]
    ids = ["id\t1\\", "plain", "new\nline id"]
    lengths, text = staging_rows([(i, "ignored") for i in ids], lambda _: terms + ["NULL"])
    assert lengths == [len(terms) + 1] * 3
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute('CREATE TEMP TABLE t (chunk_id text COLLATE "C", terms text[], tfs int4[])')
        with conn.cursor() as cur, cur.copy(_TERMS_COPY.replace("lab_load_terms", "t")) as copy:
            copy.write(text)
        rows = conn.execute("SELECT chunk_id, terms, tfs FROM t").fetchall()
    want_tfs = [2 if t == "NULL" else 1 for t in terms]
    assert rows == [(i, terms, want_tfs) for i in ids]  # COPY and array syntax read back every term as it was


def test_document_vectors_leave_a_gap_where_the_source_refuses_a_chunk(data):
    from labsrc.lanes.vectordir import VectorDirectory

    chunks = sorted(data.chunks, key=lambda c: c.chunk_id)
    known = [c.chunk_id for c in chunks[:2]]
    source = VectorDirectory(known, np.eye(2, 3), ["q"], np.ones((1, 3)), version="toy")
    rows, dimension = document_vectors(chunks, source)
    assert dimension == 3
    assert [row is not None for row in rows] == [True, True] + [False] * (len(chunks) - 2)
