"""One PostgresRetriever, many threads: every result equals the same request run alone, and holds no hidden chunk.

The engine once shared one reader connection between threads: a second thread's
transaction became a savepoint inside the first one's, and its authorization
overwrote the first caller's. Here 16 threads send 2,400 requests from 40
callers with distinct permission sets to one retriever.
"""

from __future__ import annotations

import datetime as dt
import itertools
import threading
from concurrent.futures import ThreadPoolExecutor

from pg_support import lanes_of, replay_stable, requires_postgres
from test_properties import ENCODER

import labsrc
from labsrc.engines import PostgresRetriever

pytestmark = requires_postgres

DAY = dt.date(2026, 5, 27)
REGIONS = ["EU", "US", "APAC", "LATAM"]
TAGS = ["support:eu", "support:us", "merchant:vip-ops", "legal:internal", "partner:a", "partner:b"]
WORDS = ["refund", "laptop", "damaged", "parcel", "carrier", "warranty", "footwear", "vip", "escalation", "rule"]
QUERIES = ["refund laptop", "damaged parcel carrier", "vip escalation rule", "warranty footwear", "refund", "rule rule vip"]
THREADS = 16
REQUESTS = 2400


def corpus() -> list[labsrc.PolicyChunk]:
    """240 chunks over 4 regions × 6 tags, some superseded, some not yet in force, texts from a small vocabulary."""
    chunks = []
    for i in range(240):
        words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(3 + i % 5)]
        chunks.append(
            labsrc.PolicyChunk(
                chunk_id=f"c{i:03d}", document_id=f"d{i // 3}", parent_id=f"p{i // 3}", version=f"v{i % 3}",
                region=REGIONS[i % len(REGIONS)], acl_tag=TAGS[(i // 4) % len(TAGS)],
                effective_from=DAY - dt.timedelta(days=30 + i % 11) if i % 9 else DAY + dt.timedelta(days=5),
                effective_to=None if i % 5 else DAY - dt.timedelta(days=1),
                text=" ".join(words),
            )
        )  # fmt: skip
    return chunks


def callers() -> list[labsrc.Caller]:
    """40 callers, each with a permission set (region, tags) no other caller has."""
    sets = []
    for size in (1, 2, 3):
        for tags in itertools.combinations(TAGS, size):
            for region in REGIONS:
                sets.append((region, frozenset(tags)))
    picked = sets[:: len(sets) // 40][:40]
    assert len(set(picked)) == 40
    return [labsrc.Caller(f"actor-{n}", region, tags) for n, (region, tags) in enumerate(picked)]


def test_sixteen_threads_forty_permission_sets_every_result_equals_the_request_alone(server):
    chunks = corpus()
    people = callers()
    days = [DAY, DAY - dt.timedelta(days=35), DAY + dt.timedelta(days=10)]
    requests = [
        (QUERIES[n % len(QUERIES)], people[(n * 7) % len(people)], days[n % len(days)], 1 + n % 6)
        for n in range(REQUESTS)
    ]
    distinct = sorted(set(requests), key=lambda r: (r[0], r[1].actor_id, r[2], r[3]))
    with PostgresRetriever(chunks, ENCODER, dsn=server.dsn) as engine:
        alone = {}
        for query, caller, day, top_k in distinct:
            result = engine.search(query, caller, day, top_k)
            alone[(query, caller, day, top_k)] = (lanes_of(result), replay_stable(result.trace))
        start = threading.Barrier(THREADS)

        def run(request):
            if start.n_waiting < THREADS and not start.broken:
                try:
                    start.wait(timeout=30)  # line the threads up so their requests really overlap
                except threading.BrokenBarrierError:
                    pass
            query, caller, day, top_k = request
            try:
                return request, engine.search(query, caller, day, top_k)
            except Exception as exc:  # collected and reported below, not swallowed
                return request, exc

        with ThreadPoolExecutor(max_workers=THREADS) as pool:
            outcomes = list(pool.map(run, requests))

    raised = [(r, o) for r, o in outcomes if isinstance(o, Exception)]
    assert raised == []
    leaked = [
        (r[1].actor_id, r[2], c.chunk_id)
        for r, result in outcomes
        for lane in (result.sparse, result.dense, result.fused)
        for c, _ in lane
        if not labsrc.is_permitted(r[1], c, r[2])
    ]
    assert leaked == []
    differed = [r for r, result in outcomes if (lanes_of(result), replay_stable(result.trace)) != alone[r]]
    assert differed == []
    assert len(outcomes) == REQUESTS >= 2000
    assert len({(r[1].region, r[1].acl_tags) for r in requests}) == 40
    # The requests are not trivial: most callers see something, and results differ between callers.
    assert sum(bool(lanes_of_result["fused"]) for lanes_of_result, _ in alone.values()) > len(alone) // 2
    assert len({str(v[0]) for v in alone.values()}) > 40


def test_the_alone_baseline_equals_the_in_memory_retriever(server):
    chunks = corpus()
    memory = labsrc.PolicyRetriever(chunks, ENCODER)
    with PostgresRetriever(chunks, ENCODER, dsn=server.dsn) as engine:
        for caller in callers()[::5]:
            for query in QUERIES:
                got, want = engine.search(query, caller, DAY, 4), memory.search(query, caller, DAY, 4)
                assert lanes_of(got) == lanes_of(want)
