"""Many callers, one corpus: PolicyRetriever latency and memory with many distinct permission sets.

A synthetic corpus (default 100,000 chunks, 3 regions, 3 ACL tags, effective
dates) is searched round-robin by callers with 40 distinct permission sets
(region x tag subset x date). Each request gets exact per-caller BM25
statistics; the benchmark prints p50/p95 per request and per stage, the peak
memory, and what the old design cost: building a BM25 index and a vector
matrix for each permitted set (what a cache miss did, and 40 sets round-robin
missed an 8-deep cache on every request). It also checks, on one request per
permission set, that every lane equals a retriever holding only that caller's
permitted chunks (``==``).

    python benchmarks/bench_tenants.py [--chunks 100000] [--sets 40] [--requests 400] [--dim 64] [--json OUT]
    python benchmarks/bench_tenants.py --scifact DIR [--chunks 100000] ...   # real text and 384-d vectors

With ``--scifact`` the corpus is BEIR SciFact's abstracts cycled to ``--chunks``
(4 ACL tags, 3 regions, effective dates drawn as above) with their
all-MiniLM-L6-v2 vectors, and the queries are SciFact's claims with theirs.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import datetime as dt  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from bench_scale import WORDS, synthetic_corpus  # noqa: E402

import labsrc  # noqa: E402
from labsrc.lanes import BM25Index, DenseIndex  # noqa: E402
from labsrc.records.files import atomic_write_bytes  # noqa: E402


TAGS = ("support:eu", "support:us", "legal")
SCIFACT_TAGS = (*TAGS, "finance")


class QueryTable:
    """Query vectors looked up by the query's text (an encoder for MatrixVectors)."""

    version = "scifact-all-MiniLM-L6-v2"

    def __init__(self, by_text: dict[str, np.ndarray]) -> None:
        self.by_text = by_text

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.by_text[t] for t in texts])


def scifact_corpus(folder: Path, n: int) -> tuple[tuple[labsrc.PolicyChunk, ...], object, list[str]]:
    """SciFact cycled to ``n`` chunks, with its vectors (rows follow the cycle) and its claims as queries."""
    from labsrc.datasets.beir import load_corpus, load_queries
    from labsrc.lanes.dense import MatrixVectors
    from labsrc.lanes.vectordir import load_vector_dir

    corpus = load_corpus(folder / "corpus.jsonl")
    loaded = load_vector_dir(next(p for p in sorted((folder / "vectors").iterdir()) if p.is_dir()))
    row_of = {doc_id: i for i, doc_id in enumerate(loaded.doc_ids)}
    doc_ids = [d for d in loaded.doc_ids if d in corpus]
    rng = random.Random(0)
    chunks, rows = [], []
    for i in range(n):
        doc = corpus[doc_ids[i % len(doc_ids)]]
        start = dt.date(2025, 1, 1) + dt.timedelta(days=rng.randint(0, 500))
        end = None if rng.random() < 0.8 else start + dt.timedelta(days=rng.randint(0, 300))
        chunks.append(labsrc.PolicyChunk(
            chunk_id=f"s{i:06d}", document_id=doc.doc_id, parent_id=doc.doc_id, version="v1",
            region=rng.choice(["EU", "US", "APAC"]), acl_tag=rng.choice(SCIFACT_TAGS),
            effective_from=start, effective_to=end, text=f"{doc.title} {doc.text}".strip(),
        ))  # fmt: skip
        rows.append(row_of[doc.doc_id])
    texts = load_queries(folder / "queries.jsonl")
    query_matrix = loaded.query_matrix(loaded.query_ids)
    by_text = {texts[q]: np.asarray(query_matrix[i], dtype=np.float64) for i, q in enumerate(loaded.query_ids) if q in texts}
    documents = np.asarray(loaded.documents, dtype=np.float64)[rows]
    source = MatrixVectors({c.chunk_id: i for i, c in enumerate(chunks)}, documents, QueryTable(by_text))
    return tuple(chunks), source, sorted(by_text)


def synthetic_workload(n: int, dim: int, requests: int) -> tuple[tuple[labsrc.PolicyChunk, ...], object, list[str]]:
    """``bench_scale``'s synthetic corpus of ``n`` chunks, random ``dim``-d vectors and ``requests`` 4-word queries."""
    chunks = tuple(synthetic_corpus(n))
    rng = np.random.default_rng(0)
    word_rng = random.Random(1)
    queries = [" ".join(word_rng.choice(WORDS) for _ in range(4)) for _ in range(requests)]
    vectors = labsrc.FixtureVectors(
        {c.chunk_id: rng.standard_normal(dim) for c in chunks}, {q: rng.standard_normal(dim) for q in queries}
    )
    return chunks, vectors, queries


