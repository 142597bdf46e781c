"""The exact dense lane against FAISS's exact filtered search, at 384 dimensions and 100,000 chunks.

One run, same machine, one thread each (BLAS and OpenMP pinned to 1), same
queries, same permitted rows (37.5 %: 3 of 8 boundary groups, region x ACL tag):

* ``labsrc DenseIndex``: float32 pass over the permitted groups' slices, then the
  candidates within the rounding bound rescored in float64: exact;
* ``labsrc exact einsum`` (the lane before the fast pass): float64 cosine of every permitted row;
* ``FAISS IndexFlatIP + IDSelectorBitmap``: FAISS's documented exact filtered search, float32;
* ``FAISS IndexFlatIP per group``: one flat index per boundary group, the permitted
  ones searched and merged: FAISS's fastest exact layout for this filter.

Vectors: random unit vectors, or ``--scifact DIR`` for SciFact's all-MiniLM-L6-v2
vectors cycled to ``--chunks`` rows (queries: SciFact's test queries). Prints p50
and p95 per query and each peer's p50 over labsrc's, checks that labsrc's lists equal
the exact einsum's (``==``), and writes JSON with ``--json``.

    python benchmarks/bench_dense.py [--chunks 100000] [--dim 384] [--queries 200] [--scifact DIR] [--json OUT]
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import datetime as dt  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import labsrc  # noqa: E402
from labsrc.lanes import dense  # noqa: E402
from labsrc.lanes.dense import DenseIndex, MatrixVectors  # noqa: E402
from labsrc.ranking import top_k_positions  # noqa: E402

REGIONS, TAGS = ("EU", "US"), ("support", "legal", "finance", "ops")
PERMITTED = ("EU", frozenset({"support", "legal", "finance"}))  # 3 of the 8 groups: 37.5 %


class QueryTable:
    """An encoder that looks query vectors up by their text, ``q<i>``."""

    version = "bench-queries"

    def __init__(self, vectors: np.ndarray) -> None:
        self.vectors = vectors

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.vectors[int(t[1:])] for t in texts])


def load_vectors(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, str]:
    rng = np.random.default_rng(0)
    if args.scifact:
        from labsrc.lanes.vectordir import load_vector_dir

        folder = next(p for p in sorted(Path(args.scifact, "vectors").iterdir()) if p.is_dir())
        loaded = load_vector_dir(folder)
        docs = np.asarray(loaded.documents, dtype=np.float64)
        docs = docs[np.arange(args.chunks) % docs.shape[0]]  # cycled
        queries = np.asarray(loaded.query_matrix(loaded.query_ids), dtype=np.float64)[: args.queries]
        return docs, queries, f"SciFact {folder.name} cycled to {args.chunks:,}"
    docs = rng.standard_normal((args.chunks, args.dim))
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = rng.standard_normal((args.queries, args.dim))
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return docs, queries, f"random unit vectors, {args.dim}-d"


def timed(fn, queries: list[str], rounds: int) -> list[float]:
    """Per-query milliseconds over ``rounds`` passes (the first pass is a warm-up, not kept)."""
    out: list[float] = []
    for round_ in range(rounds + 1):
        for q in queries:
            start = time.perf_counter()
            fn(q)
            if round_:
                out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scifact", metavar="DIR", help="BEIR SciFact folder (with vectors/<model>/) instead of random vectors")
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args()
    import faiss

    faiss.omp_set_num_threads(1)
    docs, query_vectors, described = load_vectors(args)
    n, d = docs.shape
    rng = np.random.default_rng(1)
    day = dt.date(2026, 1, 1)
    chunks = [
        labsrc.PolicyChunk(f"c{i:06d}", "d", "p", "v", REGIONS[r], TAGS[t], day, None, "x")
        for i, (r, t) in enumerate(zip(rng.integers(0, 2, n), rng.integers(0, 4, n)))
    ]
    source = MatrixVectors({c.chunk_id: i for i, c in enumerate(chunks)}, docs, QueryTable(query_vectors))
    t0 = time.perf_counter()
    index = DenseIndex(chunks, source)
    build_s = time.perf_counter() - t0
    region, tags = PERMITTED
    mask = np.array([c.region == region and c.acl_tag in tags for c in index.chunks])
    rows = np.flatnonzero(mask)
    queries = [f"q{i}" for i in range(len(query_vectors))]
    k = args.top_k

    def exact_einsum(q: str) -> list[tuple[str, float]]:
        vector = source.query_vector(q)
        scores = dense._cosine(index.matrix[rows], index.norms[rows], vector)
        return [(index.chunks[rows[p]].chunk_id, float(scores[p])) for p in top_k_positions(scores, k)]

    def labsrc_lane(q: str) -> list[tuple[str, float]]:
        return [(c.chunk_id, s) for c, s in index.search(q, k, mask)]

    flat = faiss.IndexFlatIP(d)
    flat.add(index.matrix.astype(np.float32) / np.maximum(index.norms, 1e-300)[:, None].astype(np.float32))
    bitmap = np.packbits(mask, bitorder="little")
    params = faiss.SearchParameters(sel=faiss.IDSelectorBitmap(n, faiss.swig_ptr(bitmap)))
    unit32 = flat.reconstruct_n(0, n)

    def faiss_selector(q: str) -> None:
        vector = source.query_vector(q).astype(np.float32)
        flat.search((vector / np.linalg.norm(vector))[None], k, params=params)

    groups = []
    for r in REGIONS:
        for t in TAGS:
            ids = np.flatnonzero([c.region == r and c.acl_tag == t for c in index.chunks])
            sub = faiss.IndexFlatIP(d)
            sub.add(unit32[ids])
            groups.append(((r, t), sub, ids))
    permitted_groups = [(sub, ids) for (r, t), sub, ids in groups if r == region and t in tags]

    def faiss_per_group(q: str) -> None:
        vector = source.query_vector(q).astype(np.float32)
        vector = (vector / np.linalg.norm(vector))[None]
        found = [(sub.search(vector, k), ids) for sub, ids in permitted_groups]
        scores = np.concatenate([s[0] for (s, _), _ in found])
        labels = np.concatenate([ids[i[0]] for (_, i), ids in found])
        order = np.argsort(-scores, kind="stable")[:k]
        return labels[order]

    same = all(labsrc_lane(q) == exact_einsum(q) for q in queries)
    rows_out = {}
    for name, fn, config in (
        ("labsrc DenseIndex", labsrc_lane, "float32 BLAS pass over permitted groups + float64 rescore (exact)"),
        ("labsrc exact einsum", exact_einsum, "float64 einsum over every permitted row (the lane before)"),
        ("FAISS IndexFlatIP + IDSelectorBitmap", faiss_selector, "float32, 1 thread, documented filtered search"),
        ("FAISS IndexFlatIP per group", faiss_per_group, "float32, 1 thread, 3 group indexes searched and merged"),
    ):
        samples = timed(fn, queries, args.rounds)
        rows_out[name] = {"config": config, "p50_ms": float(np.percentile(samples, 50)),
                          "p95_ms": float(np.percentile(samples, 95))}
    ours = rows_out["labsrc DenseIndex"]["p50_ms"]
    print(f"{described}: {n:,} x {d}, {mask.mean():.1%} permitted, top-{k}, {len(queries)} queries x {args.rounds} rounds")
    print(f"labsrc == exact einsum on every query: {same}; DenseIndex built in {build_s:.1f} s")
    print(f"{'':38} {'p50 ms':>8} {'p95 ms':>8} {'p50 / labsrc':>13}  configuration")
    for name, row in rows_out.items():
        print(f"{name:38} {row['p50_ms']:8.3f} {row['p95_ms']:8.3f} {row['p50_ms'] / ours:12.2f}x  {row['config']}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "corpus": described, "chunks": n, "dim": d, "permitted": float(mask.mean()), "top_k": k,
            "queries": len(queries), "rounds": args.rounds, "exact": same, "machine": platform.processor() or platform.machine(),
            "rows": rows_out,
        }, indent=1) + "\n")


if __name__ == "__main__":
    main()
