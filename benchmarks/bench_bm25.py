"""Speed benchmark: labsrc's BM25 against every peer in its fastest single-thread configuration.

Usage::

    python benchmarks/bench_bm25.py --data DIR [--json OUT]

``DIR`` is a BEIR collection (or a folder holding ``scifact/``); by default
``$LABSRC_BEIR_DIR``. Every library gets the *same token lists* (the lab's
English analyzer runs once, outside the timings), so the numbers compare
indexing and scoring, not tokenizers. Everything runs on one thread: BLAS and
numba are pinned to 1 thread before they load. Rows (queries/s at top-``--depth``):

* ``labsrc index``: :meth:`~labsrc.lanes.BM25Index.top_positions_many`, the query batch
  in one call, each query's top k as arrays of positions and scores: the same
  output bm25s returns (positions, not ids), so the two rows do the same work;
* ``labsrc index, ids``: :meth:`~labsrc.lanes.BM25Index.search_terms`, one query per
  call, each answer a list of ``(id, score)`` pairs (the ids looked up in Python);
* ``labsrc permitted``: the same index scored with per-request statistics
  (:class:`~labsrc.lanes.permitted.PermittedBM25`) for a caller who may see a
  random 90% of the documents (when every document is permitted the lane answers
  from the index itself, so that case would time the row above),
  what :class:`~labsrc.retriever.PolicyRetriever` runs;
* ``bm25s numba``: bm25s ``backend="numba"``, the whole query batch in one
  ``retrieve(..., n_threads=0)`` call (its fastest single-thread mode);
* ``bm25s numpy``: bm25s's default backend, ``n_threads=0``;
* ``tantivy``: tantivy's Python bindings, a whitespace tokenizer over the same
  tokens, one searcher, top-k hits (no stored-field fetch);
* ``rank-bm25``: ``BM25Okapi.get_scores`` plus a top-k, timed on a sample.

The rows are timed in turn, round by round (``--repeats`` rounds, default 7), and
each row's best round is kept. Ratios are labsrc's rows against the fastest peer. The dense lane, the hybrid
and the same request through ``PolicyRetriever`` are timed too. This is a
benchmark, not a test: the numbers depend on the machine and its load.
"""

from __future__ import annotations

import os

# Single-threaded BLAS, set before NumPy is imported: a matrix-vector product per
# query gains nothing from threads, and on a busy machine they make latency spiky.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from labsrc.datasets import UNIVERSE_CALLER, resolve_dataset_dir
from labsrc.datasets.beir import UNIVERSE_DATE
from labsrc.errors import LabError, MissingDependency  # noqa: E402
from labsrc.evaluation.benchmark import load_lanes  # noqa: E402
from labsrc.lanes.permitted import PermittedBM25  # noqa: E402
from labsrc.lanes.sparse import BM25Index  # noqa: E402
from labsrc.records.files import atomic_write_bytes
from labsrc.retriever.policy import PolicyRetriever  # noqa: E402

#: labsrc index / fastest peer (issue 11), and the hybrid's latency budget.
TARGETS = {"qps_vs_fastest_peer": 1.2, "hybrid_p95_ms": 10.0}


def _baselines() -> tuple[Any, Any]:
    try:
        import bm25s
        from rank_bm25 import BM25Okapi
    except ImportError as exc:
        raise MissingDependency(
            f"the benchmark compares against bm25s and rank-bm25 ({exc.name} is missing): "
            "pip install 'hybrid-retrieval-lab[dev]'"
        ) from exc
    return bm25s, BM25Okapi


