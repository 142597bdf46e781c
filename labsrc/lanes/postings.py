"""Packed postings: each posting's document and BM25 impact side by side, gathered in one call.

:class:`~labsrc.lanes.sparse.BM25Index` keeps its postings as one ``int64`` array
of shape ``(2, P)``. Row 0 holds each posting's document position; row 1 holds
its impact, the float64 BM25 contribution, *reinterpreted* as int64
(``ndarray.view``: the same 8 bytes, no conversion, so no rounding). Term ``t``
owns the columns ``ptr[t]:ptr[t+1]``.

A query then costs three NumPy calls however many terms it has: one
``np.concatenate`` of its terms' column blocks (documents and impacts together),
one ``view`` back to float64, and one ``np.bincount`` that adds the impacts per
document. ``bincount`` adds in input order from 0, and the blocks come in query
order, one per occurrence of a term, so every document's score is the same sum,
in the same order, as :func:`labsrc.lanes.bm25.brute_force_bm25` adds: each query
word's contribution in turn, a repeated word once per occurrence. On a corpus
the size of SciFact the per-call cost of NumPy, not the arithmetic, dominates a
query, which is why the calls are few.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["TermColumns", "pack_postings", "score_columns", "term_columns"]


def pack_postings(doc_pos: np.ndarray, impact: np.ndarray) -> np.ndarray:
    """The read-only ``(2, P)`` int64 array: positions in row 0, the impacts' float64 bits in row 1."""
    packed = np.empty((2, len(doc_pos)), dtype=np.int64)
    packed[0] = doc_pos
    packed[1] = np.ascontiguousarray(impact, dtype=np.float64).view(np.int64)
    packed.setflags(write=False)
    return packed


class TermColumns(dict[str, np.ndarray]):
    """term → its ``(2, df)`` block of packed postings (a view), made on first use and kept.

    Only terms of the vocabulary are kept, so arbitrary query words cannot grow it;
    an unknown term maps to ``None``. Building views lazily keeps loading a large
    index instant, and a view is a few dozen bytes however long its postings are.
    """

    def __init__(self, packed: np.ndarray, vocabulary: dict[str, int], ptr: Sequence[int]) -> None:
        super().__init__()
        self._packed, self._vocabulary, self._ptr = packed, vocabulary, ptr

    def __missing__(self, term: str) -> np.ndarray | None:
        t = self._vocabulary.get(term)
        if t is None:
            return None
        block = self[term] = self._packed[:, self._ptr[t] : self._ptr[t + 1]]
        return block


def term_columns(columns: TermColumns, terms: Sequence[str]) -> list[np.ndarray]:
    """The blocks of the query's known terms, one per occurrence, in query order.

    A term that occurs twice in the query is gathered twice, so it adds its
    impact once per occurrence, where that occurrence stands: the order
    :func:`labsrc.lanes.bm25.brute_force_bm25` adds in.
    """
    return [block for block in map(columns.__getitem__, terms) if block is not None]


def score_columns(blocks: list[np.ndarray], n_docs: int) -> np.ndarray:
    """Every document's score (0 where no term matches): one gather and one scatter-add."""
    if not blocks:
        return np.zeros(n_docs, dtype=np.float64)
    gathered = np.concatenate(blocks, axis=1) if len(blocks) > 1 else blocks[0]
    return np.bincount(gathered[0], gathered[1].view(np.float64), n_docs)
