"""The dense lane: cosine similarity between a query vector and chunk vectors.

A dense lane needs *some* way to turn text into vectors. The lesson uses frozen
three-dimensional fixture vectors (:class:`FixtureVectors`) so every figure is
reproducible without a model; any object with ``.encode(list[str]) -> ndarray``
(:class:`Encoder`) can stand in for a real bi-encoder, and
:class:`HashingEncoder` is a deterministic, dependency-free one for tests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

import numpy as np

from labsrc.cache import LRUCache
from labsrc.errors import InvalidArgument, InvalidRecord
from labsrc.lanes.analysis import lesson_analyzer
from labsrc.lanes.candidates import CandidatePass
from labsrc.ranking import check_query, check_top_k, top_k_positions
from labsrc.records.checks import check_chunks
from labsrc.records.loading import Field, load_json
from labsrc.records.policy import PolicyChunk, chunk_lookup

__all__ = [
    "DenseIndex",
    "DenseSource",
    "Encoder",
    "EncoderVectors",
    "FixtureVectors",
    "HashingEncoder",
    "MatrixVectors",
    "as_dense_source",
    "check_vector",
    "cosine_similarity",
    "dense_rank",
    "encode_checked",
    "load_vectors",
]


@runtime_checkable
class Encoder(Protocol):
    """Anything that embeds a batch of texts: ``encode(texts) -> ndarray [N, D]``."""

    def encode(self, texts: list[str]) -> np.ndarray: ...


@runtime_checkable
class DenseSource(Protocol):
    """What the dense lane needs: vectors for chunks and for a query, plus a version."""

    version: str

    def document_matrix(self, chunks: Sequence[PolicyChunk]) -> np.ndarray: ...

    def query_vector(self, query: str) -> np.ndarray: ...


def check_vector(values: Any, *, name: str, dimension: int | None = None) -> np.ndarray:
    """A finite, 1-D float64 copy of ``values``, or :class:`InvalidArgument` saying why not."""
    try:
        vector = np.array(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"vector {name!r} is not numeric: {exc}") from exc
    if vector.ndim != 1 or vector.size == 0:
        raise InvalidArgument(f"vector {name!r} must be a non-empty 1-D list of numbers, got shape {vector.shape}")
    if dimension is not None and vector.size != dimension:
        raise InvalidArgument(f"vector {name!r} has dimension {vector.size}, expected {dimension}")
    if not np.all(np.isfinite(vector)):
        raise InvalidArgument(f"vector {name!r} contains NaN or infinite values")
    vector.setflags(write=False)
    return vector


def cosine_similarity(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """cos(d, q) = d · q / (‖d‖ ‖q‖) for every row d of ``matrix``; 0 where either is zero."""
    matrix = np.atleast_2d(np.asarray(matrix, dtype=np.float64))
    return _cosine(matrix, np.linalg.norm(matrix, axis=1), vector)


def _cosine(matrix: np.ndarray, row_norms: np.ndarray, vector: np.ndarray) -> np.ndarray:
    # cosine_similarity with the document norms given, so an index computes them once.
    vector = np.asarray(vector, dtype=np.float64)
    if matrix.shape[1] != vector.shape[0]:
        raise InvalidArgument(f"dimension mismatch: documents have {matrix.shape[1]}, query has {vector.shape[0]}")
    denominator = row_norms * np.linalg.norm(vector)
    out = np.zeros(matrix.shape[0], dtype=np.float64)
    # einsum, not ``matrix @ vector``: BLAS matrix-vector kernels sum a row in an order that depends on
    # the row's position in the matrix (blocks of rows), so a hidden row inserted above a permitted one
    # could change its cosine in the last bit. einsum sums every row the same way wherever it sits, and
    # is as fast here; so a chunk's score is a function of its own vector and the query only.
    np.divide(np.einsum("ij,j->i", matrix, vector), denominator, out=out, where=denominator > 0)
    return out


def encode_checked(encoder: Encoder, texts: list[str]) -> np.ndarray:
    """``encoder.encode(texts)`` as float64, refusing a wrong shape or non-finite values."""
    matrix = np.asarray(encoder.encode(texts), dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != len(texts):
        raise InvalidArgument(f"encoder returned shape {matrix.shape} for {len(texts)} texts; expected [N, D]")
    if not np.all(np.isfinite(matrix)):
        raise InvalidArgument("encoder returned NaN or infinite values")
    return matrix


class FixtureVectors:
    """Frozen vectors looked up by chunk id (documents) and by exact query text.

    A query that is not in the table maps to the zero vector, which scores 0
    against everything, so the dense lane returns nothing for it (spec, "Dense
    lane"). A chunk without a vector is treated the same way -- the dense lane can
    never return it, the sparse lane still can -- unless ``strict=True``, which
    makes a missing document vector an error. :meth:`missing` lists the gaps.
    Vectors are validated and copied; the object is immutable.
    """

    def __init__(
        self,
        documents: Mapping[str, Sequence[float]],
        queries: Mapping[str, Sequence[float]],
        *,
        version: str = "fixture-embeddings-v1",
        model: Mapping[str, Any] | None = None,
        strict: bool = False,
    ) -> None:
        self.version = version
        self.strict = strict
        self.model = MappingProxyType(dict(model or {}))
        dimension: int | None = None
        docs: dict[str, np.ndarray] = {}
        for doc_id, values in documents.items():
            docs[doc_id] = check_vector(values, name=f"documents[{doc_id!r}]", dimension=dimension)
            dimension = docs[doc_id].size
        queries_: dict[str, np.ndarray] = {}
        for text, values in queries.items():
            queries_[text] = check_vector(values, name=f"queries[{text!r}]", dimension=dimension)
            dimension = queries_[text].size
        if dimension is None:
            raise InvalidArgument("FixtureVectors needs at least one vector to know its dimension")
        self.dimension = dimension
        self._documents = MappingProxyType(docs)
        self._queries = MappingProxyType(queries_)
        self._zero = np.zeros(dimension)
        self._zero.setflags(write=False)

    @property
    def documents(self) -> Mapping[str, np.ndarray]:
        return self._documents

    @property
    def queries(self) -> Mapping[str, np.ndarray]:
        return self._queries

    def query_vector(self, query: str) -> np.ndarray:
        return self._queries.get(query, self._zero)

    def missing(self, chunks: Sequence[PolicyChunk]) -> list[str]:
        """Sorted ids of the chunks that have no document vector."""
        return sorted(c.chunk_id for c in chunks if c.chunk_id not in self._documents)

    def document_matrix(self, chunks: Sequence[PolicyChunk]) -> np.ndarray:
        if self.strict and self.missing(chunks):
            raise InvalidArgument(f"no fixture vector for chunk(s) {self.missing(chunks)}")
        if not chunks:
            return np.zeros((0, self.dimension))
        return np.stack([self._documents.get(c.chunk_id, self._zero) for c in chunks])

    def __repr__(self) -> str:
        return (
            f"FixtureVectors(version={self.version!r}, dimension={self.dimension}, "
            f"documents={len(self._documents)}, queries={len(self._queries)})"
        )


def _chunk_text(chunk: PolicyChunk) -> str:
    return chunk.text if not chunk.title else f"{chunk.title} {chunk.text}"


class EncoderVectors:
    """Adapts an :class:`Encoder` into a dense source: it embeds chunks and queries on demand."""

    def __init__(
        self,
        encoder: Encoder,
        *,
        version: str | None = None,
        document_text: Callable[[PolicyChunk], str] = _chunk_text,
    ) -> None:
        if not isinstance(encoder, Encoder):
            raise InvalidArgument(f"{type(encoder).__name__} has no encode(list[str]) method")
        self.encoder = encoder
        self.version = version or getattr(encoder, "version", type(encoder).__name__)
        self.document_text = document_text

    def _encode(self, texts: list[str]) -> np.ndarray:
        return encode_checked(self.encoder, texts)

    def document_matrix(self, chunks: Sequence[PolicyChunk]) -> np.ndarray:
        return self._encode([self.document_text(c) for c in chunks])

    def query_vector(self, query: str) -> np.ndarray:
        return self._encode([query])[0]

    # Two adapters of the same encoder are the same source, so the per-universe
    # document matrix is reused instead of re-encoding the corpus every request.
    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, EncoderVectors)
            and other.encoder is self.encoder
            and other.version == self.version
            and other.document_text == self.document_text
        )

    def __hash__(self) -> int:
        return hash((id(self.encoder), self.version))


class MatrixVectors:
    """A dense source over vectors computed already: one row per chunk id, an encoder for queries."""

    def __init__(self, rows: Mapping[str, int], matrix: np.ndarray, encoder: Encoder, *, version: str | None = None) -> None:
        if matrix.ndim != 2 or len(rows) != matrix.shape[0]:
            raise InvalidArgument(f"{len(rows)} chunk ids for a matrix of shape {matrix.shape}")
        self._rows = MappingProxyType(dict(rows))
        self._matrix = matrix
        self.encoder = encoder
        self.version = version or getattr(encoder, "version", type(encoder).__name__)

    def document_matrix(self, chunks: Sequence[PolicyChunk]) -> np.ndarray:
        return self._matrix[[self._rows[c.chunk_id] for c in chunks]]

    def query_vector(self, query: str) -> np.ndarray:
        return encode_checked(self.encoder, [query])[0]


class HashingEncoder:
    """A deterministic bag-of-words encoder (the hashing trick, Weinberger et al. 2009).

    Each analysed token is hashed with BLAKE2b (stable across processes, unlike
    Python's ``hash``) to a dimension and a sign; the counts are L2-normalised.
    It captures word overlap only, not meaning: a stand-in for tests and demos.
    """

    def __init__(self, dimension: int = 256, *, analyzer: Callable[[str], list[str]] = lesson_analyzer) -> None:
        check_top_k(dimension, "dimension")
        self.dimension = int(dimension)
        self.analyzer = analyzer
        self.version = f"hashing-encoder-v1-d{self.dimension}"

    def _slot(self, token: str) -> tuple[int, float]:
        digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self.dimension, 1.0 if (value >> 63) & 1 else -1.0

    def encode(self, texts: list[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise InvalidArgument("encode takes a list of texts, not a single string")
        out = np.zeros((len(texts), self.dimension), dtype=np.float64)
        for row, text in enumerate(texts):
            for token in self.analyzer(text):
                slot, sign = self._slot(token)
                out[row, slot] += sign
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out


#: What ``vectors=None`` means: the deterministic hashing encoder, as ``labsrc gate`` uses without ``--vectors``.
_DEFAULT_SOURCE = EncoderVectors(HashingEncoder())


def as_dense_source(vectors: DenseSource | Encoder | None) -> DenseSource:
    """A dense source, a bare encoder (wrapped in :class:`EncoderVectors`), or ``None``: a run without
    vectors, whose dense lane uses one shared :class:`HashingEncoder` (word overlap, not meaning)."""
    if vectors is None:
        return _DEFAULT_SOURCE
    if isinstance(vectors, DenseSource):
        return vectors
    if isinstance(vectors, Encoder):
        return EncoderVectors(vectors)
    raise InvalidArgument(
        f"vectors must be FixtureVectors, a DenseSource or an Encoder, not {type(vectors).__name__}"
    )


class DenseIndex:
    """Document vectors, rows sorted by chunk_id: one universe's, or every stored chunk's with a mask per request.

    A query costs an approximate pass over the permitted rows (float32 over the
    slices of the boundary groups the mask fills, int8 codes of the rows it
    picks out of the groups it scatters in: :class:`~labsrc.lanes.candidates.CandidatePass`),
    then the exact float64 cosine of the few candidates within their bounds of the k-th.
    """

    def __init__(self, chunks: Sequence[PolicyChunk], source: DenseSource) -> None:
        self.source = source
        self.chunks = tuple(sorted(chunks, key=lambda c: c.chunk_id))
        matrix = np.asarray(source.document_matrix(self.chunks), dtype=np.float64)
        if matrix.shape[0] != len(self.chunks):
            raise InvalidArgument(f"dense source returned {matrix.shape[0]} rows for {len(self.chunks)} chunks")
        self.matrix = matrix
        self.matrix.setflags(write=False)
        self.norms = np.linalg.norm(matrix, axis=1) if matrix.size else np.zeros(len(self.chunks))
        keys = [(c.region, c.acl_tag) for c in self.chunks]  # a caller's rows: a few contiguous slices
        self.fast = CandidatePass(matrix if matrix.ndim == 2 else matrix.reshape(len(self.chunks), -1), self.norms, keys)

    def scores(self, query_vector: np.ndarray) -> np.ndarray:
        """Cosine of every row with ``query_vector`` (document norms precomputed)."""
        if self.matrix.shape[0] == 0:
            return np.zeros(0)
        return _cosine(self.matrix, self.norms, query_vector)

    def search(self, query: str, top_k: int, mask: np.ndarray | None = None) -> list[tuple[PolicyChunk, float]]:
        """``(chunk, cosine)`` pairs with score > 0, by (score desc, chunk_id asc), at most ``top_k``.

        With ``mask`` (a boolean array over the rows), only the rows it keeps can
        be returned: one matrix, masked per request, never a copy per universe.
        A row's cosine does not depend on which other rows are stored or kept.
        """
        top_k = check_top_k(top_k)
        if not check_query(query, None).strip() or not self.chunks:
            return []
        if mask is not None:
            n_rows = self.matrix.shape[0]
            if mask.dtype != bool or mask.shape != (n_rows,):
                raise InvalidArgument(
                    f"mask must be a boolean array of shape ({n_rows},), got {mask.dtype} {mask.shape}"
                )
        vector = self.source.query_vector(query)
        if vector.shape[0] != self.matrix.shape[1]:
            raise InvalidArgument(f"dimension mismatch: documents have {self.matrix.shape[1]}, query has {vector.shape[0]}")
        # Candidates from the approximate pass, ascending (so ties still break by chunk_id); each is scored
        # from its own float64 row, so its cosine is the one the whole matrix gives.
        rows = self.fast.candidates(vector, top_k, mask)
        scores = _cosine(self.matrix[rows], self.norms[rows], vector)
        return [(self.chunks[rows[p]], float(scores[p])) for p in top_k_positions(scores, top_k)]


_DENSE_CACHE: LRUCache[DenseIndex] = LRUCache(maxsize=16)


def dense_rank(
    query: str,
    chunks: Sequence[PolicyChunk],
    vectors: DenseSource | Encoder,
    top_k: int = 2,
) -> list[tuple[PolicyChunk, float]]:
    """Rank ``chunks`` (already the permitted universe) by cosine similarity to the query.

    Returns ``(chunk, score)`` pairs with score > 0, sorted by (score desc,
    chunk_id asc), at most ``top_k``. Document vectors are looked up once per
    universe and cached.
    """
    top_k = check_top_k(top_k)
    if not check_query(query, None).strip():
        return []
    source = as_dense_source(vectors)
    universe_chunks = tuple(chunk_lookup(check_chunks(chunks)).values())
    index = _DENSE_CACHE.get_or_build(("dense", universe_chunks, source), lambda: DenseIndex(universe_chunks, source))
    return index.search(query, top_k)


def load_vectors(path: str | Path) -> FixtureVectors:
    """Read fixture vectors from JSON: ``{"documents": {id: [...]}, "queries": {text: [...]}}``.

    Optional keys: ``version`` (recorded in traces) and ``model`` (a free-form record
    of how the vectors were made).
    """
    data = load_json(path)
    if not isinstance(data, dict):
        raise InvalidRecord(f"expected a JSON object, got {type(data).__name__}", path=path)
    f = Field(data, path=path, line=None)
    f.require_known({"version", "model", "dimension", "documents", "queries"})
    for key in ("documents", "queries"):
        if not isinstance(data.get(key), dict):
            raise f.error(key, "must be a JSON object mapping id or query text to a list of numbers")
    try:
        vectors = FixtureVectors(
            data["documents"],
            data["queries"],
            version=f.text("version", optional=True) or "fixture-embeddings-v1",
            model=f.mapping("model"),
        )
    except InvalidArgument as exc:
        raise InvalidRecord(str(exc), path=path) from exc
    dimension = data.get("dimension")
    if dimension is not None and dimension != vectors.dimension:
        raise f.error("dimension", f"says {dimension} but the vectors have {vectors.dimension}")
    return vectors