def _optional(name: str) -> Any:
    try:
        return __import__(name)
    except ImportError:
        return None


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    """The fastest of ``repeats`` wall-clock runs of ``fn``, in seconds (least disturbed by other load)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def interleaved_best(repeats: int, runs: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Each run's fastest of ``repeats`` wall-clock runs, in seconds, the runs taken in turn round by round
    (so a slow minute of the machine falls on every peer, not on one)."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def percentiles_ms(samples: Sequence[float]) -> dict[str, float]:
    values = np.asarray(samples) * 1000.0
    return {"p50": float(np.percentile(values, 50)), "p95": float(np.percentile(values, 95)), "n": int(values.size)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    data_dir = resolve_dataset_dir(args.data, args.dataset)
    bm25s, BM25Okapi = _baselines()
    lanes = load_lanes(data_dir)
    dataset = lanes.dataset
    queries = dataset.split_queries(args.split)
    analyzer = lanes.analyzer
    doc_ids = list(dataset.corpus)
    # One analysis pass; every library below indexes and searches these very lists.
    doc_terms = [analyzer(doc.indexed_text) for doc in dataset.corpus.values()]
    query_terms = [analyzer(text) for text in queries.values()]
    depth = min(args.depth, len(doc_ids))
    k1, b = lanes.index.k1, lanes.index.b
    pairs = list(zip(doc_ids, doc_terms))

    def build_labsrc() -> BM25Index:
        return BM25Index.build_from_terms(pairs, analyzer=analyzer, k1=k1, b=b)

    def build_bm25s(backend: str) -> Callable[[], Any]:
        def build() -> Any:
            retriever = bm25s.BM25(method="lucene", k1=k1, b=b, backend=backend)
            retriever.index(doc_terms, show_progress=False)
            return retriever

        return build

    build_s = {"labsrc": best_of(args.repeats, build_labsrc)}
    index = build_labsrc()
    permitted, mask = PermittedBM25(index), np.random.default_rng(0).random(index.n_docs) < 0.9
    n = len(query_terms)
    runs: dict[str, Callable[[], object]] = {
        "labsrc index": lambda: index.top_positions_many(query_terms, depth),
        "labsrc index, ids": lambda: [index.search_terms(t, depth) for t in query_terms],
        "labsrc permitted": lambda: [permitted.search_terms(t, mask, depth) for t in query_terms],
    }
    backends = ["numpy"] + (["numba"] if _optional("numba") is not None else [])
    for backend in backends:
        build_s[f"bm25s {backend}"] = best_of(args.repeats, build_bm25s(backend))
        engine = build_bm25s(backend)()

        def retrieve(engine: Any = engine, backend: str = backend) -> None:
            engine.retrieve(query_terms, k=depth, n_threads=0, show_progress=False, backend_selection=backend)

        retrieve()  # numba compiles on the first call: keep that out of the timings
        runs[f"bm25s {backend}"] = retrieve
    tantivy = _optional("tantivy")
    if tantivy is not None:
        t0 = time.perf_counter()
        searcher, parse = _tantivy_index(tantivy, doc_terms)
        build_s["tantivy"] = time.perf_counter() - t0
        parsed = [parse(" ".join(t)) for t in query_terms if t]
        runs["tantivy"] = lambda: [searcher.search(q, depth) for q in parsed]
    seconds = interleaved_best(args.repeats, runs)
    okapi = BM25Okapi(doc_terms, k1=k1, b=b)
    sample = query_terms[: max(1, min(args.rank_bm25_sample, len(query_terms)))]

    def query_rank_bm25() -> None:
        for terms in sample:
            scores = okapi.get_scores(terms)
            top = np.argpartition(-scores, depth - 1)[:depth]
            top[np.argsort(-scores[top], kind="stable")]

    qps = {name: n / value for name, value in seconds.items()}
    qps["rank-bm25"] = len(sample) / best_of(max(1, args.repeats // 2), query_rank_bm25)
    peers = {name: value for name, value in qps.items() if not name.startswith("labsrc")}
    fastest = max(peers, key=peers.__getitem__)
    result: dict[str, Any] = {
        "qps": qps,
        "build_s": build_s,
        "fastest_peer": fastest,
        "ratios": {name: qps[name] / peers[fastest] for name in qps if name.startswith("labsrc")},
        "config": {
            "collection": dataset.name,
            "split": args.split,
            "documents": len(doc_ids),
            "queries": n,
            "rank_bm25_sample": len(sample),
            "top_k": depth,
            "repeats": args.repeats,
            "k1": k1,
            "b": b,
            "analyzer": getattr(analyzer, "name", "custom"),
            "bm25s_method": "lucene",
            "bm25s_version": getattr(bm25s, "__version__", "unknown"),
            "tantivy_version": getattr(tantivy, "__version__", None) if tantivy else None,
            "numpy_version": np.__version__,
            "python": sys.version.split()[0],
        },
    }

    if lanes.vectors is not None:
        qids = list(queries)

        def dense_all() -> None:
            for qid in qids:
                lanes.dense_search(qid, depth)

        result["dense"] = {"qps": n / best_of(args.repeats, dense_all), "model": lanes.vectors.version}
        hybrid: list[float] = []
        for _ in range(args.repeats):
            for qid, text in queries.items():
                start = time.perf_counter()
                lanes.hybrid_search(qid, text, depth)
                hybrid.append(time.perf_counter() - start)
        result["hybrid_ms"] = percentiles_ms(hybrid)
        policy = PolicyRetriever(dataset.chunks, lanes.vectors, analyzer=analyzer, k1=k1, b=b)
        policy.search(next(iter(queries.values())), UNIVERSE_CALLER, UNIVERSE_DATE, depth)  # warm the caches
        through_retriever: list[float] = []
        for text in queries.values():
            start = time.perf_counter()
            policy.search(text, UNIVERSE_CALLER, UNIVERSE_DATE, depth)
            through_retriever.append(time.perf_counter() - start)
        result["policy_retriever_ms"] = percentiles_ms(through_retriever)

    checks = {"qps_vs_fastest_peer": result["ratios"]["labsrc index"] >= TARGETS["qps_vs_fastest_peer"]}
    if "hybrid_ms" in result:
        checks["hybrid_p95_ms"] = result["hybrid_ms"]["p95"] <= TARGETS["hybrid_p95_ms"]
    result["targets"] = {name: {"target": TARGETS[name], "met": met} for name, met in checks.items()}
    return result


def _tantivy_index(tantivy: Any, doc_terms: list[list[str]]) -> tuple[Any, Callable[[str], Any]]:
    """A one-thread tantivy index over the same tokens (whitespace tokenizer), and its query parser."""
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("body", stored=False, tokenizer_name="whitespace")
    index = tantivy.Index(builder.build())
    writer = index.writer(200_000_000, 1)
    for terms in doc_terms:
        writer.add_document(tantivy.Document(body=" ".join(terms)))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    return index.searcher(), lambda text: index.parse_query(text, ["body"])


def report(result: dict[str, Any]) -> str:
    config = result["config"]
    fastest = result["fastest_peer"]
    lines = [
        f"BM25 speed on {config['collection']} ({config['documents']} docs, {config['queries']} {config['split']} "
        f"queries, top-{config['top_k']}, one thread, identical token lists, best of {config['repeats']})",
        "",
        f"{'configuration':<19} {'build s':>9} {'queries/s':>11} {'vs fastest peer':>16}",
    ]
    for name, value in sorted(result["qps"].items(), key=lambda item: -item[1]):
        build = result["build_s"].get(name.split()[0] if name.startswith("labsrc") else name, float("nan"))
        note = f"  (first {config['rank_bm25_sample']} queries)" if name == "rank-bm25" else ""
        lines.append(f"{name:<19} {build:>9.3f} {value:>11.0f} {value / result['qps'][fastest]:>15.2f}x{note}")
    met = result["targets"]["qps_vs_fastest_peer"]["met"]
    lines += [
        "",
        f"labsrc index / {fastest} (the fastest peer): {result['ratios']['labsrc index']:.2f}x "
        f"(target >= {TARGETS['qps_vs_fastest_peer']}x: {'met' if met else 'NOT MET'})",
    ]
    if "dense" in result:
        hybrid, policy = result["hybrid_ms"], result["policy_retriever_ms"]
        lines += [
            "",
            f"dense lane ({result['dense']['model']}): {result['dense']['qps']:.0f} queries/s",
            f"hybrid per query (BM25 + dense + RRF k=60, top-{config['top_k']}): p50 {hybrid['p50']:.2f} ms, "
            f"p95 {hybrid['p95']:.2f} ms  (target p95 <= {TARGETS['hybrid_p95_ms']:.0f} ms: "
            f"{'met' if result['targets']['hybrid_p95_ms']['met'] else 'NOT MET'})",
            f"same request through PolicyRetriever (boundary + lanes + RRF + trace): p50 {policy['p50']:.2f} ms, "
            f"p95 {policy['p95']:.2f} ms",
        ]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", metavar="DIR", help="BEIR collection or a folder holding it (default $LABSRC_BEIR_DIR)")
    parser.add_argument("--dataset", default="scifact")
    parser.add_argument("--split", default="test")
    parser.add_argument("--depth", type=int, default=100, help="top-k per query (default 100)")
    parser.add_argument("--repeats", type=int, default=7,
                        help="timed rounds, every peer once a round in turn; each one's best is kept (default 7)")
    parser.add_argument("--rank-bm25-sample", type=int, default=30, help="queries timed for rank-bm25 (default 30)")
    parser.add_argument("--json", metavar="OUT", help="write the results as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.repeats < 1 or args.depth < 1 or args.rank_bm25_sample < 1:
        print("bench_bm25: --repeats, --depth and --rank-bm25-sample must be >= 1", file=sys.stderr)
        return 2
    try:
        result = run(args)
    except LabError as exc:
        print(f"bench_bm25: error: {exc}", file=sys.stderr)
        return 2
    print(report(result))
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, (json.dumps(result, indent=2) + "\n").encode("utf-8"))
        print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
