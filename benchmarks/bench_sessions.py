"""What a session per boundary costs the PostgreSQL engine: requests that switch permission sets, and ones that do not.

A pooled reader session serves requests of one boundary (region, ACL tags,
date) only, and is closed when a request of another draws it
(``labsrc.engines.sessions``): a placeholder setting's name, which no reset
removes and no catalog lists, would otherwise carry one caller's ids to the
next. This measures the price against the pool as it was (any session serves
any boundary; unsafe, measured here by switching the check off), in one run,
on one store, the two alternating block by block:

* ``rotating``: the permission sets take turns, so every request is a switch;
* ``grouped``: each set's requests come one after another (10 per set), so one
  request in 10 is a switch.

A third pool measures what the corpus version costs (the statement every request
runs after its authorization, so a session never outlives the rows it was keyed
to): the same per-boundary pool with that statement left out.

    python benchmarks/bench_sessions.py --scifact DIR [--chunks 100000] [--sets 40] [--requests 400] [--json OUT]

The corpus is ``bench_tenants.py``'s: SciFact cycled to ``--chunks`` with its
384-d all-MiniLM-L6-v2 vectors, claims as queries, an embedded server.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from bench_tenants import SCIFACT_TAGS, pct, permission_sets, scifact_corpus  # noqa: E402

import labsrc.engines.store as store_module  # noqa: E402
from labsrc.engines import PostgresRetriever  # noqa: E402
from labsrc.engines.sessions import SessionBoundaries  # noqa: E402
from labsrc.records.files import atomic_write_bytes  # noqa: E402

BLOCKS = 6  # each (order, pool) pair runs in this many blocks, the pairs alternating (each pool first twice)


def orders(sets: list, queries: list[str], requests: int) -> dict[str, list[tuple]]:
    rotating = [(sets[i % len(sets)], queries[i % len(queries)]) for i in range(requests)]
    grouped = [(sets[(i // 10) % len(sets)], queries[i % len(queries)]) for i in range(requests)]
    return {"rotating": rotating, "grouped": grouped}


def run(engine: PostgresRetriever, plan: list[tuple]) -> list[float]:
    times = []
    for (caller, day), query in plan:
        started = time.perf_counter()
        engine.search(query, caller, day, 10)
        times.append((time.perf_counter() - started) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scifact", metavar="DIR", required=True, help="BEIR SciFact folder (corpus, queries, vectors/)")
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--sets", type=int, default=40)
    parser.add_argument("--requests", type=int, default=400, help="requests per (order, pool) pair")
    parser.add_argument("--json", metavar="OUT", help="write the measurements as JSON")
    args = parser.parse_args()

    chunks, source, queries = scifact_corpus(Path(args.scifact), args.chunks)
    sets = permission_sets(args.sets, SCIFACT_TAGS)
    plans = orders(sets, queries, args.requests)
    started = time.perf_counter()
    engine = PostgresRetriever(chunks, source)
    print(f"loaded {len(chunks):,} chunks in {time.perf_counter() - started:.1f} s; {len(sets)} permission sets")
    real_claim, real_version = SessionBoundaries.claim, store_module.corpus_version
    pools = ("per boundary", "per boundary, no corpus version", "shared (old, unsafe)")
    times: dict[tuple[str, str], list[float]] = {}
    try:
        run(engine, plans["grouped"][:40])  # warm-up: the server's caches, psycopg's prepared statements
        per_block = args.requests // BLOCKS
        for block in range(BLOCKS):
            for order, plan in plans.items():
                for pool in pools[block % len(pools) :] + pools[: block % len(pools)]:  # who runs first (on
                    # a part of the plan the server's caches have not seen yet) rotates from block to block
                    SessionBoundaries.claim = real_claim if pool != pools[2] else (lambda self, conn, key: True)
                    store_module.corpus_version = real_version if pool == pools[0] else (lambda conn, schema: (0, 0))
                    part = plan[block * per_block : (block + 1) * per_block]
                    times.setdefault((order, pool), []).extend(run(engine, part))
        switches = engine.store.session_boundaries.closed
    finally:
        SessionBoundaries.claim, store_module.corpus_version = real_claim, real_version
        engine.close()

    rows = []
    print(f"\n{'order':10} {'sessions':32} {'p50 ms':>8} {'p95 ms':>8} {'p50 ratio':>10} {'p95 ratio':>10}")
    for order in plans:
        base = times[(order, "shared (old, unsafe)")]
        for pool in pools:
            values = times[(order, pool)]
            row = {"order": order, "sessions": pool, "requests": len(values), "p50_ms": pct(values, 50),
                   "p95_ms": pct(values, 95)}  # fmt: skip
            row["p50_ratio"] = row["p50_ms"] / pct(base, 50)
            row["p95_ratio"] = row["p95_ms"] / pct(base, 95)
            rows.append(row)
            print(f"{order:10} {pool:32} {row['p50_ms']:8.2f} {row['p95_ms']:8.2f} {row['p50_ratio']:10.2f} "
                  f"{row['p95_ratio']:10.2f}")  # fmt: skip
    print(f"\nsessions closed for serving another boundary: {switches}")
    no_version = {order: pct(times[(order, pools[1])], 50) for order in plans}
    for order in plans:
        print(f"corpus version, {order}: p50 {pct(times[(order, pools[0])], 50):.2f} ms against {no_version[order]:.2f} ms "
              f"without it ({pct(times[(order, pools[0])], 50) / no_version[order]:.2f}x)")
    if args.json:
        out = {"chunks": len(chunks), "sets": len(sets), "requests_per_pair": args.requests, "blocks": BLOCKS,
               "switches": switches, "versions": engine.store.versions, "rows": rows}  # fmt: skip
        atomic_write_bytes(Path(args.json), (json.dumps(out, indent=2) + "\n").encode("utf-8"))


if __name__ == "__main__":
    main()
