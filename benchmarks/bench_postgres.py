"""The PostgreSQL engine side by side: in memory, exact, HNSW, and the hybrid a team would write instead.

One run, one corpus (default 100,000 chunks, 384-d vectors), 40 permission sets
taking turns, top-10. Five configurations:

* ``memory``: :class:`labsrc.PolicyRetriever`, everything in this process;
* ``engine-exact``: :class:`labsrc.engines.PostgresRetriever`, ``dense_index="exact"``;
* ``engine-hnsw``: the same loaded corpus, ``with_dense("hnsw")``: the engine's defaults (iterative scan
  ``relaxed_order``, ``ef_search`` 200, 2k candidates rescored in float64);
* ``engine-hnsw-off``: ``with_dense("hnsw", ef_search=40, iterative_scan="off")``: pgvector's own defaults;
* ``baseline``: what a team would write instead, in the shape of the LangChain and
  LlamaIndex PostgreSQL hybrid retrievers, in the same server: one table with a
  generated ``tsvector`` (GIN) and a ``vector`` column (HNSW, cosine, m=16,
  ef_construction=64), the boundary as a plain ``WHERE``, a ``ts_rank_cd`` lane over
  an OR of the query's lexemes, an ``ORDER BY embedding <=> q`` lane with
  ``hnsw.iterative_scan = relaxed_order``, RRF (k=60) in Python, a psycopg pool.

Prints the load times, p50/p95 per stage and per request at one client,
requests/s at 1, 4 and 16 clients, the p95 ratios, and Recall@10 of each
approximate dense lane against the engine's exact one. Checks that the exact
engine's lanes ``==`` the in-memory lanes on every timed request (ids and
scores) and exits non-zero if they differ.

    python benchmarks/bench_postgres.py [--chunks 100000] [--requests 400] [--clients 1,4,16] [--dim 384] [--json OUT]
    python benchmarks/bench_postgres.py --scifact DIR [--chunks 100000] ...   # real text and 384-d vectors
    python benchmarks/bench_postgres.py ... --no-baseline                     # the lab's configurations only

With ``--scifact`` the corpus is BEIR SciFact's abstracts cycled to ``--chunks``
with their all-MiniLM-L6-v2 vectors (as in ``bench_tenants.py``); without it, the
synthetic corpus of ``bench_scale.py`` with random ``--dim`` vectors. Needs the
``postgres`` extra (``pip install 'hybrid-retrieval-lab[postgres]'``).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import datetime as dt  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from contextlib import ExitStack  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from bench_tenants import (  # noqa: E402
    SCIFACT_TAGS,
    TAGS,
    lanes_of,
    pct,
    permission_sets,
    scifact_corpus,
    synthetic_workload,
)
from tqdm import tqdm  # noqa: E402

import labsrc  # noqa: E402
from labsrc.cli.progress import TqdmProgress  # noqa: E402
from labsrc.engines.loading import vector_binary  # noqa: E402
from labsrc.fusion.rrf import reciprocal_rank_fusion  # noqa: E402
from labsrc.lanes.dense import as_dense_source  # noqa: E402
from labsrc.records.files import atomic_write_bytes  # noqa: E402

TOP_K = 10
RRF_K = 60
CONFIGURATIONS = ("memory", "engine-exact", "engine-hnsw", "engine-hnsw-off", "baseline")
HNSW_ROWS = ("engine-hnsw", "engine-hnsw-off", "baseline")
#: Scores this close count as a tie in the tie-aware recall (the baseline's float32 distances differ from
#: float64 cosines by about 1e-7; copies of one abstract have bit-identical float64 scores).
TIE_TOLERANCE = 1e-6
Lanes = dict[str, list[tuple[str, float]]]


@dataclass(frozen=True)
class Answer:
    """One request's three lanes as (chunk_id, score) pairs and its stage timings."""

    lanes: Lanes
    timings_ms: dict[str, float]


