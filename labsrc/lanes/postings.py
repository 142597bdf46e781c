"""Packed postings: each posting's document and BM25 impact side by side, gathered in one call.

:class:`~labsrc.lanes.sparse.BM25Index` keeps its postings as one ``int64`` array
of shape ``(2, P)``. Row 0 holds each posting's document position; row 1 holds
its impact, the float64 BM25 contribution, *reinterpreted* as int64
(``ndarray.view``: the same 8 bytes, no conversion, so no rounding). Term ``t``
owns the columns ``ptr[t]:ptr[t+1]``.

A query then costs three NumPy calls however many terms it has: one
``np.concatenate`` of its terms' column blocks (documents and impacts together),
one ``view`` back to float64, and one ``np.bincount`` that adds the impacts per
document. ``bincount`` adds in input order from 0, and the blocks come in the
query's first-occurrence order, so every document's score is the same sum, in
the same order, as adding term by term (:func:`labsrc.lanes.bm25.brute_force_bm25`
is the readable version). On a corpus the size of SciFact the per-call cost of
NumPy, not the arithmetic, dominates a query, which is why the calls are few.
"""

from __future__ import annotations

from collections import Counter
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


def term_columns(columns: TermColumns, terms: Sequence[str]) -> tuple[list[np.ndarray], list[int] | None]:
    """The known terms' blocks in first-occurrence order, and their query counts (``None`` when all are 1)."""
    distinct = dict.fromkeys(terms)
    if len(distinct) == len(terms):
        return [block for block in map(columns.__getitem__, distinct) if block is not None], None
    blocks, counts = [], []
    for term, count in Counter(terms).items():
        if (block := columns[term]) is not None:
            blocks.append(block)
            counts.append(count)
    return blocks, counts


def score_columns(blocks: list[np.ndarray], counts: list[int] | None, n_docs: int) -> np.ndarray:
    """Every document's score (0 where no term matches): one gather and one scatter-add.

    A term repeated in the query counts once per occurrence: its impacts are
    multiplied by the count, the same product ``count · impact`` term-by-term
    scoring forms.
    """
    if not blocks:
        return np.zeros(n_docs, dtype=np.float64)
    if len(blocks) > 1:
        gathered = np.concatenate(blocks, axis=1)  # a fresh array: the counts may scale it in place
    else:
        gathered = blocks[0] if counts is None else blocks[0].copy()  # never scale the index's own view
    impacts = gathered[1].view(np.float64)
    if counts is not None:  # some query term is repeated
        start = 0
        for block, count in zip(blocks, counts):
            stop = start + block.shape[1]
            if count != 1:
                impacts[start:stop] *= count
            start = stop
    return np.bincount(gathered[0], impacts, minlength=n_docs)
