"""BM25 at scale: query throughput against corpus size, labsrc and bm25s, on synthetic Zipf text.

Documents have 10-60 tokens drawn from a Zipf vocabulary (exponent 1.1, 200,000
word types); queries have 3-8 tokens drawn from the same distribution, so
they contain common words, as real queries do. Every library gets the same
token lists, top-10, one thread. Rows:

* ``labsrc index``: :class:`labsrc.lanes.BM25Index` over the whole corpus, the query
  batch through ``top_positions_many`` (positions and scores as arrays, as bm25s returns);
* ``labsrc index, ids``: the same index, one ``search_terms`` call per query, ``(id, score)`` pairs;
* ``labsrc permitted``: :class:`labsrc.lanes.permitted.PermittedBM25`, the same
  index scored with per-request statistics for a caller who may see a random 90%
  of the documents (with every document permitted the lane answers from the index);
* ``bm25s numba``: bm25s with ``backend="numba"``, ``n_threads=0`` and numba pinned
  to one thread (its fastest single-thread configuration);
* ``bm25s numpy``: bm25s's default backend, ``n_threads=0``;
* ``PISA block-max WAND``, ``PISA MaxScore`` (when ``pyterrier-pisa`` is installed:
  ``pip install pyterrier-pisa``): PISA 0.4.9's C++ engine over the same token
  counts (``toks_indexer``, no stemmer, no stopwords, its default ``block_simdbp``
  encoding), BM25 with k1 1.2 and b 0.75, the query batch pre-tokenised in one
  ``transform`` call with ``threads=1``. PISA's BM25 idf and float32 scores differ
  from Lucene's, so it is a speed peer, not an exactness one.

The rows are timed in turn, round by round (``--repeats`` rounds), each row's best
round kept. Results are checked equal to labsrc's exhaustive scoring on a sample of queries.

    python benchmarks/bench_bm25_scale.py [--sizes 10000,100000,1000000] [--queries 200] [--json OUT]
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402

import numpy as np  # noqa: E402

from labsrc.lanes import Analyzer, BM25Index, load_bm25_index, save_bm25_index  # noqa: E402
from labsrc.lanes.permitted import PermittedBM25  # noqa: E402
from labsrc.records.files import atomic_write_bytes  # noqa: E402

# A sibling script (benchmarks/ is on sys.path when a script there runs): one timing helper for both.
from bench_bm25 import interleaved_best  # noqa: E402

VOCABULARY = 200_000
#: The tokens are given; queries are split on whitespace (an Analyzer, so the index can be saved).
WHITESPACE = Analyzer(pattern=r"\S+", stopwords=frozenset(), normalize=None, casefold=False, name="whitespace")


def zipf_tokens(rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` word ids from a Zipf(1.1) distribution truncated to the vocabulary."""
    out = np.empty(0, dtype=np.int64)
    while out.size < count:
        draw = rng.zipf(1.1, size=2 * (count - out.size))
        out = np.concatenate([out, draw[draw <= VOCABULARY] - 1])
    return out[:count]


def synthetic(n_docs: int, n_queries: int, seed: int = 0) -> tuple[list[list[str]], list[list[str]]]:
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(VOCABULARY)], dtype=object)
    lengths = rng.integers(10, 61, size=n_docs)
    flat = words[zipf_tokens(rng, int(lengths.sum()))]
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    docs = [flat[lo:hi].tolist() for lo, hi in zip(bounds[:-1], bounds[1:])]
    q_lengths = rng.integers(3, 9, size=n_queries)
    queries = [words[zipf_tokens(rng, int(k))].tolist() for k in q_lengths]
    return docs, queries


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Send this process's stdout and stderr (file descriptors 1 and 2, so C++ output too) to /dev/null."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)


PISA_ALGORITHMS = {"PISA block-max WAND": "block_max_wand", "PISA MaxScore": "maxscore"}


def pisa_runs(
    docs: list[list[str]], queries: list[list[str]], top_k: int, build: dict[str, float], folder: str
) -> dict[str, Callable[[], object]]:
    """One timed callable per PISA query algorithm, its index in ``folder`` (none without ``pyterrier-pisa``)."""
    try:
        import pandas as pd
        from pyterrier_pisa import PisaIndex
    except ImportError:
        return {}
    from collections import Counter

    t0 = time.perf_counter()
    index = PisaIndex(folder, stemmer="none", stops="none", threads=1, overwrite=True)
    with _quiet():  # PISA's C++ prints a progress line per percent
        index.toks_indexer().index({"docno": f"d{i:08d}", "toks": dict(Counter(d))} for i, d in enumerate(docs))
    build["PISA"] = time.perf_counter() - t0
    frame = pd.DataFrame({"qid": [str(i) for i in range(len(queries))],
                          "query_toks": [dict(Counter(q)) for q in queries]})
    runs = {}
    for name, algorithm in PISA_ALGORITHMS.items():
        with _quiet():  # building a retriever writes its block-max data, with progress lines
            retriever = index.bm25(k1=1.2, b=0.75, num_results=top_k, threads=1, query_algorithm=algorithm,
                                   toks_scale=1.0)
        runs[name] = lambda retriever=retriever: retriever.transform(frame)
    return runs