@dataclass(frozen=True)
class Workload:
    chunks: tuple[labsrc.PolicyChunk, ...]
    vectors: Any  # a DenseSource
    queries: list[str]
    sets: list[tuple[labsrc.Caller, dt.date]]
    label: str
    dim: int

    def request(self, i: int) -> tuple[str, labsrc.Caller, dt.date]:
        caller, day = self.sets[i % len(self.sets)]
        return self.queries[i], caller, day


@dataclass
class Measured:
    """What one configuration measured."""

    load_s: dict[str, float] = field(default_factory=dict)
    totals_ms: list[float] = field(default_factory=list)
    stages_ms: dict[str, list[float]] = field(default_factory=dict)
    answers: list[Answer] = field(default_factory=list)
    rps: dict[int, float] = field(default_factory=dict)


def status(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the workload ------------------------------------------------------------------------


def build_workload(args: argparse.Namespace) -> Workload:
    if args.scifact:
        chunks, vectors, claims = scifact_corpus(Path(args.scifact), args.chunks)
        queries = [claims[i % len(claims)] for i in range(args.requests)]
        dim = vectors.document_matrix(chunks[:1]).shape[1]
        label = f"SciFact cycled to {len(chunks):,}"
        return Workload(chunks, vectors, queries, permission_sets(args.sets, SCIFACT_TAGS), label, dim)
    chunks, vectors, queries = synthetic_workload(args.chunks, args.dim, args.requests)
    label = f"synthetic corpus {len(chunks):,}"
    return Workload(chunks, vectors, queries, permission_sets(args.sets, TAGS), label, args.dim)


# --- the configurations ------------------------------------------------------------------


def retriever_search(retriever: Any) -> Callable[[str, labsrc.Caller, dt.date], Answer]:
    """A PolicyRetriever's or PostgresRetriever's search as an Answer."""

    def search(query: str, caller: labsrc.Caller, day: dt.date) -> Answer:
        result = retriever.search(query, caller, day, TOP_K)
        return Answer(lanes_of(result), dict(result.trace.timings_ms))

    return search


BASELINE_SCHEMA = "team_baseline"
BOUNDARY_SQL = (
    "region = %(region)s AND acl_tag = ANY(%(tags)s) "
    "AND effective_from <= %(day)s AND (effective_to IS NULL OR %(day)s <= effective_to)"
)
# LlamaIndex's OR query: plainto_tsquery's '&' replaced by '|'. Cast back with ::tsquery (the lexemes stay as they
# are) rather than LlamaIndex's to_tsquery('english', ...), which stems them a second time and so breaks
# hyphenated words ('high-dos' <-> ... becomes 'high-do' <-> 'high' <-> 'dos', which matches nothing).
OR_TSQUERY_SQL = "replace(plainto_tsquery('english', %(query)s)::text, '&', '|')::tsquery"
SPARSE_SQL = f"""
SELECT id, ts_rank_cd(tsv, q.query) AS score
FROM chunks, (SELECT {OR_TSQUERY_SQL} AS query) AS q
WHERE {BOUNDARY_SQL} AND tsv @@ q.query
ORDER BY score DESC, id
LIMIT %(k)s
"""
DENSE_SQL = f"""
SELECT id, embedding <=> %(vector)s::vector AS distance
FROM chunks
WHERE {BOUNDARY_SQL}
ORDER BY embedding <=> %(vector)s::vector
LIMIT %(k)s
"""


def vector_text(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.9g}" for x in np.asarray(vector, dtype=np.float32).tolist()) + "]"


