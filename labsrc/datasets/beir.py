"""BEIR collections on disk: find them, load them, and see them as the lab's records.

A BEIR collection (Thakur et al., NeurIPS 2021 Datasets & Benchmarks) is a
directory such as ``scifact/``::

    corpus.jsonl        {"_id", "title", "text", "metadata"} per line
    queries.jsonl       {"_id", "text", "metadata"} per line
    qrels/<split>.tsv   header "query-id<TAB>corpus-id<TAB>score", one judgement per line
    vectors/<model>/    optional precomputed embeddings (see :mod:`labsrc.lanes.vectordir`)

**Universe semantics.** BEIR documents carry no ACLs, regions or dates, so every
document is permitted: the searchable universe is the whole corpus, and BM25's
N, n_t and avgdl are computed over all of it, exactly as in the published
baselines. :func:`as_chunks` and :func:`universe_caller` express that in the
lab's own terms (one region, one tag, always current), so the unchanged
:class:`~labsrc.retriever.PolicyRetriever` and its boundary can run on a BEIR
corpus; the boundary then lets everything through.

**Where the data lives.** Commands take ``--data DIR``; otherwise they look in
:func:`beir_search_dirs`: the ``LABSRC_BEIR_DIR`` environment variable when it
is set, else the per-user cache folder (:func:`user_beir_dir`, e.g.
``~/.cache/labsrc/beir``) where ``labsrc data fetch`` puts collections by
default. So ``labsrc data fetch scifact`` followed by ``labsrc beir`` works
with no flag and no variable. Each place may name a collection directory
(holding ``corpus.jsonl``) or a folder of collections (holding ``scifact/``).
Tests and notebooks (:func:`find_dataset_dir`) also fall back to
``../shared/data/beir`` next to the repository and skip, with a reason, when
nothing is anywhere.
"""


import datetime as dt
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType

from labsrc.errors import InvalidArgument, InvalidRecord, LabError
from labsrc.records.loading import Field, iter_jsonl, read_text
from labsrc.records.policy import Caller, PolicyChunk

__all__ = [
    "DEFAULT_DATASET",
    "ENV_VAR",
    "UNIVERSE_CALLER",
    "BeirDataset",
    "BeirDocument",
    "Qrels",
    "Run",
    "as_chunks",
    "beir_search_dirs",
    "default_beir_root",
    "find_dataset_dir",
    "load_beir",
    "load_corpus",
    "load_qrels",
    "load_queries",
    "missing_data_reason",
    "resolve_dataset_dir",
    "universe_caller",
    "user_beir_dir",
]

#: The environment variable naming the BEIR data directory.
ENV_VAR = "LABSRC_BEIR_DIR"
DEFAULT_DATASET = "scifact"

#: qid → {doc id → score}: the run shape of ranx, pytrec_eval and :func:`~labsrc.evaluation.metrics.evaluate_run`.
Run = dict[str, dict[str, float]]
Qrels = Mapping[str, Mapping[str, int]]

# --- where the data is ---------------------------------------------------------------


def user_beir_dir() -> Path:
    """The per-user cache folder for BEIR collections: ``labsrc data fetch``'s default when ``$LABSRC_BEIR_DIR`` is unset.

    The platform's user cache folder plus ``labsrc/beir``, chosen as
    ``platformdirs.user_cache_dir("labsrc")`` (which ``pooch.os_cache`` uses) chooses it:
    ``$XDG_CACHE_HOME`` (else ``~/.cache``) on Linux and other Unix systems, per the
    XDG Base Directory specification; ``~/Library/Caches`` on macOS;
    ``%LOCALAPPDATA%\\labsrc\\labsrc\\Cache`` on Windows. Computed here, so finding
    data needs no extra package.
    """
    if sys.platform.startswith("win"):
        local = os.environ.get("LOCALAPPDATA", "").strip()
        base = Path(local) if local else Path.home() / "AppData" / "Local"
        return base / "labsrc" / "labsrc" / "Cache" / "beir"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "labsrc" / "beir"
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache") / "labsrc" / "beir"


def beir_search_dirs() -> tuple[Path, ...]:
    """Where a collection is looked for without ``--data``: ``$LABSRC_BEIR_DIR`` if set, else :func:`user_beir_dir`."""
    override = os.environ.get(ENV_VAR)
    return (Path(override),) if override else (user_beir_dir(),)


def default_beir_root() -> Path:
    """``$LABSRC_BEIR_DIR`` if set, else ``../shared/data/beir`` next to the repository (the tests' fallback)."""
    override = os.environ.get(ENV_VAR)
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[3] / "shared" / "data" / "beir"


def _collection_in(path: Path, dataset: str) -> Path | None:
    if (path / "corpus.jsonl").is_file():
        return path
    if (path / dataset / "corpus.jsonl").is_file():
        return path / dataset
    return None


def _searched() -> str:
    if os.environ.get(ENV_VAR):
        return f"${ENV_VAR} ({os.environ[ENV_VAR]})"
    return f"the per-user cache {user_beir_dir()} (${ENV_VAR} is unset)"


def resolve_dataset_dir(path: str | Path | None = None, dataset: str = DEFAULT_DATASET) -> Path:
    """The collection directory from ``path`` (``--data``), else from :func:`beir_search_dirs`.

    ``path`` may be the collection itself or a folder holding ``<dataset>/``.
    Raises :class:`~labsrc.errors.LabError` saying where it looked and how to get the data.
    """
    if path is None:
        for root in beir_search_dirs():
            found = _collection_in(root, dataset)
            if found is not None:
                return found
        raise LabError(
            f"no BEIR collection '{dataset}' in {_searched()}: fetch it with 'labsrc data fetch {dataset}', "
            f"or pass --data DIR (or set {ENV_VAR}) to the folder holding '{dataset}/'"
        )
    found = _collection_in(Path(path), dataset)
    if found is None:
        raise LabError(
            f"no BEIR collection at {path}: expected {Path(path) / 'corpus.jsonl'} "
            f"or {Path(path) / dataset / 'corpus.jsonl'}"
        )
    return found


def find_dataset_dir(dataset: str = DEFAULT_DATASET) -> Path | None:
    """For tests and notebooks: the collection in :func:`beir_search_dirs`, else (with
    ``$LABSRC_BEIR_DIR`` unset) under ``../shared/data/beir``; None if absent."""
    roots = beir_search_dirs() if os.environ.get(ENV_VAR) else (*beir_search_dirs(), default_beir_root())
    for root in roots:
        found = _collection_in(root, dataset)
        if found is not None:
            return found
    return None


def missing_data_reason(dataset: str = DEFAULT_DATASET) -> str:
    """The skip reason tests and notebooks give when the collection is absent: the two commands that fix it."""
    where = _searched() if os.environ.get(ENV_VAR) else f"{_searched()} nor {default_beir_root()}"
    return (
        f"BEIR {dataset} not found in {where}; run: labsrc data fetch {dataset} && "
        f"labsrc embed --beir {dataset} (the second computes the vectors the dense lanes need; "
        "it needs the 'embed' extra)"
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