def measure(n_docs: int, n_queries: int, top_k: int, repeats: int) -> dict[str, object]:
    import bm25s
    import numba

    numba.set_num_threads(1)
    docs, queries = synthetic(n_docs, n_queries)
    ids = [f"d{i:08d}" for i in range(n_docs)]
    t0 = time.perf_counter()
    index = BM25Index.build_from_terms(zip(ids, docs), analyzer=WHITESPACE)
    build = {"labsrc": time.perf_counter() - t0}
    permitted, mask = PermittedBM25(index), np.random.default_rng(1).random(n_docs) < 0.9
    engines = {}
    for backend in ("numba", "numpy"):
        t0 = time.perf_counter()
        engine = bm25s.BM25(method="lucene", k1=1.2, b=0.75, backend=backend)
        engine.index(docs, show_progress=False)
        build[f"bm25s {backend}"] = time.perf_counter() - t0
        engines[backend] = engine
    pisa_folder = tempfile.TemporaryDirectory(prefix="bench-pisa-")  # removed below, after PISA's timings
    pisa = pisa_runs(docs, queries, top_k, build, pisa_folder.name)
    del docs

    def bm25s_run(backend: str) -> Callable[[], object]:
        engine = engines[backend]
        return lambda: engine.retrieve(queries, k=top_k, n_threads=0, show_progress=False, backend_selection=backend)

    for backend in engines:  # the first numba call compiles; keep it out of the timings
        bm25s_run(backend)()
    runs: dict[str, Callable[[], object]] = {
        "labsrc index": lambda: index.top_positions_many(queries, top_k),
        "labsrc index, ids": lambda: [index.search_terms(q, top_k) for q in queries],
        "labsrc permitted": lambda: [permitted.search_terms(q, mask, top_k) for q in queries],
        "bm25s numba": bm25s_run("numba"),
        "bm25s numpy": bm25s_run("numpy"),
    }
    for name, run in pisa.items():
        with _quiet():
            run()  # the first call loads the index files (and prints as it builds its block-max data)
        runs[name] = run
    seconds = interleaved_best(repeats, runs)
    pisa_folder.cleanup()
    # Exactness: the fast paths return what exhaustive scoring ranks first.
    for q in queries[:20]:
        exhaustive = index.score_terms(q)
        order = np.lexsort((np.arange(n_docs), -exhaustive))[:top_k]
        expected = [(ids[p], float(exhaustive[p])) for p in order if exhaustive[p] > 0]
        positions, scores = index.top_positions(q, top_k)
        if index.search_terms(q, top_k) != expected or [(ids[p], s) for p, s in zip(positions, scores)] != expected:
            raise SystemExit("labsrc's top-k differs from exhaustive scoring")
    # A persisted shared index: save, then load memory-mapped, with identical results.
    with tempfile.TemporaryDirectory() as tmp:
        save_bm25_index(index, tmp)
        t0 = time.perf_counter()
        loaded = load_bm25_index(tmp, mmap=True, analyzer=WHITESPACE)  # not one of the lab's own patterns
        load_s = time.perf_counter() - t0
        if any(loaded.search_terms(q, top_k) != index.search_terms(q, top_k) for q in queries[:20]):
            raise SystemExit("the loaded index scores differently")
    return {
        "load_mmap_s": load_s,
        "documents": n_docs,
        "queries": n_queries,
        "qps": {name: n_queries / s for name, s in seconds.items()},
        "build_s": build,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args()
    try:
        import bm25s  # noqa: F401
        import numba  # noqa: F401
    except ImportError as exc:
        print(f"bench_bm25_scale: needs bm25s and numba (pip install -e '.[bench]'): {exc}", file=sys.stderr)
        return 2
    rows = []
    for size in [int(s) for s in args.sizes.split(",")]:
        row = measure(size, args.queries, args.top_k, args.repeats)
        rows.append(row)
        qps = row["qps"]
        fastest_peer = max(v for k, v in qps.items() if not k.startswith("labsrc"))
        print(f"\n{size:,} documents, {args.queries} queries, top-{args.top_k}, one thread (queries/s)")
        for name, value in qps.items():
            print(f"  {name:<18}{value:>10.0f}   {value / fastest_peer:5.2f}x the fastest peer")
        print(f"  saved index loads (memory-mapped) in {row['load_mmap_s']:.2f} s, identical results")
    if args.json:
        atomic_write_bytes(args.json, (json.dumps({"top_k": args.top_k, "rows": rows}, indent=2) + "\n").encode("utf-8"))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