def permission_sets(count: int, tags: tuple[str, ...] = TAGS) -> list[tuple[labsrc.Caller, dt.date]]:
    subsets = [frozenset(s) for r in range(1, 4) for s in itertools.combinations(tags, r)]
    days = [dt.date(2026, 5, 27), dt.date(2025, 9, 1)]
    combos = [(region, subset, day) for day in days for region in ["EU", "US", "APAC"] for subset in subsets]
    if count > len(combos):
        raise SystemExit(f"at most {len(combos)} permission sets")
    return [(labsrc.Caller(f"actor-{i}", region, subset), day) for i, (region, subset, day) in enumerate(combos[:count])]


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def lanes_of(result: labsrc.RetrievalResult) -> dict[str, list[tuple[str, float]]]:
    return {lane: [(c.chunk_id, s) for c, s in getattr(result, lane)] for lane in ("sparse", "dense", "fused")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--sets", type=int, default=40)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--scifact", metavar="DIR", help="BEIR SciFact folder: real text and its 384-d vectors")
    parser.add_argument("--json", metavar="OUT", help="write the measurements as JSON")
    args = parser.parse_args()
    for name in ("chunks", "sets", "requests", "dim"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, not {getattr(args, name)}")

    if args.scifact:
        chunks, vectors, claims = scifact_corpus(Path(args.scifact), args.chunks)
        queries = [claims[i % len(claims)] for i in range(args.requests)]
        args.dim = vectors.document_matrix(chunks[:1]).shape[1]
        sets = permission_sets(args.sets, SCIFACT_TAGS)
    else:
        chunks, vectors, queries = synthetic_workload(args.chunks, args.dim, args.requests)
        sets = permission_sets(args.sets)
    tracemalloc.start()
    t0 = time.perf_counter()
    retriever = labsrc.PolicyRetriever(chunks, vectors)
    retriever.search(queries[0], *sets[0], 10)  # builds the one shared index and matrix
    build_s = time.perf_counter() - t0
    masks = {retriever.boundary.mask(caller, day).tobytes() for caller, day in sets}
    sizes = [len(retriever.universe(caller, day)) for caller, day in sets]
    corpus = f"SciFact cycled to {len(chunks):,}" if args.scifact else f"synthetic corpus {len(chunks):,}"
    print(f"{corpus} chunks, {args.dim}-d vectors; {len(sets)} permission sets "
          f"({len(masks)} distinct masks, universes {min(sizes):,}-{max(sizes):,} chunks)")  # fmt: skip
    print(f"shared index and matrix built in {build_s:.1f} s")

    totals: list[float] = []
    stages: dict[str, list[float]] = {s: [] for s in labsrc.STAGES}
    for i, query in enumerate(queries):
        caller, day = sets[i % len(sets)]
        t0 = time.perf_counter()
        result = retriever.search(query, caller, day, 10)
        totals.append(1000 * (time.perf_counter() - t0))
        for stage, ms in result.trace.timings_ms.items():
            stages[stage].append(ms)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"\n{args.requests} requests round-robin over {len(sets)} permission sets (ms per request):")
    print(f"{'stage':<10}{'p50':>8}{'p95':>8}")
    for stage, values in stages.items():
        print(f"{stage:<10}{pct(values, 50):8.2f}{pct(values, 95):8.2f}")
    print(f"{'total':<10}{pct(totals, 50):8.2f}{pct(totals, 95):8.2f}")
    print(f"peak traced memory {peak / 2**20:.0f} MiB; max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")

    # The old design: a BM25 index and a vector matrix per permitted set, rebuilt on each cache miss.
    rebuild = []
    for caller, day in sets[:5]:
        permitted = retriever.universe(caller, day)
        t0 = time.perf_counter()
        BM25Index.build((c.chunk_id, c.text) for c in permitted)
        DenseIndex(permitted, vectors)
        rebuild.append(1000 * (time.perf_counter() - t0))
    print(f"per-universe index + matrix build (old design, every miss): p50 {pct(rebuild, 50):.0f} ms")

    # Noninterference at scale: each set's lanes equal a retriever over its permitted chunks only.
    checked = 0
    for i, (caller, day) in enumerate(sets):
        alone = labsrc.PolicyRetriever(retriever.universe(caller, day), vectors)
        query = queries[i % len(queries)]  # fewer requests than sets: the queries come round again
        if lanes_of(retriever.search(query, caller, day, 10)) != lanes_of(alone.search(query, caller, day, 10)):
            raise SystemExit(f"lanes differ from a permitted-only retriever for {caller} on {day}")
        checked += 1
    print(f"every lane == a permitted-only retriever: checked {checked} permission sets")

    report = {
        "corpus": "scifact" if args.scifact else "synthetic", "chunks": len(chunks), "dim": args.dim, "permission_sets": len(sets), "distinct_masks": len(masks),
        "requests": args.requests, "build_s": build_s,
        "p50_ms": pct(totals, 50), "p95_ms": pct(totals, 95),
        "stages": {s: {"p50_ms": pct(v, 50), "p95_ms": pct(v, 95)} for s, v in stages.items()},
        "peak_traced_mib": peak / 2**20, "old_design_rebuild_p50_ms": pct(rebuild, 50), "equality_checked": checked,
    }  # fmt: skip
    if args.json:
        atomic_write_bytes(args.json, (json.dumps(report, indent=2) + "\n").encode("utf-8"))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
