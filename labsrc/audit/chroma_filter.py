"""Chroma (in-process, ``chromadb.PersistentClient`` in a temporary folder) with a ``where`` metadata filter.

Its documentation's way to filter: ``collection.query(query_embeddings=[...],
n_results=k, where={"$and": [...]})`` with an equality on ``region``, ``$in``
the caller's tags on ``acl_tag`` and ``$lte`` / ``$gte`` on the effective window
(day ordinals). The collection is cosine (``configuration={"hnsw": {"space":
"cosine"}}``), holds every stored chunk's vector (``collection.add(ids=...,
embeddings=..., metadatas=...)``) and has no embedding function: vectors are
always passed in, so Chroma never fetches its default model; telemetry is off.
Dense only (Chroma has no local BM25); the score is ``1 - distance``.

What we measured (chromadb 1.5.9): the ``where`` filter is applied *before*
the nearest neighbours are taken, so the k results are the k nearest permitted
vectors even when every nearer vector is hidden, and hidden chunks change
nothing. ``$in`` refuses an empty list, so a caller with no tags gets ``[]``
without a query. Every ``EphemeralClient`` in a process shares one cached
system, and a process forked after that system started (the gate forks a worker
per build) hangs on its first call to it; so each build opens its own
``PersistentClient`` in a fresh ``tempfile.mkdtemp()`` folder (its own system,
uniquely named collection), and ``close`` deletes the collection, closes the
client and removes the folder. A lock serialises queries, so one instance is
safe from many threads. Needs the ``audit`` extra (``chromadb``).
"""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
import threading
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from labsrc.audit.common import boundary_metadata, dense_source, document_vectors
from labsrc.errors import MissingDependency
from labsrc.lanes.dense import DenseSource
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["ChromaFilter"]


def _chroma() -> Any:
    try:
        import chromadb
    except ImportError as exc:
        raise MissingDependency(f"the Chroma subject needs the audit extra: pip install 'hybrid-retrieval-lab[audit]' ({exc})") from exc
    return chromadb


class ChromaFilter:
    """``factory(chunks, vectors)``: an in-memory Chroma collection of every stored chunk's vector."""

    def __init__(self, chunks: Sequence[PolicyChunk], vectors: DenseSource | None) -> None:
        chromadb = self._chroma = _chroma()
        self.source = dense_source(vectors)
        self._lock = threading.Lock()
        self.folder: str | None = tempfile.mkdtemp(prefix="labsrc-chroma-")
        self.name = f"labsrc-audit-{uuid.uuid4().hex}"
        self.size = 0
        try:
            self.client = chromadb.PersistentClient(path=self.folder,
                                                    settings=chromadb.Settings(anonymized_telemetry=False))
            self.collection = self.client.create_collection(self.name, embedding_function=None,
                                                            configuration={"hnsw": {"space": "cosine"}})
            self._add(chunks)
        except BaseException:
            if getattr(self, "client", None) is not None:
                self.client.close()
            shutil.rmtree(self.folder, ignore_errors=True)
            raise

    def _add(self, chunks: Sequence[PolicyChunk]) -> None:
        if not chunks:
            return
        matrix = document_vectors(self.source, chunks)
        rows = [(c, row) for c, row in zip(chunks, matrix) if np.any(row)]  # a zero vector has no cosine
        if rows:
            self.collection.add(ids=[c.chunk_id for c, _ in rows], embeddings=[row.tolist() for _, row in rows],
                                metadatas=[boundary_metadata(c) for c, _ in rows])
        self.size = len(rows)

    def search(self, query: str, caller: Caller, on_date: dt.date, top_k: int) -> list[tuple[str, float]]:
        if not self.size or not query.strip() or not caller.acl_tags or top_k <= 0:
            return []
        vector = self.source.query_vector(query)
        if not np.any(vector):
            return []
        day = on_date.toordinal()
        where = {"$and": [
            {"region": caller.region},
            {"acl_tag": {"$in": sorted(caller.acl_tags)}},
            {"effective_from": {"$lte": day}},
            {"effective_to": {"$gte": day}},
        ]}
        with self._lock:
            found = self.collection.query(query_embeddings=[vector.tolist()], n_results=top_k, where=where,
                                          include=["distances"])
        pairs = [(i, 1.0 - float(d)) for i, d in zip(found["ids"][0], found["distances"][0])]
        return sorted(pairs, key=lambda p: (-p[1], p[0]))[:top_k]

    def versions(self, on_date: dt.date | None = None) -> dict[str, str]:
        return {"retriever": f"chromadb {self._chroma.__version__} PersistentClient (temporary folder), hnsw cosine, "
                             f"where= filter (region, acl_tag $in, effective window), score 1 - distance"}

    def close(self) -> None:
        with self._lock:
            if self.folder is None:
                return
            try:
                self.client.delete_collection(self.name)
            finally:
                self.client.close()
                shutil.rmtree(self.folder, ignore_errors=True)
                self.folder, self.size = None, 0