class TeamBaseline:
    """The hybrid retriever a team would write with LangChain or LlamaIndex on PostgreSQL (see the module docstring).

    Loads its own schema in the server at ``dsn`` (as the owner) with a binary ``COPY``;
    ``search`` borrows one pooled connection per request and is thread-safe.
    """

    def __init__(self, dsn: str, workload: Workload, *, max_clients: int, progress: bool) -> None:
        import psycopg
        import psycopg_pool

        self.dsn = dsn
        self.by_id = {c.chunk_id: c for c in workload.chunks}
        self.vectors = as_dense_source(workload.vectors)
        self.load_s: dict[str, float] = {}
        with psycopg.connect(dsn, autocommit=True) as conn:
            vector_schema = self._create(conn, workload.dim)
            self._copy(conn, workload, progress)
            self._index(conn)
            self.server = {
                key: conn.execute(f"SHOW {key}").fetchone()[0]
                for key in ("server_version", "maintenance_work_mem", "max_parallel_maintenance_workers", "jit")
            }
        self.pool = psycopg_pool.ConnectionPool(
            dsn, min_size=1, max_size=max(1, max_clients), open=False, configure=self._configure,
            kwargs={"autocommit": True, "options": f"-c search_path={BASELINE_SCHEMA},{vector_schema}"},
        )  # fmt: skip
        self.pool.open(wait=True, timeout=30)

    @staticmethod
    def _configure(conn: Any) -> None:
        # The fastest sane dense setting: keep walking the graph until k rows pass the WHERE (ef_search stays 40).
        conn.execute("SET hnsw.iterative_scan = relaxed_order")

    def _create(self, conn: Any, dim: int) -> str:
        t0 = time.perf_counter()
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        vector_schema = conn.execute(
            "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
        ).fetchone()[0]
        conn.execute(f"DROP SCHEMA IF EXISTS {BASELINE_SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {BASELINE_SCHEMA}")
        conn.execute(f"SET search_path = {BASELINE_SCHEMA}, {vector_schema}")
        conn.execute(f"""
            CREATE TABLE chunks (
                id text PRIMARY KEY,
                region text NOT NULL,
                acl_tag text NOT NULL,
                effective_from date NOT NULL,
                effective_to date,
                text text NOT NULL,
                tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
                embedding vector({int(dim)}) NOT NULL
            )""")  # fmt: skip
        self.load_s["create table"] = time.perf_counter() - t0
        return vector_schema

    def _copy(self, conn: Any, workload: Workload, progress: bool) -> None:
        """Binary COPY of every row (the tsvector is generated as rows arrive)."""
        columns = "id, region, acl_tag, effective_from, effective_to, text, embedding"
        t0 = time.perf_counter()
        with conn.cursor() as cur, cur.copy(f"COPY chunks ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
            # "bytea": the bytes go as they are, pgvector's binary form, decoded by the column's vector_recv.
            copy.set_types(["text", "text", "text", "date", "date", "text", "bytea"])
            step = 10_000
            with tqdm(total=len(workload.chunks), desc="baseline COPY", file=sys.stderr, disable=not progress) as bar:
                for start in range(0, len(workload.chunks), step):
                    batch = workload.chunks[start : start + step]
                    encoded = vector_binary(np.asarray(self.vectors.document_matrix(batch), dtype=np.float64))
                    for chunk, vector in zip(batch, encoded):
                        copy.write_row((chunk.chunk_id, chunk.region, chunk.acl_tag, chunk.effective_from,
                                        chunk.effective_to, chunk.text, vector))  # fmt: skip
                    bar.update(len(batch))
        self.load_s["binary COPY, tsvector generated"] = time.perf_counter() - t0

    def _index(self, conn: Any) -> None:
        statements = {
            "gin index": "CREATE INDEX chunks_tsv_gin ON chunks USING gin (tsv)",
            "btree index": "CREATE INDEX chunks_region_acl ON chunks (region, acl_tag)",
            "hnsw index": "CREATE INDEX chunks_embedding_hnsw ON chunks USING hnsw (embedding vector_cosine_ops) "
            "WITH (m = 16, ef_construction = 64)",
            "analyze": "ANALYZE chunks",
        }
        for name, sql in statements.items():
            status(f"baseline: {name} ...")
            t0 = time.perf_counter()
            conn.execute(sql)
            self.load_s[name] = time.perf_counter() - t0

    def search(self, query: str, caller: labsrc.Caller, day: dt.date) -> Answer:
        params = {"region": caller.region, "tags": sorted(caller.acl_tags), "day": day, "k": TOP_K}
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        with self.pool.connection() as conn:
            t1 = time.perf_counter()
            sparse = [(i, float(s)) for i, s in conn.execute(SPARSE_SQL, {**params, "query": query})]
            t2 = time.perf_counter()
            dense = self._dense(conn, query, params)
            t3 = time.perf_counter()
        fused = self._fuse(sparse, dense)
        t4 = time.perf_counter()
        for stage, (start, end) in zip(labsrc.STAGES, ((t0, t1), (t1, t2), (t2, t3), (t3, t4))):
            timings[stage] = 1000 * (end - start)
        return Answer({"sparse": sparse, "dense": dense, "fused": fused}, timings)

    def _dense(self, conn: Any, query: str, params: dict[str, Any]) -> list[tuple[str, float]]:
        vector = np.asarray(self.vectors.query_vector(query), dtype=np.float64)
        if not np.any(vector):  # a zero vector has no cosine: nothing to rank (as in the lab's lane)
            return []
        rows = conn.execute(DENSE_SQL, {**params, "vector": vector_text(vector)}).fetchall()
        # relaxed_order may return rows slightly out of order: sort them (pgvector's README does it in SQL).
        return sorted(((i, 1.0 - float(d)) for i, d in rows), key=lambda pair: (-pair[1], pair[0]))

    def _fuse(self, sparse: list[tuple[str, float]], dense: list[tuple[str, float]]) -> list[tuple[str, float]]:
        lists = [[(self.by_id[i], s) for i, s in lane] for lane in (sparse, dense)]
        return [(c.chunk_id, s) for c, s in reciprocal_rank_fusion(lists, RRF_K, top_k=TOP_K)]

    def dense_plan(self, caller: labsrc.Caller, day: dt.date, query: str) -> list[str]:
        """The index (or scan) nodes of the dense query's plan, for one request."""
        vector = vector_text(self.vectors.query_vector(query))
        params = {"region": caller.region, "tags": sorted(caller.acl_tags), "day": day, "k": TOP_K, "vector": vector}
        with self.pool.connection() as conn:
            [[plan]] = conn.execute("EXPLAIN (FORMAT JSON) " + DENSE_SQL, params).fetchall()
        return plan_nodes(plan[0]["Plan"])

    def close(self) -> None:
        import psycopg

        self.pool.close()
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {BASELINE_SCHEMA} CASCADE")


def plan_nodes(node: dict[str, Any]) -> list[str]:
    """``Index Scan using chunks_embedding_hnsw``-style names of a JSON plan's scan nodes."""
    here = [f"{node['Node Type']} using {node['Index Name']}" if "Index Name" in node else node["Node Type"]]
    return here + [name for child in node.get("Plans", []) for name in plan_nodes(child)]


# --- measuring ---------------------------------------------------------------------------


def latency_pass(name: str, search: Callable, workload: Workload, measured: Measured, progress: bool) -> None:
    """Every request once, one client: wall time per request and the stages of its trace."""
    measured.stages_ms = {stage: [] for stage in labsrc.STAGES}
    for i in tqdm(range(len(workload.queries)), desc=f"{name}, 1 client", file=sys.stderr, disable=not progress):
        t0 = time.perf_counter()
        answer = search(*workload.request(i))
        measured.totals_ms.append(1000 * (time.perf_counter() - t0))
        measured.answers.append(answer)
        for stage, ms in answer.timings_ms.items():
            measured.stages_ms.setdefault(stage, []).append(ms)


def run_clients(search: Callable, workload: Workload, clients: int, indices: Sequence[int], bar: Any) -> float:
    """Wall seconds for ``clients`` threads to run ``indices`` (thread t takes every clients-th one from t)."""
    start = threading.Barrier(clients + 1)
    errors: list[Exception] = []
    lock = threading.Lock()

    def client(t: int) -> None:
        start.wait()
        try:
            for i in indices[t::clients]:
                search(*workload.request(i))
                with lock:
                    bar.update(1)
        except Exception as exc:  # noqa: BLE001 (re-raised in the main thread)
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(t,), daemon=True) for t in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    t0 = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return wall


