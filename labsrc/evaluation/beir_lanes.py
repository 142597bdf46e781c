"""The lab's lanes over a whole BEIR corpus, as runs (query id → {doc id → score}).

:class:`BeirLanes` runs BM25 and the dense lane over every document (a BEIR
corpus has no permissions: the universe is everything); :func:`rrf_run` and
:func:`convex_run` fuse whole runs query by query.
"""


from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from labsrc.datasets.beir import BeirDataset, Run
from labsrc.errors import InvalidArgument
from labsrc.evaluation.latency import Progress
from labsrc.fusion.convex import check_alpha, convex_fusion
from labsrc.fusion.rrf import DEFAULT_RRF_K, check_rrf_k, fuse_ranked_ids
from labsrc.lanes.analysis import Analyzer, english_analyzer
from labsrc.lanes.bm25 import DEFAULT_B, DEFAULT_K1
from labsrc.lanes.sparse import BM25Index, sparse_index_for
from labsrc.lanes.vectordir import VectorDirectory
from labsrc.ranking import check_top_k, top_k_positions

__all__ = [
    "BeirLanes",
    "convex_run",
    "rrf_run",
]

# --- running the lanes -----------------------------------------------------------------



def _drop_identical(hits: list[tuple[str, float]], qid: str, ignore: bool) -> list[tuple[str, float]]:
    return [(doc, score) for doc, score in hits if doc != qid] if ignore else hits


