"""The engine's BM25 lane in SQL, two scoring statements side by side on one loaded store.

One load of the corpus (default: SciFact cycled to 100,000 chunks), 40 permission
sets taking turns, top-10, 400 requests, each request's BM25 lane run by both
statements in its own authorized transaction, the order alternating request by
request, each on a pooled reader session as :meth:`~labsrc.engines.PostgresRetriever.search` borrows one:

* ``engine``: :func:`labsrc.engines.sparse_lane` as it is: the query's terms
  unnested in order drive one index scan per term, a hash aggregate adds each
  chunk's contributions as they arrive (query-term order);
* ``sort-aggregate``: the statement the engine used before: every visible
  posting of the query's terms joined to the terms, sorted by (chunk, term
  position) and summed with ``sum(... ORDER BY ord)``.

Both read the same statistics statement first (:func:`labsrc.engines.bm25_statistics`).
Prints p50/p95 of statistics, scoring and both, per statement, and the ratio;
checks that both return ``==`` lists on every request (exit 1 if not).

    python benchmarks/bench_postgres_bm25.py --scifact DIR [--chunks 100000] [--requests 400] [--json OUT]

Needs the ``postgres`` extra; ``--scifact`` is BEIR SciFact's folder (abstracts and claims).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_tenants import SCIFACT_TAGS, pct, permission_sets, scifact_corpus

from labsrc.engines import PostgresRetriever, bm25_statistics, sparse_lane
from labsrc.lanes.sparse import idf_lucene
from labsrc.records.files import atomic_write_bytes

TOP_K = 10

#: The scoring statement before this change (a join, then a sort by chunk and term position), kept as the peer.
SORT_AGGREGATE_SQL = """
WITH q AS (
    SELECT term, idf, ord
    FROM unnest(%(terms)s::text[], %(idf)s::float8[]) WITH ORDINALITY AS q(term, idf, ord)
)
SELECT p.chunk_id,
       sum(q.idf * (p.tf * %(k1p1)s::float8)
           / (p.tf + %(k1)s::float8 * (%(omb)s::float8 + %(b)s::float8 * p.doc_len / %(avgdl)s::float8))
           ORDER BY q.ord) AS score
FROM lab_postings AS p JOIN q ON q.term = p.term
WHERE p.term = ANY (%(terms)s::text[])
GROUP BY p.chunk_id
ORDER BY score DESC, p.chunk_id
LIMIT %(top_k)s
"""


def sort_aggregate(conn: Any, query_terms: list[str], k1: float, b: float) -> tuple[list[tuple[str, float]], float]:
    """The old lane: statistics, then the sort-aggregate statement; its list and the scoring time (ms)."""
    stats = bm25_statistics(conn, list(dict.fromkeys(query_terms)))
    terms = [t for t in query_terms if stats.df.get(t, 0) > 0]
    if not terms or stats.n_docs == 0:
        return [], 0.0
    idf = idf_lucene(np.asarray([stats.df[t] for t in terms], dtype=np.int64), stats.n_docs)
    params = {"terms": terms, "idf": [float(x) for x in np.atleast_1d(idf)], "k1p1": k1 + 1.0, "k1": k1,
              "omb": 1.0 - b, "b": b, "avgdl": stats.avgdl, "top_k": TOP_K}  # fmt: skip
    t0 = time.perf_counter()
    rows = conn.execute(SORT_AGGREGATE_SQL, params).fetchall()
    return [(str(c), float(s)) for c, s in rows], (time.perf_counter() - t0) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scifact", metavar="DIR", required=True, help="BEIR SciFact folder")
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--sets", type=int, default=40)
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args(argv)
    chunks, vectors, claims = scifact_corpus(Path(args.scifact), args.chunks)
    sets = permission_sets(args.sets, SCIFACT_TAGS)
    print(f"loading {len(chunks):,} chunks ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    engine = PostgresRetriever(chunks, vectors)
    load_s = time.perf_counter() - t0
    totals: dict[str, list[float]] = {"engine": [], "sort-aggregate": []}
    differ = 0
    try:
        for i in range(args.requests):
            caller, day = sets[i % len(sets)]
            terms = engine.analyzer(claims[i % len(claims)])
            got: dict[str, list[tuple[str, float]]] = {}
            for name in (("engine", "sort-aggregate") if i % 2 == 0 else ("sort-aggregate", "engine")):
                with engine.store.request(caller, day) as conn:  # a pooled session, as search() borrows one
                    t = time.perf_counter()
                    if name == "engine":
                        got[name] = sparse_lane(conn, terms, TOP_K, k1=engine.k1, b=engine.b)[0]
                    else:
                        got[name] = sort_aggregate(conn, terms, engine.k1, engine.b)[0]
                    totals[name].append((time.perf_counter() - t) * 1e3)
            differ += got["engine"] != got["sort-aggregate"]
    finally:
        engine.close()
    result = {
        "corpus": f"SciFact cycled to {len(chunks):,}",
        "requests": args.requests,
        "permission_sets": args.sets,
        "top_k": TOP_K,
        "load_s": load_s,
        "bm25_ms": {name: {"p50": pct(ts, 50), "p95": pct(ts, 95), "mean": float(np.mean(ts))} for name, ts in totals.items()},
        "p95_ratio_sort_aggregate_over_engine": pct(totals["sort-aggregate"], 95) / pct(totals["engine"], 95),
        "lists_differ": differ,
    }
    print(f"{result['corpus']}, {args.requests} requests, {args.sets} permission sets, top-{TOP_K}; load {load_s:.1f} s")
    print(f"{'BM25 lane (statistics + scoring)':34} {'p50 ms':>8} {'p95 ms':>8}")
    for name, row in result["bm25_ms"].items():
        print(f"{name:34} {row['p50']:8.2f} {row['p95']:8.2f}")
    print(f"p95 sort-aggregate / engine: {result['p95_ratio_sort_aggregate_over_engine']:.2f}x; lists differing: {differ}")
    if args.json:
        atomic_write_bytes(args.json, (json.dumps(result, indent=2) + "\n").encode("utf-8"))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