def throughput(name: str, search: Callable, workload: Workload, clients: list[int], progress: bool) -> dict[int, float]:
    """Requests per second at each client count, over all ``--requests`` requests (after a short warm-up)."""
    rps: dict[int, float] = {}
    requests = list(range(len(workload.queries)))
    for count in clients:
        with tqdm(total=len(requests), desc=f"{name}, {count} clients", file=sys.stderr, disable=not progress) as bar:
            run_clients(search, workload, count, requests[: 2 * count], tqdm(disable=True))  # the pool grows here
            rps[count] = len(requests) / run_clients(search, workload, count, requests, bar)
    return rps


def recall_against(exact: list[Answer], approximate: list[Answer]) -> dict[str, float]:
    """Mean Recall@k of the approximate dense lane (exact ids are the truth), tie-aware too, and its short lists.

    Tie-aware: a returned chunk whose score equals the exact list's last score (within
    :data:`TIE_TOLERANCE`) also counts, since the exact lane broke that tie on chunk_id
    and the index could not (SciFact cycled to 100,000 chunks repeats every abstract and
    its vector about 19 times, so ties at the k-th place are common).
    """
    recalls, tie_recalls, short = [], [], 0
    for truth, got in zip(exact, approximate):
        true_ids = {i for i, _ in truth.lanes["dense"]}
        short += len(got.lanes["dense"]) < len(truth.lanes["dense"])
        if not true_ids:
            continue
        last = truth.lanes["dense"][-1][1]
        recalls.append(sum(i in true_ids for i, _ in got.lanes["dense"]) / len(true_ids))
        ties = sum(i in true_ids or abs(s - last) <= TIE_TOLERANCE for i, s in got.lanes["dense"])
        tie_recalls.append(min(ties, len(true_ids)) / len(true_ids))
    return {
        "recall_at_10": float(np.mean(recalls)) if recalls else 1.0,
        "recall_at_10_ties": float(np.mean(tie_recalls)) if tie_recalls else 1.0,
        "short_lists": short,
    }


