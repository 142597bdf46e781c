"""BEIR collections: load them, run the lanes over them, and score the runs.

A BEIR collection (Thakur et al., NeurIPS 2021 Datasets & Benchmarks) is a
directory such as ``scifact/``::

    corpus.jsonl        {"_id", "title", "text", "metadata"} per line
    queries.jsonl       {"_id", "text", "metadata"} per line
    qrels/<split>.tsv   header "query-id<TAB>corpus-id<TAB>score", one judgement per line
    vectors/<model>/    optional precomputed embeddings (see :mod:`labsrc.vectordir`)

**Universe semantics.** BEIR documents carry no ACLs, regions or dates, so every
document is permitted: the searchable universe is the whole corpus, and BM25's
N, n_t and avgdl are computed over all of it, exactly as in the published
baselines. :func:`as_chunks` and :func:`universe_caller` express that in the
lab's own terms (one region, one tag, always current), so the unchanged
:class:`~labsrc.retriever.PolicyRetriever` and its boundary can run on a BEIR
corpus; the boundary then lets everything through.

**Where the data lives.** Commands take ``--data DIR``; otherwise the
``LABSRC_BEIR_DIR`` environment variable is used. Either may name a collection
directory (holding ``corpus.jsonl``) or a folder of collections (holding
``scifact/``). Tests and notebooks fall back to ``../shared/data/beir`` next to
the repository and skip, with a reason, when nothing is there.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from .analysis import Analyzer, english_analyzer
from .errors import InvalidArgument, InvalidRecord, LabError
from .fusion import DEFAULT_RRF_K, check_alpha, check_rrf_k, convex_fusion, fuse_ranked_ids
from .loading import Field, iter_jsonl, read_text
from .metrics import evaluate_run
from .ranking import check_top_k, top_k_positions
from .records import Caller, PolicyChunk
from .sparse import DEFAULT_B, DEFAULT_K1, BM25Index, sparse_index_for
from .vectordir import VectorDirectory, load_vector_dir

__all__ = [
    "ALPHA_GRID",
    "AlphaSweep",
    "BeirDataset",
    "BeirDocument",
    "BeirLanes",
    "BenchmarkResult",
    "DEFAULT_ALPHA",
    "DEFAULT_DATASET",
    "ENV_VAR",
    "LANES",
    "REPORT_METRICS",
    "Run",
    "UNIVERSE_CALLER",
    "as_chunks",
    "convex_run",
    "default_beir_root",
    "evaluate_lanes",
    "find_dataset_dir",
    "load_beir",
    "load_corpus",
    "load_lanes",
    "load_qrels",
    "load_queries",
    "missing_data_reason",
    "resolve_dataset_dir",
    "rrf_run",
    "run_benchmark",
    "tune_alpha",
    "universe_caller",
    "write_trec_run",
]

#: The environment variable naming the BEIR data directory.
ENV_VAR = "LABSRC_BEIR_DIR"
DEFAULT_DATASET = "scifact"

#: qid → {doc id → score}: the run shape of ranx, pytrec_eval and :func:`~labsrc.metrics.evaluate_run`.
Run = dict[str, dict[str, float]]
Qrels = Mapping[str, Mapping[str, int]]

#: The lanes ``labsrc beir`` can run, in report order.
LANES = ("bm25", "dense", "rrf", "convex")
#: The metrics every report shows (BEIR's headline nDCG@10 plus recall and MRR).
REPORT_METRICS = ("ndcg@10", "recall@100", "mrr@10")
#: Convex fusion's alpha grid: 0.0, 0.05, ..., 1.0 (rounded so 0.15 prints as 0.15).
ALPHA_GRID = tuple(round(i * 0.05, 2) for i in range(21))
#: The alpha used when there is no train split to tune on.
DEFAULT_ALPHA = 0.5


# --- where the data is ---------------------------------------------------------------


def default_beir_root() -> Path:
    """``$LABSRC_BEIR_DIR`` if set, else ``../shared/data/beir`` next to the repository."""
    override = os.environ.get(ENV_VAR)
    if override:
        return Path(override)
    return Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "beir"


def _collection_in(path: Path, dataset: str) -> Path | None:
    if (path / "corpus.jsonl").is_file():
        return path
    if (path / dataset / "corpus.jsonl").is_file():
        return path / dataset
    return None


def resolve_dataset_dir(path: str | Path | None = None, dataset: str = DEFAULT_DATASET) -> Path:
    """The collection directory from ``path`` (``--data``) or ``$LABSRC_BEIR_DIR``.

    ``path`` may be the collection itself or a folder holding ``<dataset>/``.
    Raises :class:`~labsrc.errors.LabError` saying how to get the data.
    """
    if path is None:
        override = os.environ.get(ENV_VAR)
        if not override:
            raise LabError(
                f"no BEIR data given: pass --data DIR or set {ENV_VAR} to the folder holding '{dataset}/' "
                "(download https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/"
                f"{dataset}.zip and unzip it)"
            )
        path = override
    found = _collection_in(Path(path), dataset)
    if found is None:
        raise LabError(
            f"no BEIR collection at {path}: expected {Path(path) / 'corpus.jsonl'} "
            f"or {Path(path) / dataset / 'corpus.jsonl'}"
        )
    return found


def find_dataset_dir(dataset: str = DEFAULT_DATASET) -> Path | None:
    """For tests and notebooks: the collection under :func:`default_beir_root`, or None if absent."""
    return _collection_in(default_beir_root(), dataset)


def missing_data_reason(dataset: str = DEFAULT_DATASET) -> str:
    """The skip reason tests and notebooks give when the collection is absent."""
    return (
        f"BEIR {dataset} not found under {default_beir_root()}; set {ENV_VAR} to the folder holding "
        f"'{dataset}/' (see the README, 'Real benchmark')"
    )


# --- records -------------------------------------------------------------------------


@dataclass(frozen=True)
class BeirDocument:
    """One corpus document. BEIR indexes and embeds ``title + " " + text``."""

    doc_id: str
    title: str
    text: str

    @property
    def indexed_text(self) -> str:
        """``title + " " + text``, stripped: what both lanes see."""
        return f"{self.title} {self.text}".strip()


@dataclass(frozen=True, eq=False)
class BeirDataset:
    """A loaded collection: corpus (file order), queries, and qrels per split."""

    name: str
    path: Path
    corpus: Mapping[str, BeirDocument]
    queries: Mapping[str, str]
    qrels: Mapping[str, Mapping[str, Mapping[str, int]]]
    #: ``(split, query id, doc id)`` of judgements whose document is not in the corpus.
    #: They are kept (BEIR keeps them, and they still count as relevant), so no run can reach recall 1 there.
    missing_docs: tuple[tuple[str, str, str], ...] = field(default=())

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(sorted(self.qrels))

    def split_qrels(self, split: str) -> Mapping[str, Mapping[str, int]]:
        if split not in self.qrels:
            raise InvalidArgument(f"no qrels split {split!r} in {self.path}; splits: {list(self.splits)}")
        return self.qrels[split]

    def split_queries(self, split: str) -> dict[str, str]:
        """query id → text for the judged queries of ``split``, sorted by id."""
        return {qid: self.queries[qid] for qid in sorted(self.split_qrels(split))}

    @cached_property
    def chunks(self) -> tuple[PolicyChunk, ...]:
        """The corpus as lab chunks (see :func:`as_chunks`), built once."""
        return as_chunks(self)


# --- loading -------------------------------------------------------------------------


def load_corpus(path: str | Path) -> dict[str, BeirDocument]:
    """``corpus.jsonl`` → doc id → document, in file order.

    ``_id`` must be a non-blank unique string; ``title`` and ``text`` must be
    strings (either may be empty, as in BEIR's ArguAna); ``metadata``, if
    present, an object. Other keys are ignored.
    """
    corpus: dict[str, BeirDocument] = {}
    first_line: dict[str, int] = {}
    for number, record in iter_jsonl(path):
        f = Field(record, path=path, line=number)
        doc_id = f.text("_id")
        title = f.text("title", blank_ok=True) if "title" in record else ""
        text = f.text("text", blank_ok=True)
        f.mapping("metadata")
        if doc_id in first_line:
            raise f.error("_id", f"duplicate document id {doc_id!r} (first seen on line {first_line[doc_id]})")
        first_line[doc_id] = number
        corpus[doc_id] = BeirDocument(doc_id, title, text)
    if not corpus:
        raise InvalidRecord("the corpus is empty", path=path)
    return corpus


def load_queries(path: str | Path) -> dict[str, str]:
    """``queries.jsonl`` → query id → text, in file order (``_id`` unique, ``text`` non-blank)."""
    queries: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for number, record in iter_jsonl(path):
        f = Field(record, path=path, line=number)
        qid = f.text("_id")
        text = f.text("text")
        f.mapping("metadata")
        if qid in first_line:
            raise f.error("_id", f"duplicate query id {qid!r} (first seen on line {first_line[qid]})")
        first_line[qid] = number
        queries[qid] = text
    return queries


_QRELS_HEADER = ("query-id", "corpus-id", "score")


def load_qrels(path: str | Path, *, query_ids: Iterable[str] | None = None) -> dict[str, dict[str, int]]:
    """``qrels/<split>.tsv`` → query id → {doc id → grade}.

    The header line ``query-id corpus-id score`` is optional. Each row must have
    three tab-separated fields, the grade must be an integer, a (query, doc)
    pair may appear once, and, when ``query_ids`` is given, every query id must
    be one of them. Errors name the file, the line and the field.
    """
    path = Path(path)
    known = None if query_ids is None else set(query_ids)
    text = read_text(path)
    qrels: dict[str, dict[str, int]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        columns = line.split("\t")
        if number == 1 and tuple(c.strip() for c in columns) == _QRELS_HEADER:
            continue
        if len(columns) != 3:
            raise InvalidRecord(
                f"expected 3 tab-separated fields (query-id, corpus-id, score), got {len(columns)}",
                path=path,
                line=number,
            )
        qid, doc_id, grade_text = (c.strip() for c in columns)
        for name, value in (("query-id", qid), ("corpus-id", doc_id)):
            if not value:
                raise InvalidRecord("must not be empty", path=path, line=number, field=name)
        try:
            grade = int(grade_text)
        except ValueError:
            raise InvalidRecord(f"grade must be an integer, got {grade_text!r}", path=path, line=number, field="score")
        if known is not None and qid not in known:
            raise InvalidRecord(f"query id {qid!r} is not in queries.jsonl", path=path, line=number, field="query-id")
        judged = qrels.setdefault(qid, {})
        if doc_id in judged:
            raise InvalidRecord(
                f"({qid!r}, {doc_id!r}) is judged twice", path=path, line=number, field="corpus-id"
            )
        judged[doc_id] = grade
    if not qrels:
        raise InvalidRecord("no judgements", path=path)
    return qrels


def load_beir(path: str | Path, *, splits: Sequence[str] | None = None) -> BeirDataset:
    """Load a BEIR collection directory: corpus, queries and the qrels of ``splits`` (default: all)."""
    path = Path(path)
    if not (path / "corpus.jsonl").is_file():
        raise InvalidRecord("not a BEIR collection: corpus.jsonl is missing", path=path)
    corpus = load_corpus(path / "corpus.jsonl")
    queries = load_queries(path / "queries.jsonl")
    qrels_dir = path / "qrels"
    available = sorted(p.stem for p in qrels_dir.glob("*.tsv")) if qrels_dir.is_dir() else []
    wanted = available if splits is None else list(splits)
    unknown = sorted(set(wanted) - set(available))
    if unknown:
        raise InvalidArgument(f"no qrels for split(s) {unknown} in {qrels_dir}; available: {available}")
    qrels: dict[str, Mapping[str, Mapping[str, int]]] = {}
    missing: list[tuple[str, str, str]] = []
    for split in wanted:
        table = load_qrels(qrels_dir / f"{split}.tsv", query_ids=queries)
        missing.extend((split, qid, doc) for qid in sorted(table) for doc in sorted(table[qid]) if doc not in corpus)
        qrels[split] = MappingProxyType({qid: MappingProxyType(judged) for qid, judged in table.items()})
    return BeirDataset(
        name=path.name,
        path=path,
        corpus=MappingProxyType(corpus),
        queries=MappingProxyType(queries),
        qrels=MappingProxyType(qrels),
        missing_docs=tuple(missing),
    )


# --- universe semantics --------------------------------------------------------------

UNIVERSE_REGION = "beir"
UNIVERSE_TAG = "beir:public"
UNIVERSE_DATE = dt.date(2000, 1, 1)
#: The one caller of a BEIR universe: it holds the one tag every document carries.
UNIVERSE_CALLER = Caller("beir-universe", UNIVERSE_REGION, frozenset({UNIVERSE_TAG}))


def universe_caller() -> Caller:
    """The caller for whom every BEIR document is permitted (on any date from 2000-01-01)."""
    return UNIVERSE_CALLER


def as_chunks(dataset: BeirDataset) -> tuple[PolicyChunk, ...]:
    """The corpus as lab chunks, in corpus order: every one permitted to :data:`UNIVERSE_CALLER`.

    ``text`` is the indexed text (``title + " " + text``), ``title`` the title.
    Region, tag and dates are the same for all documents, so the boundary is a
    no-op: that is the universe semantics of a collection without ACLs.
    """
    version = f"beir/{dataset.name}"
    return tuple(
        PolicyChunk(
            chunk_id=doc.doc_id,
            document_id=doc.doc_id,
            parent_id=doc.doc_id,
            version=version,
            region=UNIVERSE_REGION,
            acl_tag=UNIVERSE_TAG,
            effective_from=UNIVERSE_DATE,
            effective_to=None,
            text=doc.indexed_text,
            title=doc.title,
        )
        for doc in dataset.corpus.values()
    )


# --- running the lanes -----------------------------------------------------------------

#: ``progress(stage, done, total)``: called as a lane works through its queries.
Progress = Callable[[str, int, int], None]


def _drop_identical(hits: list[tuple[str, float]], qid: str, ignore: bool) -> list[tuple[str, float]]:
    return [(doc, score) for doc, score in hits if doc != qid] if ignore else hits


class BeirLanes:
    """The BM25 and dense lanes over a whole BEIR corpus (the universe: every document).

    The BM25 index is :func:`~labsrc.sparse.sparse_index_for` over
    :func:`as_chunks`, the very index :class:`~labsrc.retriever.PolicyRetriever`
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
        from . import __version__

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


@dataclass(frozen=True)
class AlphaSweep:
    """The result of tuning convex fusion's alpha on one split."""

    alpha: float
    metric: str
    split: str
    #: ``(alpha, metric value)`` for every grid point, in grid order.
    values: tuple[tuple[float, float], ...]


def tune_alpha(
    bm25: Run,
    dense: Run,
    qrels: Qrels,
    depth: int,
    *,
    grid: Sequence[float] = ALPHA_GRID,
    metric: str = "ndcg@10",
    split: str = "train",
) -> AlphaSweep:
    """The grid alpha that maximises ``metric`` of :func:`convex_run` on ``qrels``.

    Ties go to the smaller alpha (the first maximum in grid order). Pass the
    *train* split's runs and qrels; choosing alpha on the split you report
    overstates the result.
    """
    if not grid:
        raise InvalidArgument("the alpha grid is empty")
    values = []
    for alpha in grid:
        run = convex_run(bm25, dense, alpha, depth)
        values.append((float(alpha), float(evaluate_run(run, qrels, [metric])[metric])))
    best = max(values, key=lambda pair: pair[1])  # max keeps the first of equal values
    return AlphaSweep(alpha=best[0], metric=metric, split=split, values=tuple(values))


def evaluate_lanes(
    runs: Mapping[str, Run], qrels: Qrels, metrics: Sequence[str] = REPORT_METRICS
) -> dict[str, dict[str, float]]:
    """lane → metric → mean over the judged queries (:func:`~labsrc.metrics.evaluate_run`)."""
    return {lane: dict(evaluate_run(run, qrels, list(metrics))) for lane, run in runs.items()}


def write_trec_run(run: Run, path: str | Path, tag: str) -> Path:
    """Write ``qid Q0 docid rank score tag`` lines (1-based ranks, score desc, id asc).

    Scores are written with ``repr`` so they round-trip exactly. trec_eval and
    ranx re-sort by score, so only exact ties could be reordered by them.
    """
    if not tag or any(c.isspace() for c in tag):
        raise InvalidArgument(f"a run tag must be one word, not {tag!r}")
    path = Path(path)
    lines = []
    for qid in sorted(run):
        ranked = sorted(run[qid].items(), key=lambda pair: (-pair[1], pair[0]))
        for rank, (doc, score) in enumerate(ranked, start=1):
            lines.append(f"{qid} Q0 {doc} {rank} {score!r} {tag}\n")
    path.write_text("".join(lines), encoding="utf-8")
    return path


# --- the whole benchmark ---------------------------------------------------------------------


@dataclass(frozen=True)
class BenchmarkResult:
    """Runs, metrics and provenance of one ``labsrc beir`` invocation."""

    runs: Mapping[str, Run]
    metrics: Mapping[str, Mapping[str, float]]
    config: Mapping[str, Any]
    versions: Mapping[str, Any]
    sweep: AlphaSweep | None = None

    def to_json(self) -> dict[str, Any]:
        """``{lane: {metric: value}, ..., "config": {...}, "versions": {...}}``."""
        out: dict[str, Any] = {lane: dict(values) for lane, values in self.metrics.items()}
        out["config"] = dict(self.config)
        out["versions"] = dict(self.versions)
        if self.sweep is not None:
            out["alpha_sweep"] = {
                "split": self.sweep.split,
                "metric": self.sweep.metric,
                "chosen": self.sweep.alpha,
                "values": [[alpha, value] for alpha, value in self.sweep.values],
            }
        return out


def _check_lanes(lanes: Sequence[str]) -> tuple[str, ...]:
    unknown = [lane for lane in lanes if lane not in LANES]
    if unknown or not lanes:
        raise InvalidArgument(f"unknown lane(s) {unknown}; valid lanes: {', '.join(LANES)}")
    return tuple(lane for lane in LANES if lane in lanes)


def run_benchmark(
    lanes_source: BeirLanes,
    *,
    split: str = "test",
    lanes: Sequence[str] = LANES,
    depth: int = 100,
    rrf_k: float = DEFAULT_RRF_K,
    alpha: float | None = None,
    tune_split: str = "train",
    ignore_identical_ids: bool = False,
    progress: Progress | None = None,
) -> BenchmarkResult:
    """Run the chosen lanes on ``split`` and score them with :data:`REPORT_METRICS`.

    ``convex`` uses ``alpha`` when given. Otherwise alpha is tuned on
    ``tune_split`` (train) over :data:`ALPHA_GRID`, maximising nDCG@10, and then
    applied to ``split``; with no ``tune_split`` qrels (or when ``split`` *is*
    the tune split) the fixed :data:`DEFAULT_ALPHA` is used. The test split is
    never used for tuning.
    """
    chosen = _check_lanes(lanes)
    depth = check_top_k(depth, "depth")
    rrf_k = check_rrf_k(rrf_k)
    if alpha is not None:
        alpha = check_alpha(alpha)
    dataset = lanes_source.dataset
    queries = dataset.split_queries(split)
    qrels = dataset.split_qrels(split)
    need_bm25 = bool({"bm25", "rrf", "convex"} & set(chosen))
    need_dense = bool({"dense", "rrf", "convex"} & set(chosen))
    options = {"ignore_identical_ids": ignore_identical_ids, "progress": progress}

    base: dict[str, Run] = {}
    if need_bm25:
        base["bm25"] = lanes_source.bm25_run(queries, depth, **options)
    if need_dense:
        base["dense"] = lanes_source.dense_run(list(queries), depth, **options)
    runs: dict[str, Run] = {lane: base[lane] for lane in ("bm25", "dense") if lane in chosen}
    if "rrf" in chosen:
        runs["rrf"] = rrf_run({"bm25": base["bm25"], "dense": base["dense"]}, depth, rrf_k)

    sweep = None
    alpha_source = None
    if "convex" in chosen:
        if alpha is not None:
            alpha_source = "given"
        elif tune_split in dataset.qrels and tune_split != split:
            tune_queries = dataset.split_queries(tune_split)
            tune_options = {"ignore_identical_ids": ignore_identical_ids, "progress": _relabel(progress, tune_split)}
            sweep = tune_alpha(
                lanes_source.bm25_run(tune_queries, depth, **tune_options),
                lanes_source.dense_run(list(tune_queries), depth, **tune_options),
                dataset.split_qrels(tune_split),
                depth,
                split=tune_split,
            )
            alpha, alpha_source = sweep.alpha, f"tuned on {tune_split} (nDCG@10, grid 0.0-1.0 step 0.05)"
        else:
            alpha, alpha_source = DEFAULT_ALPHA, f"default (no {tune_split} split to tune on)"
        runs["convex"] = convex_run(base["bm25"], base["dense"], alpha, depth)

    config: dict[str, Any] = {
        "collection": dataset.name,
        "data": str(dataset.path),
        "split": split,
        "queries": len(queries),
        "lanes": list(chosen),
        "depth": depth,
        "rrf_k": rrf_k,
        "alpha": alpha,
        "alpha_source": alpha_source,
        "ignore_identical_ids": ignore_identical_ids,
        "k1": lanes_source.index.k1,
        "b": lanes_source.index.b,
    }
    return BenchmarkResult(
        runs=runs,
        metrics=evaluate_lanes(runs, qrels),
        config=config,
        versions=lanes_source.versions(),
        sweep=sweep,
    )


def _relabel(progress: Progress | None, split: str) -> Progress | None:
    if progress is None:
        return None
    return lambda stage, done, total: progress(f"{stage} ({split})", done, total)


def load_lanes(
    path: str | Path,
    *,
    model: str | None = None,
    splits: Sequence[str] | None = None,
) -> BeirLanes:
    """Load a collection and (if present) its vectors, and build both lanes.

    ``model`` names the ``vectors/<model>/`` folder; by default the only one there.
    """
    dataset = load_beir(path, splits=splits)
    vectors_root = dataset.path / "vectors"
    models = sorted(p.name for p in vectors_root.iterdir() if p.is_dir()) if vectors_root.is_dir() else []
    if model is None and len(models) > 1:
        raise InvalidArgument(f"several vector sets in {vectors_root}: {models}; choose one")
    if model is not None and model not in models:
        raise InvalidArgument(f"no vectors/{model} in {dataset.path}; available: {models}")
    name = model or (models[0] if models else None)
    vectors = None
    if name is not None:
        vectors = load_vector_dir(vectors_root / name, corpus_ids=dataset.corpus, queries=dataset.queries)
    return BeirLanes(dataset, vectors)
