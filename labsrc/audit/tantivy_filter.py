"""tantivy (the Rust Lucene) with the boundary as filter clauses inside the query.

Its documentation's way to filter: a boolean query whose ``Must`` clauses are
the filters (a term query on ``region``, any of the caller's tags on
``acl_tag``, range queries on the effective window), each wrapped in a constant
score of 0 so that only the text clause scores. BM25's statistics are the
index's (every stored chunk), as in Lucene. Needs the ``audit`` extra (``tantivy``).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from typing import Any

from labsrc.audit.common import boundary_metadata
from labsrc.errors import MissingDependency
from labsrc.lanes.dense import DenseSource
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["TantivyFilter"]

_WORD = re.compile(r"\w+")


def _tantivy() -> Any:
    try:
        import tantivy
    except ImportError as exc:
        raise MissingDependency(f"the tantivy subject needs the audit extra: pip install 'hybrid-retrieval-lab[audit]' ({exc})") from exc
    return tantivy


class TantivyFilter:
    """``factory(chunks, vectors)``: one in-memory tantivy index over every stored chunk (text only)."""

    def __init__(self, chunks: Sequence[PolicyChunk], vectors: DenseSource | None) -> None:
        tv = self._tv = _tantivy()
        builder = tv.SchemaBuilder()
        builder.add_text_field("chunk_id", stored=True, tokenizer_name="raw")
        builder.add_text_field("text", stored=False)
        builder.add_text_field("region", tokenizer_name="raw")
        builder.add_text_field("acl_tag", tokenizer_name="raw")
        builder.add_integer_field("effective_from", indexed=True, fast=True)
        builder.add_integer_field("effective_to", indexed=True, fast=True)
        self.schema = builder.build()
        self.index = tv.Index(self.schema)
        writer = self.index.writer(heap_size=15_000_000, num_threads=1)
        for chunk in chunks:
            writer.add_document(tv.Document(text=chunk.text, **boundary_metadata(chunk)))
        writer.commit()
        writer.wait_merging_threads()
        self.index.reload()
        self.size = len(chunks)

    def _filter(self, caller: Caller, on_date: dt.date) -> Any:
        tv, schema, day = self._tv, self.schema, on_date.toordinal()
        tags = tv.Query.boolean_query(
            [(tv.Occur.Should, tv.Query.term_query(schema, "acl_tag", tag)) for tag in sorted(caller.acl_tags)]
        ) if caller.acl_tags else tv.Query.empty_query()
        clauses = [
            tv.Query.term_query(schema, "region", caller.region),
            tags,
            tv.Query.range_query(schema, "effective_from", tv.FieldType.Integer, None, day),
            tv.Query.range_query(schema, "effective_to", tv.FieldType.Integer, day, None),
        ]
        return [(tv.Occur.Must, tv.Query.const_score_query(q, 0.0)) for q in clauses]

    def search(self, query: str, caller: Caller, on_date: dt.date, top_k: int) -> list[tuple[str, float]]:
        tv = self._tv
        words = [w.lower() for w in _WORD.findall(query)]
        if not words or not self.size:
            return []
        text = tv.Query.boolean_query([(tv.Occur.Should, tv.Query.term_query(self.schema, "text", w)) for w in words])
        full = tv.Query.boolean_query([(tv.Occur.Must, text), *self._filter(caller, on_date)])
        searcher = self.index.searcher()
        hits = searcher.search(full, limit=top_k).hits
        out = [(searcher.doc(address)["chunk_id"][0], float(score)) for score, address in hits]
        return sorted(out, key=lambda p: (-p[1], p[0]))