def equality(memory: list[Answer], engine: list[Answer]) -> tuple[int, list[int]]:
    """How many requests were compared and which ones' engine-exact lanes differ from in-memory (``==``)."""
    differing = [i for i, (a, b) in enumerate(zip(memory, engine)) if a.lanes != b.lanes]
    return min(len(memory), len(engine)), differing


# --- loading -----------------------------------------------------------------------------


def load_memory(workload: Workload) -> tuple[labsrc.PolicyRetriever, float]:
    status("memory: PolicyRetriever and its first request (builds the index and matrix) ...")
    t0 = time.perf_counter()
    retriever = labsrc.PolicyRetriever(workload.chunks, workload.vectors)
    retriever.search(*workload.request(0), TOP_K)
    return retriever, time.perf_counter() - t0


def load_engine(workload: Workload, progress: bool) -> tuple[Any, float]:
    from labsrc.engines import PostgresRetriever

    status("engine: PostgresRetriever (embedded server, COPY, indexes) ...")
    bars = TqdmProgress(enabled=progress)
    t0 = time.perf_counter()
    engine = PostgresRetriever(workload.chunks, workload.vectors, dense_index="exact", progress=bars)
    bars.close()
    return engine, time.perf_counter() - t0


def load_hnsw(engine: Any) -> tuple[Any, Any, float]:
    status("engine: HNSW index (first with_dense('hnsw')) ...")
    t0 = time.perf_counter()
    defaults = engine.with_dense("hnsw")
    build_s = time.perf_counter() - t0
    return defaults, engine.with_dense("hnsw", ef_search=40, iterative_scan="off"), build_s


# --- reporting ---------------------------------------------------------------------------


def stage_summary(measured: Measured) -> dict[str, Any]:
    return {
        "p50_ms": pct(measured.totals_ms, 50),
        "p95_ms": pct(measured.totals_ms, 95),
        "stages": {s: {"p50_ms": pct(v, 50), "p95_ms": pct(v, 95)} for s, v in measured.stages_ms.items()},
    }


RATIOS = (
    ("engine-exact", "memory"),
    ("engine-hnsw", "memory"),
    ("engine-hnsw-off", "memory"),
    ("engine-hnsw", "baseline"),
    ("engine-exact", "baseline"),
)


