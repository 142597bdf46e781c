"""The exact dense lane against FAISS's exact filtered search, at 384 dimensions and 100,000 chunks.

One run, same machine, one thread each (BLAS and OpenMP pinned to 1), same
queries, the peers interleaved round by round, 37.5 % of the rows permitted, in two layouts measured in the same run:

* ``groups`` (contiguous): the permitted rows are 3 whole boundary groups of 8
  (region x ACL tag), as a caller's region and tags give;
* ``scattered``: every chunk in one boundary group and a random 37.5 % of its
  rows permitted, as date windows inside a group give; ``--masks`` (default 8)
  such masks, query i using mask i mod 8, as callers with different dates take
  turns (one mask repeated would keep its rows in the CPU's cache).

Rows:

* ``labsrc DenseIndex``: an approximate pass with a bound per row, then the
  candidates within their bounds of the k-th rescored in float64: exact. A group
  the mask fills at least half is read whole in float32 (BLAS); one it scatters
  in has only its permitted rows' int8 codes gathered (``labsrc.lanes.codes``);
* ``labsrc exact einsum`` (the lane before the fast pass): float64 cosine of every permitted row;
* ``FAISS IndexFlatIP + IDSelectorBitmap``: FAISS's documented exact filtered search, float32;
* ``FAISS IndexFlatIP per group`` (groups layout only): one flat index per boundary
  group, the permitted ones searched and merged: FAISS's fastest exact layout for
  that filter. A scattered mask has no such layout: the selector is FAISS's fastest.

Vectors: random unit vectors, or ``--scifact DIR`` for SciFact's all-MiniLM-L6-v2
vectors cycled to ``--chunks`` rows (queries: SciFact's test queries). Prints p50
and p95 per query and each peer's p50 over labsrc's, checks that labsrc's lists equal
the exact einsum's (``==``), and writes JSON with ``--json``.

    python benchmarks/bench_dense.py [--chunks 100000] [--dim 384] [--queries 200] [--masks 8] [--layout groups scattered]
                                     [--scifact DIR] [--json OUT]
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
from labsrc.records.files import atomic_write_bytes  # noqa: E402

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


def timed(peers: list[tuple[str, object, str]], queries: list[str], rounds: int) -> dict[str, list[float]]:
    """Per-query milliseconds of every peer over ``rounds`` passes, the peers interleaved pass by pass
    (so a slow minute of the machine falls on all of them); the first pass is a warm-up, not kept."""
    out: dict[str, list[float]] = {name: [] for name, _, _ in peers}
    for round_ in range(rounds + 1):
        for name, fn, _ in peers:
            for q in queries:
                start = time.perf_counter()
                fn(q)
                if round_:
                    out[name].append((time.perf_counter() - start) * 1000)
    return out


def run_layout(layout: str, docs: np.ndarray, query_vectors: np.ndarray, args: argparse.Namespace) -> dict:
    """Every row of one layout, timed in this process; returns the layout's JSON record."""
    import faiss

    n, d = docs.shape
    rng = np.random.default_rng(1)
    day = dt.date(2026, 1, 1)
    if layout == "groups":
        where = zip(rng.integers(0, 2, n), rng.integers(0, 4, n))
    else:  # one region and tag for every chunk: the mask alone decides
        where = ((0, 0) for _ in range(n))
    chunks = [labsrc.PolicyChunk(f"c{i:06d}", "d", "p", "v", REGIONS[r], TAGS[t], day, None, "x")
              for i, (r, t) in enumerate(where)]
    source = MatrixVectors({c.chunk_id: i for i, c in enumerate(chunks)}, docs, QueryTable(query_vectors))
    t0 = time.perf_counter()
    index = DenseIndex(chunks, source)
    build_s = time.perf_counter() - t0
    region, tags = PERMITTED
    if layout == "groups":
        masks = [np.array([c.region == region and c.acl_tag in tags for c in index.chunks])]
    else:  # several callers' date windows: query i uses mask i % --masks, so no mask stays in cache
        masks = []
        for _ in range(args.masks):
            mask = np.zeros(n, dtype=bool)
            mask[rng.choice(n, size=round(n * 0.375), replace=False)] = True
            masks.append(mask)
    permitted_rows = [np.flatnonzero(mask) for mask in masks]
    queries = [f"q{i}" for i in range(len(query_vectors))]
    k = args.top_k

    def which(q: str) -> int:
        return int(q[1:]) % len(masks)

    def exact_einsum(q: str) -> list[tuple[str, float]]:
        vector, rows = source.query_vector(q), permitted_rows[which(q)]
        scores = dense._cosine(index.matrix[rows], index.norms[rows], vector)
        return [(index.chunks[rows[p]].chunk_id, float(scores[p])) for p in top_k_positions(scores, k)]

    def labsrc_lane(q: str) -> list[tuple[str, float]]:
        return [(c.chunk_id, s) for c, s in index.search(q, k, masks[which(q)])]

    flat = faiss.IndexFlatIP(d)
    flat.add(index.matrix.astype(np.float32) / np.maximum(index.norms, 1e-300)[:, None].astype(np.float32))
    bitmaps = [np.packbits(mask, bitorder="little") for mask in masks]  # kept alive: the selectors point into them
    params = [faiss.SearchParameters(sel=faiss.IDSelectorBitmap(n, faiss.swig_ptr(bits))) for bits in bitmaps]
    unit32 = flat.reconstruct_n(0, n)

    def faiss_selector(q: str) -> None:
        vector = source.query_vector(q).astype(np.float32)
        flat.search((vector / np.linalg.norm(vector))[None], k, params=params[which(q)])

    groups = []
    for r in REGIONS:
        for t in TAGS:
            ids = np.flatnonzero([c.region == r and c.acl_tag == t for c in index.chunks])
            if ids.size:
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
    peers = [
        ("labsrc DenseIndex", labsrc_lane, "float32 over filled groups, int8 codes of scattered rows, + float64 rescore (exact)"),
        ("labsrc exact einsum", exact_einsum, "float64 einsum over every permitted row (the lane before)"),
        ("FAISS IndexFlatIP + IDSelectorBitmap", faiss_selector, "float32, 1 thread, documented filtered search"),
    ]
    if layout == "groups":
        peers.append(("FAISS IndexFlatIP per group", faiss_per_group,
                      "float32, 1 thread, 3 group indexes searched and merged"))
    samples = timed(peers, queries, args.rounds)
    rows_out = {name: {"config": config, "p50_ms": float(np.percentile(samples[name], 50)),
                       "p95_ms": float(np.percentile(samples[name], 95))} for name, _, config in peers}
    ours = rows_out["labsrc DenseIndex"]["p50_ms"]
    share = float(np.mean([mask.mean() for mask in masks]))
    print(f"layout {layout}: {n:,} x {d}, {share:.1%} permitted ({len(masks)} mask(s) in turn), top-{k}, "
          f"{len(queries)} queries x {args.rounds} rounds")
    print(f"labsrc == exact einsum on every query: {same}; DenseIndex built in {build_s:.1f} s")
    print(f"{'':38} {'p50 ms':>8} {'p95 ms':>8} {'p50 / labsrc':>13}  configuration")
    for name, row in rows_out.items():
        print(f"{name:38} {row['p50_ms']:8.3f} {row['p95_ms']:8.3f} {row['p50_ms'] / ours:12.2f}x  {row['config']}")
    print()
    return {"permitted": share, "masks": len(masks), "exact": same, "rows": rows_out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--masks", type=int, default=8, help="scattered layout: distinct random masks, taken in turn")
    parser.add_argument("--layout", nargs="+", choices=("groups", "scattered"), default=["groups", "scattered"])
    parser.add_argument("--scifact", metavar="DIR", help="BEIR SciFact folder (with vectors/<model>/) instead of random vectors")
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args()
    import faiss

    faiss.omp_set_num_threads(1)
    docs, query_vectors, described = load_vectors(args)
    print(f"{described}: {docs.shape[0]:,} x {docs.shape[1]}\n")
    layouts = {layout: run_layout(layout, docs, query_vectors, args) for layout in args.layout}
    if args.json:
        atomic_write_bytes(args.json, (json.dumps({
            "corpus": described, "chunks": docs.shape[0], "dim": docs.shape[1], "top_k": args.top_k,
            "queries": len(query_vectors), "rounds": args.rounds, "machine": platform.processor() or platform.machine(),
            "layouts": layouts,
        }, indent=1) + "\n").encode("utf-8"))


if __name__ == "__main__":
    main()
