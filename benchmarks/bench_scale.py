"""How the lesson API behaves on a large synthetic corpus (default 100,000 chunks).

Prints the one-off costs (retriever construction, first request per universe,
which builds the postings and the vector matrix) and the per-stage p50/p95 of
warm requests, for the PolicyRetriever object and the lesson-level hybrid_rank.

    python benchmarks/bench_scale.py [--chunks 100000] [--queries 200] [--dim 64]
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import time

import numpy as np

import labsrc

WORDS = [f"term{i}" for i in range(5000)] + ["refund", "replacement", "laptop", "parcel", "damaged", "footwear"]


def synthetic_corpus(n: int, seed: int = 0) -> list[labsrc.PolicyChunk]:
    rng = random.Random(seed)
    chunks = []
    for i in range(n):
        start = dt.date(2025, 1, 1) + dt.timedelta(days=rng.randint(0, 500))
        end = None if rng.random() < 0.8 else start + dt.timedelta(days=rng.randint(0, 300))
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 80))) + f" RPL-{i}"
        chunks.append(
            labsrc.PolicyChunk(
                chunk_id=f"c{i:06d}", document_id=f"d{i // 4}", parent_id=f"p{i // 4}", version="v1",
                region=rng.choice(["EU", "US", "APAC"]), acl_tag=rng.choice(["support:eu", "support:us", "legal"]),
                effective_from=start, effective_to=end, text=text,
            )
        )  # fmt: skip
    return chunks


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dim", type=int, default=64)
    args = parser.parse_args()

    t0 = time.perf_counter()
    chunks = tuple(synthetic_corpus(args.chunks))  # a tuple: hybrid_rank recognises it in O(1)
    rng = np.random.default_rng(0)
    vectors = labsrc.FixtureVectors(
        {c.chunk_id: rng.standard_normal(args.dim) for c in chunks},
        {f"q{i}": rng.standard_normal(args.dim) for i in range(args.queries)},
    )
    print(f"corpus: {len(chunks):,} chunks, {args.dim}-d vectors (generated in {time.perf_counter() - t0:.1f} s)")
    caller = labsrc.Caller("eu-agent", "EU", {"support:eu", "legal"})
    day = dt.date(2026, 5, 27)
    word_rng = random.Random(1)
    queries = [f"q{i} " + " ".join(word_rng.choice(WORDS) for _ in range(3)) for i in range(args.queries)]
    # FixtureVectors look queries up by exact text; register each query's vector under its text.
    vectors = labsrc.FixtureVectors(vectors.documents, {q: vectors.queries[q.split()[0]] for q in queries})

    t0 = time.perf_counter()
    retriever = labsrc.PolicyRetriever(chunks, vectors)
    print(f"PolicyRetriever(...)            {1000 * (time.perf_counter() - t0):9.1f} ms")
    t0 = time.perf_counter()
    first = retriever.search(queries[0], caller, day, 10)
    print(f"first request (builds indexes)  {1000 * (time.perf_counter() - t0):9.1f} ms"
          f"   universe {len(retriever.universe(caller, day)):,} chunks")  # fmt: skip
    print(f"   stages: { {k: round(v, 1) for k, v in first.trace.timings_ms.items()} }")

    stages: dict[str, list[float]] = {s: [] for s in labsrc.STAGES}
    totals = []
    for query in queries:
        t0 = time.perf_counter()
        result = retriever.search(query, caller, day, 10)
        totals.append(1000 * (time.perf_counter() - t0))
        for stage, ms in result.trace.timings_ms.items():
            stages[stage].append(ms)
    print(f"\nwarm PolicyRetriever.search over {len(queries)} queries (ms):")
    print(f"{'stage':<10}{'p50':>8}{'p95':>8}{'budget':>8}")
    for stage, values in stages.items():
        print(f"{stage:<10}{percentile(values, 50):8.2f}{percentile(values, 95):8.2f}{labsrc.RETRIEVAL_BUDGET_MS[stage]:8}")
    print(f"{'total':<10}{percentile(totals, 50):8.2f}{percentile(totals, 95):8.2f}")

    api = []
    for query in queries[:50]:
        t0 = time.perf_counter()
        labsrc.hybrid_rank(query, caller, chunks, vectors, day, top_k=10)
        api.append(1000 * (time.perf_counter() - t0))
    print(f"\nlesson API hybrid_rank (after its first call): p50 {percentile(api[1:], 50):.2f} ms, "
          f"p95 {percentile(api[1:], 95):.2f} ms; first call {api[0]:.0f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
