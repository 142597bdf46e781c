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

A word in a large share of the documents is cheaper as a *dense row*, its impact
for every document (0.0 where it is absent), added with one vectorised ``+=``
(:func:`dense_row_pays`). The order stays the query's: after a row, later
postings are added with ``np.add.at``, which adds them one by one in input order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["TermColumns", "dense_row_pays", "pack_postings", "query_scores", "score_columns", "term_columns"]


def pack_postings(doc_pos: np.ndarray, impact: np.ndarray) -> np.ndarray:
    """The read-only ``(2, P)`` int64 array: positions in row 0, the impacts' float64 bits in row 1."""
    packed = np.empty((2, len(doc_pos)), dtype=np.int64)
    packed[0] = doc_pos
    packed[1] = np.ascontiguousarray(impact, dtype=np.float64).view(np.int64)
    packed.setflags(write=False)
    return packed


#: What a query pays, in nanoseconds, on this project's 2-core machine. POSTING_NS and ROW_DOC_NS
#: were measured: ``np.concatenate`` plus ``np.bincount`` took 2.0–2.5 ns a posting on Zipf text,
#: and ``+=`` of a dense row 0.26–0.28 ns a document. ROW_CALLS_NS, the calls a row adds to a
#: query, is set where SciFact (whose commonest words sit near the line) neither gains nor loses.
POSTING_NS, ROW_DOC_NS, ROW_CALLS_NS = 2.0, 0.3, 3000.0
#: The top k of every document's score (:func:`~labsrc.ranking.top_k_entries`: block maxima, one
#: comparison, a few candidates sorted), per document: 1.06 ns at 1M documents in an hour when a row's
#: ``+=`` took 0.69 ns, scaled to ROW_DOC_NS's 0.3.
TOP_K_DOC_NS = 0.45


def dense_row_pays(df: int, n_docs: int) -> bool:
    """Whether adding a term as a dense row beats gathering and scattering its ``df`` postings.

    A block costs its postings; a row costs a pass over every document plus a few
    calls. On SciFact (5,183 documents) that is a term in more than 44% of them;
    at 100,000 documents, in more than 16.5%.
    """
    return df * POSTING_NS > n_docs * ROW_DOC_NS + ROW_CALLS_NS


class TermColumns(dict[str, np.ndarray]):
    """term → its postings as a query reads them, made on first use and kept.

    Usually the term's ``(2, df)`` block of packed postings, a view: a few dozen
    bytes however long its postings are. A term in a large share of the documents
    (:func:`dense_row_pays`) gets a *dense row* instead: its impact for every
    document, 0.0 where it is absent. Adding a row is one vectorised add over the
    documents, cheaper than gathering and scattering that many postings; on Zipf
    text a dozen such words hold nine postings in ten. A row costs 8 bytes per
    document, and only the words queries use get one (:attr:`dense_terms`): on the
    1M-document Zipf benchmark, scored exhaustively, 20 words and 160 MB. MaxScore
    (:class:`~labsrc.lanes.maxscore.StoredTerm`) looks candidates up in the same rows.

    Only terms of the vocabulary are kept, so arbitrary query words cannot grow
    it; an unknown term maps to ``None``. Building lazily keeps loading a large
    index instant.
    """

    def __init__(self, packed: np.ndarray, vocabulary: dict[str, int], ptr: Sequence[int], n_docs: int) -> None:
        super().__init__()
        self._packed, self._vocabulary, self._ptr, self._n_docs = packed, vocabulary, ptr, n_docs
        self.dense_terms: set[str] = set()  # the terms given a dense row so far

    def __missing__(self, term: str) -> np.ndarray | None:
        t = self._vocabulary.get(term)
        if t is None:
            return None
        part = self._packed[:, self._ptr[t] : self._ptr[t + 1]]
        if dense_row_pays(part.shape[1], self._n_docs):
            row = np.zeros(self._n_docs, dtype=np.float64)
            row[part[0]] = part[1].view(np.float64)
            row.setflags(write=False)
            part = row
            self.dense_terms.add(term)
        self[term] = part
        return part


def term_columns(columns: TermColumns, terms: Sequence[str]) -> list[np.ndarray]:
    """The parts of the query's known terms, one per occurrence, in query order.

    A term that occurs twice in the query is read twice, so it adds its impact
    once per occurrence, where that occurrence stands: the order
    :func:`labsrc.lanes.bm25.brute_force_bm25` adds in.
    """
    return [part for part in map(columns.__getitem__, terms) if part is not None]


def score_columns(parts: Sequence[np.ndarray], n_docs: int) -> np.ndarray:
    """Every document's score (0 where no term matches): the parts added in query order.

    Each document's score is its impacts summed in query order from 0, whatever
    mix of blocks and dense rows carries them:

    * a run of blocks is gathered with one ``np.concatenate``; the first run is
      scattered with ``np.bincount`` (which adds in input order from 0), a later
      one with ``np.add.at``, which adds each posting to the running score in
      input order;
    * a dense row is one vectorised ``+=``; where the term is absent it adds 0.0,
      which leaves a score unchanged exactly.
    """
    scores, run = None, []
    for part in parts:
        if part.ndim == 2:
            run.append(part)
            continue
        scores = _add_blocks(scores, run, n_docs)
        run = []
        if scores is None:
            scores = part.copy()  # 0 + impact is the impact: the copy is the first sum
        else:
            scores += part
    scores = _add_blocks(scores, run, n_docs)
    return np.zeros(n_docs, dtype=np.float64) if scores is None else scores


def query_scores(columns: TermColumns, terms: Sequence[str], n_docs: int) -> np.ndarray:
    """:func:`score_columns` of ``terms``: one gather and one ``bincount`` when no term has a dense row."""
    parts = term_columns(columns, terms)
    if not columns.dense_terms.isdisjoint(terms):
        return score_columns(parts, n_docs)
    # Blocks only: the common case on most corpora, written out because every query runs it.
    if not parts:
        return np.zeros(n_docs, dtype=np.float64)
    gathered = np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
    return np.bincount(gathered[0], gathered[1].view(np.float64), n_docs)


def _add_blocks(scores: np.ndarray | None, blocks: list[np.ndarray], n_docs: int) -> np.ndarray | None:
    """``scores`` plus the blocks' impacts, added posting by posting in order (a fresh array when ``None``)."""
    if not blocks:
        return scores
    gathered = np.concatenate(blocks, axis=1) if len(blocks) > 1 else blocks[0]
    if scores is None:
        return np.bincount(gathered[0], gathered[1].view(np.float64), n_docs)
    np.add.at(scores, gathered[0], gathered[1].view(np.float64))
    return scores
