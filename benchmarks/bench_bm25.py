"""Speed benchmark: labsrc's BM25 against rank-bm25 and bm25s, plus the dense lane and the hybrid.

Usage::

    python benchmarks/bench_bm25.py --data DIR [--json OUT]

``DIR`` is a BEIR collection (or a folder holding ``scifact/``); by default
``$LABSRC_BEIR_DIR``. Every library gets the *same token lists* (the lab's
English analyzer runs once, outside the timings), so the numbers compare
indexing and scoring, not tokenizers. Everything runs on one thread: BLAS
threads are pinned to 1 before NumPy loads, bm25s runs with ``n_threads=1``.

Reported:

* index build time (best of ``--repeats``) for labsrc, bm25s and rank-bm25;
* query throughput over the split's queries at top-``--depth`` (best of
  ``--repeats``); rank-bm25 scores every document in Python for every term, so
  it is timed on the first ``--rank-bm25-sample`` queries;
* the dense lane's throughput (cosine against the stored vectors + top-k);
* the hybrid's per-query latency p50 / p95: BM25 (query analysis included),
  dense and RRF, each lane at top-k; and the same request through
  ``PolicyRetriever`` (boundary, lanes, fusion and trace).

Targets (issue 5): labsrc qps >= 1.5x bm25s and >= 50x rank-bm25, build no
slower than bm25s, hybrid p95 <= 10 ms. This is a benchmark, not a test: the
numbers depend on the machine and on what else is running.
"""

from __future__ import annotations

import os

# Single-threaded BLAS, set before NumPy is imported: a matrix-vector product per
# query gains nothing from threads, and on a busy machine they make latency spiky.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

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
from labsrc.lanes.sparse import BM25Index  # noqa: E402
from labsrc.retriever.policy import PolicyRetriever  # noqa: E402

TARGETS = {
    "qps_vs_bm25s": 1.5,
    "qps_vs_rank_bm25": 50.0,
    "build_speedup_vs_bm25s": 1.0,
    "hybrid_p95_ms": 10.0,
}


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


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    """The fastest of ``repeats`` wall-clock runs of ``fn``, in seconds (least disturbed by other load)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
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

    def build_bm25s() -> Any:
        retriever = bm25s.BM25(method="lucene", k1=k1, b=b)
        retriever.index(doc_terms, show_progress=False)
        return retriever

    def build_rank_bm25() -> Any:
        return BM25Okapi(doc_terms, k1=k1, b=b)

    build_s = {
        "labsrc": best_of(args.repeats, build_labsrc),
        "bm25s": best_of(args.repeats, build_bm25s),
        "rank_bm25": best_of(args.repeats, build_rank_bm25),
    }
    index, retriever, okapi = build_labsrc(), build_bm25s(), build_rank_bm25()

    def query_labsrc() -> None:
        for terms in query_terms:
            index.search_terms(terms, depth)

    def query_bm25s(n_threads: int) -> Callable[[], None]:
        return lambda: retriever.retrieve(query_terms, k=depth, n_threads=n_threads, show_progress=False)

    sample = query_terms[: max(1, min(args.rank_bm25_sample, len(query_terms)))]

    def query_rank_bm25() -> None:
        for terms in sample:
            scores = okapi.get_scores(terms)
            top = np.argpartition(-scores, depth - 1)[:depth]
            top[np.argsort(-scores[top], kind="stable")]

    n = len(query_terms)
    qps = {
        "labsrc": n / best_of(args.repeats, query_labsrc),
        "bm25s": n / best_of(args.repeats, query_bm25s(1)),
        "rank_bm25": len(sample) / best_of(max(1, args.repeats // 2), query_rank_bm25),
    }
    bm25s_sequential_qps = n / best_of(args.repeats, query_bm25s(0))

    result: dict[str, Any] = {
        "qps": qps,
        "build_s": build_s,
        "ratios": {
            "qps_vs_bm25s": qps["labsrc"] / qps["bm25s"],
            "qps_vs_rank_bm25": qps["labsrc"] / qps["rank_bm25"],
            "build_speedup_vs_bm25s": build_s["bm25s"] / build_s["labsrc"],
        },
        "extra": {"bm25s_n_threads0_qps": bm25s_sequential_qps},
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

    checks = {
        "qps_vs_bm25s": result["ratios"]["qps_vs_bm25s"] >= TARGETS["qps_vs_bm25s"],
        "qps_vs_rank_bm25": result["ratios"]["qps_vs_rank_bm25"] >= TARGETS["qps_vs_rank_bm25"],
        "build_speedup_vs_bm25s": result["ratios"]["build_speedup_vs_bm25s"] >= TARGETS["build_speedup_vs_bm25s"],
    }
    if "hybrid_ms" in result:
        checks["hybrid_p95_ms"] = result["hybrid_ms"]["p95"] <= TARGETS["hybrid_p95_ms"]
    result["targets"] = {name: {"target": TARGETS[name], "met": met} for name, met in checks.items()}
    return result


def report(result: dict[str, Any]) -> str:
    config = result["config"]
    lines = [
        f"BM25 speed on {config['collection']} ({config['documents']} docs, {config['queries']} {config['split']} "
        f"queries, top-{config['top_k']}, one thread, identical token lists, best of {config['repeats']})",
        "",
        f"{'library':<10} {'build s':>9} {'queries/s':>11}",
    ]
    for name in ("labsrc", "bm25s", "rank_bm25"):
        note = f"  (first {config['rank_bm25_sample']} queries)" if name == "rank_bm25" else ""
        lines.append(f"{name:<10} {result['build_s'][name]:>9.3f} {result['qps'][name]:>11.0f}{note}")
    ratios, targets = result["ratios"], result["targets"]

    def mark(name: str) -> str:
        return "met" if targets[name]["met"] else "NOT MET"

    lines += [
        "",
        f"labsrc / bm25s     query throughput {ratios['qps_vs_bm25s']:6.2f}x  "
        f"(target >= {TARGETS['qps_vs_bm25s']}x: {mark('qps_vs_bm25s')})",
        f"labsrc / rank-bm25 query throughput {ratios['qps_vs_rank_bm25']:6.1f}x  "
        f"(target >= {TARGETS['qps_vs_rank_bm25']:.0f}x: {mark('qps_vs_rank_bm25')})",
        f"bm25s / labsrc     build time       {ratios['build_speedup_vs_bm25s']:6.2f}x  "
        f"(target >= 1x, no slower than bm25s: {mark('build_speedup_vs_bm25s')})",
        f"(bm25s with n_threads=0, i.e. no thread pool: {result['extra']['bm25s_n_threads0_qps']:.0f} queries/s)",
    ]
    if "dense" in result:
        hybrid, policy = result["hybrid_ms"], result["policy_retriever_ms"]
        lines += [
            "",
            f"dense lane ({result['dense']['model']}): {result['dense']['qps']:.0f} queries/s",
            f"hybrid per query (BM25 + dense + RRF k=60, top-{config['top_k']}): p50 {hybrid['p50']:.2f} ms, "
            f"p95 {hybrid['p95']:.2f} ms  (target p95 <= {TARGETS['hybrid_p95_ms']:.0f} ms: {mark('hybrid_p95_ms')})",
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
    parser.add_argument("--repeats", type=int, default=5, help="timed repetitions; the best is kept (default 5)")
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
        path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