def ratios(results: dict[str, Measured]) -> dict[str, float]:
    """p95 over p95, keyed ``"engine-exact / memory"``, for the pairs the targets are about."""
    p95 = {name: pct(m.totals_ms, 95) for name, m in results.items()}
    return {f"{a} / {b}": p95[a] / p95[b] for a, b in RATIOS if a in p95 and b in p95}


def print_loads(results: dict[str, Measured]) -> None:
    print("\nload (s)")
    for name, measured in results.items():
        for part, seconds in measured.load_s.items():
            print(f"  {name:<22}{part:<34}{seconds:9.1f}")


def print_latency(results: dict[str, Measured], requests: int) -> None:
    note = " (baseline's 'authorize': borrowing a connection)" if "baseline" in results else ""
    print(f"\nlatency at 1 client over {requests} requests, ms p50 / p95{note}")
    stages = list(labsrc.STAGES)
    print(f"  {'configuration':<22}" + "".join(f"{s:>19}" for s in [*stages, "request"]))
    for name, measured in results.items():
        cells = [(pct(measured.stages_ms[s], 50), pct(measured.stages_ms[s], 95)) for s in stages]
        cells.append((pct(measured.totals_ms, 50), pct(measured.totals_ms, 95)))
        print(f"  {name:<22}" + "".join(f" {f'{a:.2f} / {b:.2f}':>18}" for a, b in cells))  # a space even at 1,000+ ms


def print_throughput(results: dict[str, Measured], recalls: dict[str, dict[str, float]], clients: list[int]) -> None:
    print("\nrequests/s by concurrent clients; Recall@10 of the dense lane against engine-exact's (ids; ties counted)")
    header = "".join(f"{f'{c} cl.':>10}" for c in clients) + f"{'recall@10':>12}{'w/ ties':>10}{'short':>8}"
    print(f"  {'configuration':<22}" + header)
    for name, measured in results.items():
        row = f"  {name:<22}" + "".join(f"{measured.rps[c]:10.1f}" for c in clients)
        if name in recalls:
            recall = recalls[name]
            row += f"{recall['recall_at_10']:12.3f}{recall['recall_at_10_ties']:10.3f}{recall['short_lists']:8d}"
        print(row)