class BeirLanes:
    """The BM25 and dense lanes over a whole BEIR corpus (the universe: every document).

    The BM25 index is :func:`~labsrc.lanes.sparse.sparse_index_for` over
    :func:`as_chunks`, the very index :class:`~labsrc.retriever.policy.PolicyRetriever`
    uses for :data:`UNIVERSE_CALLER`, so the two paths share it. Dense scores
    are cosines against the stored vectors. Both lanes rank by (score desc, id
    asc) and keep only scores above zero, like the lesson's lanes.
    """

    def __init__(
        self,
        dataset: BeirDataset,
        vectors: VectorDirectory | None = None,
        *,
        analyzer: Analyzer | Callable[[str], list[str]] | None = None,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
    ) -> None:
        self.dataset = dataset
        self.vectors = vectors
        self.analyzer = english_analyzer() if analyzer is None else analyzer
        self.index: BM25Index = sparse_index_for(dataset.chunks, analyzer=self.analyzer, k1=k1, b=b)
        if vectors is not None:
            missing = set(self.index.ids) - set(vectors.doc_ids)
            if missing:
                raise InvalidArgument(f"{len(missing)} corpus documents have no vector, e.g. {sorted(missing)[:3]}")
            # Dense columns in index order (ids ascending), so position ties break on id.
            row = {doc_id: i for i, doc_id in enumerate(vectors.doc_ids)}
            self._dense_columns = np.array([row[doc_id] for doc_id in self.index.ids], dtype=np.intp)

    def versions(self) -> dict[str, Any]:
        from labsrc.version import __version__

        out: dict[str, Any] = {
            "labsrc": __version__,
            "collection": f"beir/{self.dataset.name}",
            "sparse": getattr(self.analyzer, "name", type(self.analyzer).__name__),
            "bm25": f"lucene-idf k1={self.index.k1:g} b={self.index.b:g}",
        }
        if self.vectors is not None:
            out["dense"] = self.vectors.version
            out["dense_model"] = dict(self.vectors.model)
        return out

    def query_terms(self, text: str) -> list[str]:
        return list(self.analyzer(text))

    def bm25_run(
        self,
        queries: Mapping[str, str],
        depth: int,
        *,
        ignore_identical_ids: bool = False,
        progress: Progress | None = None,
    ) -> Run:
        """BM25 top ``depth`` for each query id → text."""
        depth = check_top_k(depth, "depth")
        fetch = depth + 1 if ignore_identical_ids else depth
        run: Run = {}
        for done, (qid, text) in enumerate(queries.items(), start=1):
            hits = self.index.search_terms(self.query_terms(text), fetch)
            run[qid] = dict(_drop_identical(hits, qid, ignore_identical_ids)[:depth])
            if progress is not None:
                progress("bm25", done, len(queries))
        return run

    def dense_scores(self, query_ids: Sequence[str]) -> np.ndarray:
        """Cosine of every document (columns in ``index.ids`` order) for each query id (rows)."""
        if self.vectors is None:
            raise InvalidArgument("this BeirLanes has no vectors; pass a VectorDirectory for the dense lane")
        return self.vectors.cosine_scores(self.vectors.query_matrix(query_ids))[:, self._dense_columns]

    def dense_run(
        self,
        query_ids: Iterable[str],
        depth: int,
        *,
        ignore_identical_ids: bool = False,
        progress: Progress | None = None,
        batch_size: int = 256,
    ) -> Run:
        """Dense top ``depth`` for each query id, from the stored query vectors."""
        depth = check_top_k(depth, "depth")
        fetch = depth + 1 if ignore_identical_ids else depth
        qids = list(query_ids)
        ids = self.index.ids
        run: Run = {}
        for start in range(0, len(qids), batch_size):
            batch = qids[start : start + batch_size]
            for qid, scores in zip(batch, self.dense_scores(batch)):
                positions = top_k_positions(scores, fetch)
                hits = list(zip([ids[p] for p in positions.tolist()], scores[positions].tolist()))
                run[qid] = dict(_drop_identical(hits, qid, ignore_identical_ids)[:depth])
            if progress is not None:
                progress("dense", start + len(batch), len(qids))
        return run

    def dense_search(self, query_id: str, depth: int) -> list[tuple[str, float]]:
        """One query's dense top ``depth`` as ``(id, cosine)``, by (score desc, id asc)."""
        depth = check_top_k(depth, "depth")
        scores = self.dense_scores([query_id])[0]
        positions = top_k_positions(scores, depth)
        ids = self.index.ids
        return list(zip([ids[p] for p in positions.tolist()], scores[positions].tolist()))

    def hybrid_search(
        self, query_id: str, text: str, depth: int, rrf_k: float = DEFAULT_RRF_K
    ) -> list[tuple[str, float]]:
        """One request end to end: analyse ``text`` and run BM25, look up the query's vector
        and run dense, then RRF; each lane and the fused list cut at ``depth``.

        The query vector is the stored one (the encoder is not part of this timing).
        """
        depth = check_top_k(depth, "depth")
        lanes = {"bm25": self.index.search(text, depth), "dense": self.dense_search(query_id, depth)}
        return fuse_ranked_ids(lanes, rrf_k)[:depth]


def rrf_run(runs: Mapping[str, Run], depth: int, rrf_k: float = DEFAULT_RRF_K) -> Run:
    """Reciprocal Rank Fusion of several lanes' runs, query by query, cut at ``depth``.

    ``rrf_k`` is RRF's smoothing constant (60 per Cormack et al.), not a cut-off.
    """
    depth = check_top_k(depth, "depth")
    rrf_k = check_rrf_k(rrf_k)
    qids = sorted(set().union(*(set(run) for run in runs.values())))
    return {
        qid: dict(
            fuse_ranked_ids({lane: list(run.get(qid, {}).items()) for lane, run in runs.items()}, rrf_k)[:depth]
        )
        for qid in qids
    }


def convex_run(bm25: Run, dense: Run, alpha: float, depth: int) -> Run:
    """:func:`~labsrc.fusion.convex_fusion` of two runs, query by query, cut at ``depth``."""
    depth = check_top_k(depth, "depth")
    alpha = check_alpha(alpha)
    return {
        qid: dict(convex_fusion(list(bm25.get(qid, {}).items()), list(dense.get(qid, {}).items()), alpha, top_k=depth))
        for qid in sorted(set(bm25) | set(dense))
    }
