"""Milvus Lite through ``pymilvus``: a BM25 function, a dense field and ``hybrid_search`` with ``RRFRanker``.

The shape of Milvus's full-text and hybrid-search guides: ``MilvusClient`` on a
local ``.db`` path (milvus-lite 3 serves it from a gRPC server on threads of
this process, not a subprocess), one collection whose ``text`` field
(``enable_analyzer=True``) feeds a ``BM25`` ``Function`` writing the ``sparse``
field (``SPARSE_INVERTED_INDEX``, metric ``BM25``), a ``dense`` field (``FLAT``,
``COSINE``) and the boundary fields (``region``, ``acl_tag``, the effective
window as ``INT64`` day ordinals). Every chunk is inserted at once and flushed
once, as a corpus is loaded. A search is ``hybrid_search`` with one
``AnnSearchRequest`` per field, each carrying the boundary as its ``expr``
(``region == "..." and acl_tag in [...] and effective_from <= day and
effective_to >= day``) and ``limit=top_k``, fused by ``RRFRanker(60)``; the
score is the fused distance. A query whose vector is all zeros sends the BM25
request alone (cosine to a zero vector is 0 for every row).

Measured (``tests/test_audit_milvus.py``, pymilvus 3.0.2, milvus-lite 3.2.2):
Lite supports the BM25 function. The filter is applied *during* the search (a
mask over each segment), so only permitted ids come back, even when every
nearest vector is hidden. BM25's statistics (document count, document
frequency, average length) are each segment's: hidden chunks flushed into the
same segment move a permitted chunk's BM25 score (on the lesson, ``RPL-14``
scores 1.4555 beside the hidden chunks, 2.0300 without them; 0.2212 against
0.6359 in the test's small corpus), hidden chunks flushed later, into a segment
of their own, do not. On the lesson the hidden chunks move scores but no
rank (the gate's rebuild comparison passes); four bait chunks per query move
one (its bait comparison fails). Lite returns BM25 as a negated distance (``-score``).
The index is created with ``sync=False``: waiting for it asks the server for
``AllocTimestamp``, which Lite does not implement (an error logged, then half
a second of polling). A build then takes about 0.1 s after the first (about
1 s, imports and server start included). ``client.close()`` leaves the Lite
server running; :meth:`MilvusHybrid.close` releases it too. Needs the
``audit`` extra (``pymilvus``, ``milvus-lite``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from labsrc.audit.common import boundary_metadata, dense_source, document_vectors
from labsrc.errors import MissingDependency
from labsrc.lanes.dense import DenseSource
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["MilvusHybrid", "boundary_expr"]

COLLECTION = "chunks"
#: The constant given to ``RRFRanker``, Milvus's default and the lab's.
RRF_K = 60


def _milvus() -> dict[str, Any]:
    try:
        import milvus_lite
        import pymilvus
        from milvus_lite.server_manager import server_manager_instance
        from pymilvus import AnnSearchRequest, DataType, Function, FunctionType, MilvusClient, RRFRanker
    except ImportError as exc:
        raise MissingDependency(f"the Milvus subject needs the audit extra: pip install 'hybrid-retrieval-lab[audit]' ({exc})") from exc
    return dict(pymilvus=pymilvus, milvus_lite=milvus_lite, servers=server_manager_instance, AnnSearchRequest=AnnSearchRequest,
                DataType=DataType, Function=Function, FunctionType=FunctionType, MilvusClient=MilvusClient, RRFRanker=RRFRanker)


def boundary_expr(caller: Caller, on_date: dt.date) -> str:
    """The boundary as the filter expression a Milvus user writes (strings JSON-quoted)."""
    day = on_date.toordinal()
    tags = ", ".join(json.dumps(t) for t in sorted(caller.acl_tags))
    return (f"region == {json.dumps(caller.region)} and acl_tag in [{tags}] "
            f"and effective_from <= {day} and effective_to >= {day}")


class MilvusHybrid:
    """``factory(chunks, vectors)``: one Milvus Lite collection of every stored chunk, filtered per request.

    Safe to call from many threads: one lock serialises searches on the client.
    """

    def __init__(self, chunks: Sequence[PolicyChunk], vectors: DenseSource | None) -> None:
        self._m = m = _milvus()
        self.source = dense_source(vectors)
        self.size = len(chunks)
        self._lock = threading.Lock()
        self.directory: str | None = None
        self.path: str | None = None
        self.client: Any = None
        if not chunks:  # nothing to index: no server either
            return
        matrix = document_vectors(self.source, chunks)
        self.directory = tempfile.mkdtemp()
        self.path = os.path.join(self.directory, "lab.db")
        try:
            self.client = m["MilvusClient"](self.path, dedicated=True)  # a shared connection outlives close()
            self._create(matrix.shape[1])
            self.add(chunks, matrix)
            self.client.load_collection(COLLECTION)
        except BaseException:
            self.close()
            raise

    def add(self, chunks: Sequence[PolicyChunk], matrix: np.ndarray | None = None) -> None:
        """Insert chunks and flush them: one new segment, with BM25 statistics of its own."""
        matrix = document_vectors(self.source, chunks) if matrix is None else matrix
        rows = []
        for chunk, row in zip(chunks, matrix):
            fields = boundary_metadata(chunk)
            fields["id"] = fields.pop("chunk_id")
            rows.append(dict(fields, text=chunk.text, dense=row.astype(np.float32).tolist()))
        with self._lock:
            self.client.insert(COLLECTION, rows)
            self.client.flush(COLLECTION)

    def _create(self, dim: int) -> None:
        m, client = self._m, self.client
        varchar = m["DataType"].VARCHAR
        schema = client.create_schema(auto_id=False)
        schema.add_field("id", varchar, is_primary=True, max_length=512)
        schema.add_field("text", varchar, max_length=65535, enable_analyzer=True)
        schema.add_field("sparse", m["DataType"].SPARSE_FLOAT_VECTOR)
        schema.add_field("dense", m["DataType"].FLOAT_VECTOR, dim=dim)
        schema.add_field("region", varchar, max_length=512)
        schema.add_field("acl_tag", varchar, max_length=512)
        schema.add_field("effective_from", m["DataType"].INT64)
        schema.add_field("effective_to", m["DataType"].INT64)
        schema.add_function(m["Function"](name="text_bm25", function_type=m["FunctionType"].BM25,
                                          input_field_names=["text"], output_field_names=["sparse"]))
        index = client.prepare_index_params()
        index.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
        index.add_index(field_name="dense", index_type="FLAT", metric_type="COSINE")
        client.create_collection(COLLECTION, schema=schema)
        # sync=False: Lite builds the index at once, and waiting would ask for AllocTimestamp, which it
        # does not implement (its server logs the error, then the client polls for half a second).
        client.create_index(COLLECTION, index, sync=False)

    def search(self, query: str, caller: Caller, on_date: dt.date, top_k: int) -> list[tuple[str, float]]:
        if self.client is None or not query.strip() or not caller.acl_tags or top_k < 1:
            return []
        m, expr = self._m, boundary_expr(caller, on_date)
        vector = self.source.query_vector(query)
        requests = [m["AnnSearchRequest"](data=[query], anns_field="sparse", param={}, limit=top_k, expr=expr)]
        if np.any(vector):
            requests.append(m["AnnSearchRequest"](data=[np.asarray(vector, dtype=np.float32).tolist()],
                                                  anns_field="dense", param={}, limit=top_k, expr=expr))
        with self._lock:
            hits = self.client.hybrid_search(COLLECTION, requests, ranker=m["RRFRanker"](RRF_K), limit=top_k,
                                             output_fields=["id"])[0]
        return sorted(((str(h["id"]), float(h["distance"])) for h in hits), key=lambda p: (-p[1], p[0]))[:top_k]

    def versions(self, on_date: dt.date) -> dict[str, str]:
        return {"retriever": f"pymilvus {self._m['pymilvus'].__version__}, milvus-lite {self._m['milvus_lite'].__version__}",
                "config": f"hybrid_search, BM25 function (SPARSE_INVERTED_INDEX), dense FLAT COSINE, "
                          f"RRFRanker({RRF_K}), expr filter per request"}

    def close(self) -> None:
        client, self.client = self.client, None
        try:
            if client is not None:
                client.close()
        finally:
            if self.path is not None:  # client.close() leaves the Lite server (threads, open files) running
                self._m["servers"].release_server(self.path)
                self.path = None
            if self.directory is not None:
                shutil.rmtree(self.directory, ignore_errors=True)
                self.directory = None