# --- main --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--sets", type=int, default=40, help="permission sets, taking turns (default 40)")
    parser.add_argument("--requests", type=int, default=400, help="requests per pass (default 400)")
    parser.add_argument("--clients", default="1,4,16", help="concurrent clients for requests/s (default 1,4,16)")
    parser.add_argument("--dim", type=int, default=384, help="synthetic vector dimension (default 384)")
    parser.add_argument("--scifact", metavar="DIR", help="BEIR SciFact folder: real text and its 384-d vectors")
    parser.add_argument("--no-baseline", action="store_true", help="skip the hand-written LangChain/LlamaIndex-style baseline")
    parser.add_argument("--no-progress", action="store_true", help="never draw progress bars (they draw on a terminal)")
    parser.add_argument("--json", metavar="OUT", help="write the measurements as JSON")
    args = parser.parse_args(argv)
    for name in ("chunks", "sets", "requests", "dim"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, not {getattr(args, name)}")
    try:
        args.clients = sorted({int(c) for c in args.clients.split(",")})
    except ValueError:
        parser.error(f"--clients must be comma-separated integers such as 1,4,16, not {args.clients!r}")
    if args.clients[0] < 1 or args.clients[-1] > 16:
        parser.error(f"--clients must lie in [1, 16] (the engine's pool holds 16 connections), not {args.clients}")
    args.progress = not args.no_progress and sys.stderr.isatty()
    return args


def load_all(workload: Workload, args: argparse.Namespace, cleanup: ExitStack) -> tuple[dict[str, Measured], dict[str, Callable], dict[str, Any]]:
    """Load every configuration (closing them is left to ``cleanup``); their load times, searches and server facts."""
    results = {name: Measured() for name in CONFIGURATIONS if not (args.no_baseline and name == "baseline")}
    memory, results["memory"].load_s["index + matrix, first request"] = load_memory(workload)
    sizes = [len(memory.universe(caller, day)) for caller, day in workload.sets]
    extra: dict[str, Any] = {"universes": {"min": min(sizes), "max": max(sizes)}}
    engine, results["engine-exact"].load_s["PostgresRetriever(...)"] = load_engine(workload, args.progress)
    cleanup.callback(engine.close)
    relaxed, default, results["engine-hnsw"].load_s["HNSW index (first with_dense)"] = load_hnsw(engine)
    searches = {
        "memory": retriever_search(memory), "engine-exact": retriever_search(engine),
        "engine-hnsw": retriever_search(relaxed), "engine-hnsw-off": retriever_search(default),
    }  # fmt: skip
    if not args.no_baseline:
        baseline = TeamBaseline(engine.store.dsn, workload, max_clients=max(args.clients), progress=args.progress)
        cleanup.callback(baseline.close)
        results["baseline"].load_s = {**baseline.load_s, "total": sum(baseline.load_s.values())}
        searches["baseline"] = baseline.search
        extra["server"] = baseline.server
        extra["baseline_dense_plan"] = baseline.dense_plan(*workload.sets[0], workload.queries[0])
    return results, searches, extra


def measure_all(workload: Workload, args: argparse.Namespace) -> tuple[dict[str, Measured], dict[str, Any]]:
    """Load every configuration, then measure each: a 1-client pass, then requests/s at each client count."""
    with ExitStack() as cleanup:
        results, searches, extra = load_all(workload, args, cleanup)
        for name, search in searches.items():
            status(f"{name}: {len(workload.queries)} requests at 1 client, then at {args.clients} clients ...")
            latency_pass(name, search, workload, results[name], args.progress)
            results[name].rps = throughput(name, search, workload, args.clients, args.progress)
        return results, extra


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from labsrc.engines import postgres_available

    if (reason := postgres_available()) is not None:
        raise SystemExit(reason)
    workload = build_workload(args)
    results, extra = measure_all(workload, args)
    exact = results["engine-exact"].answers
    recalls = {name: recall_against(exact, results[name].answers) for name in HNSW_ROWS if name in results}
    checked, differing = equality(results["memory"].answers, exact)
    sizes = extra["universes"]

    print(f"{workload.label} chunks, {workload.dim}-d vectors; {len(workload.sets)} permission sets "
          f"(universes {sizes['min']:,}-{sizes['max']:,} chunks); top-{TOP_K}; {len(workload.queries)} requests per pass")  # fmt: skip
    if "server" in extra:
        server = extra["server"]
        print(f"PostgreSQL {server['server_version']}, maintenance_work_mem {server['maintenance_work_mem']}, "
              f"{server['max_parallel_maintenance_workers']} parallel maintenance workers, jit {server['jit']}; "
              f"baseline dense plan (first set): {' > '.join(extra['baseline_dense_plan'])}")  # fmt: skip
    print_loads(results)
    print_latency(results, len(workload.queries))
    print_throughput(results, recalls, args.clients)
    ratio = ratios(results)
    print("\np95 over p95: " + "; ".join(f"{k} {v:.2f}" for k, v in ratio.items()))
    print(f"engine-exact lanes == in-memory lanes (ids and scores): {checked - len(differing)} of {checked} requests "
          f"({min(checked, len(workload.sets))} permission sets)")  # fmt: skip

    report = {
        "corpus": "scifact" if args.scifact else "synthetic", "chunks": len(workload.chunks), "dim": workload.dim,
        "permission_sets": len(workload.sets),
        "requests": len(workload.queries), "top_k": TOP_K, "clients": args.clients, **extra,
        "configurations": {
            name: {"load_s": m.load_s, **stage_summary(m), "rps": {str(c): r for c, r in m.rps.items()}, **recalls.get(name, {})}
            for name, m in results.items()
        },
        "ratios": ratio, "equality": {"checked": checked, "differing": len(differing)},
    }  # fmt: skip
    if args.json:
        atomic_write_bytes(args.json, (json.dumps(report, indent=2) + "\n").encode("utf-8"))
        print(f"wrote {args.json}")
    if differing:
        raise SystemExit(f"engine-exact lanes differ from the in-memory lanes on requests {differing[:10]}")


if __name__ == "__main__":
    main()
