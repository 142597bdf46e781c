"""Retrievers whose ids are right but whose answers hand on more: text, trace values, ids of their own class.

Written the way field code is, for tests/test_gate_handed_on.py on the held-out
hangar corpus (tests/outside/hangar_corpus.py). Each ranks like a correct
filter-first retriever (the boundary first, then BM25 and RRF over what is
left); what differs is what the answer carries besides the ids:

* ``own_text``: dicts with the chunk's own text and its document id: correct;
* ``context_window``: dicts whose ``text`` joins every chunk of the same document
  (other revisions and the other base's edition included), a "context window" feature;
* ``document_metadata``: LangChain-shaped ``Document`` objects whose ``metadata``
  counts every revision of the document, the hidden ones included;
* ``related_reading``: dicts whose ``related`` field holds the text of the best match over
  every stored chunk, unfiltered (a "see also" feature);
* ``stamped``: dicts with the chunk's own text, a request id and a timestamp of their own,
  different on every answer: correct (noise, not a leak);
* ``numpy_versions``: a ``RetrievalResult`` whose trace ``versions`` hold a NumPy array;
* ``none_timings``: a ``RetrievalResult`` whose ``timings_ms`` hold ``None``;
* ``unhashable_ids`` / ``looping_ids``: ``(id, score)`` pairs whose ids are a ``str``
  subclass without ``__hash__``, or whose ``__eq__`` never returns.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

import numpy as np

from labsrc import RetrievalResult, bm25_rank, permitted_chunks, reciprocal_rank_fusion
from labsrc.trace import RetrievalTrace


class FilterFirst:
    """The boundary first, then BM25 over what is left: ``(chunk, score)`` pairs, best first."""

    def __init__(self, chunks, vectors=None):
        self.chunks = tuple(chunks)
        self.by_document: dict[str, list] = {}
        for chunk in self.chunks:
            self.by_document.setdefault(chunk.document_id, []).append(chunk)

    def ranked(self, query, caller, on_date, top_k):
        mine = permitted_chunks(caller, self.chunks, on_date)
        return reciprocal_rank_fusion([bm25_rank(query, mine, top_k)], top_k=top_k) if mine else []


class OwnText(FilterFirst):
    def search(self, query, caller, on_date, top_k):
        return [{"chunk_id": c.chunk_id, "score": s, "text": c.text, "document": c.document_id}
                for c, s in self.ranked(query, caller, on_date, top_k)]


class ContextWindow(FilterFirst):
    def search(self, query, caller, on_date, top_k):
        return [{"chunk_id": c.chunk_id, "score": s,
                 "text": "\n".join(d.text for d in self.by_document[c.document_id])}
                for c, s in self.ranked(query, caller, on_date, top_k)]


class RelatedReading(FilterFirst):
    def search(self, query, caller, on_date, top_k):
        best = bm25_rank(query, self.chunks, 1)  # over every stored chunk: the feature's bug
        related = best[0][0].text if best else ""
        return [{"chunk_id": c.chunk_id, "score": s, "text": c.text, "related": related}
                for c, s in self.ranked(query, caller, on_date, top_k)]


class Stamped(FilterFirst):
    def search(self, query, caller, on_date, top_k):
        return [{"chunk_id": c.chunk_id, "score": s, "text": c.text, "request_id": str(uuid.uuid4()),
                 "retrieved_at": time.time_ns()}
                for c, s in self.ranked(query, caller, on_date, top_k)]


@dataclass
class Document:
    """LangChain's shape: ``page_content`` and ``metadata``."""

    page_content: str
    metadata: dict = field(default_factory=dict)


class DocumentMetadata(FilterFirst):
    def search(self, query, caller, on_date, top_k):
        return [Document(c.text, {"chunk_id": c.chunk_id, "score": s,
                                  "revisions": len(self.by_document[c.document_id])})
                for c, s in self.ranked(query, caller, on_date, top_k)]


class _Result(FilterFirst):
    versions: dict = {}
    timings: dict = {}

    def search(self, query, caller, on_date, top_k):
        fused = tuple(self.ranked(query, caller, on_date, top_k))
        ids = tuple(c.chunk_id for c, _ in fused)
        trace = RetrievalTrace(versions=self.versions, query_kind="adhoc", sparse_ids=ids, dense_ids=(),
                               fused_ids=ids, timings_ms=self.timings)
        return RetrievalResult(fused, (), fused, trace)


class NumpyVersions(_Result):
    versions = {"retriever": np.array([1, 2])}
    timings = {"request": 1.0}


class NoneTimings(_Result):
    versions = {"retriever": "v1"}
    timings = {"request": None}


class UnhashableId(str):
    def __eq__(self, other):  # defining __eq__ alone sets __hash__ to None
        return str.__eq__(self, other)


class LoopingId(str):
    __hash__ = str.__hash__

    def __eq__(self, other):
        while True:
            pass


class UnhashableIds(FilterFirst):
    def search(self, query, caller, on_date, top_k):
        return [(UnhashableId(c.chunk_id), s) for c, s in self.ranked(query, caller, on_date, top_k)]


class LoopingIds(FilterFirst):
    def search(self, query, caller, on_date, top_k):
        return [(LoopingId(c.chunk_id), s) for c, s in self.ranked(query, caller, on_date, top_k)]


own_text = OwnText
context_window = ContextWindow
document_metadata = DocumentMetadata
related_reading = RelatedReading
stamped = Stamped
numpy_versions = NumpyVersions
none_timings = NoneTimings
unhashable_ids = UnhashableIds
looping_ids = LoopingIds
