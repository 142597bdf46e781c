"""The dense lane's fast pass: approximate candidates with a proven bound per row, rescored exactly.

An exact cosine over every permitted row in float64 reads eight bytes a value,
and the einsum that keeps a row's score independent of its neighbours is not a
BLAS kernel. The fast pass reads less, through BLAS. Unit rows are stored once
in float32, grouped by boundary key (region, ACL tag) so that a caller's rows
sit in a few contiguous slices, and once more as int8 codes
(:mod:`labsrc.lanes.codes`). For each boundary group the mask touches:

* when at least :data:`GATHER_BELOW` of the group's rows are permitted (whole
  groups, as region and tags give), the group is multiplied in float32, every
  row of it, at about 4 bytes a value streamed (adjacent such groups in one call);
* when fewer are (date windows scatter a caller's rows inside a group), only
  the permitted rows' int8 codes are gathered and multiplied: the cost follows
  the permitted rows, at 1 byte a value.

Every row carries a bound on |approx − cos| (:func:`float32_cosine_margin`'s
half for float32, :func:`~labsrc.lanes.codes.int8_bounds` for codes). Every
row whose approx + bound reaches the k-th largest approx − bound is *rescored*
from its float64 row, exactly as before. No row of the true top k can fall
outside, so the answer (ids, order, and every bit of every score) is the exact
lane's.

FAISS's exact filtered search (``IndexFlatIP`` with an ``IDSelectorBitmap``)
is the same idea without the rescoring; ``benchmarks/bench_dense.py`` runs both.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from labsrc.lanes.codes import Int8Rows

__all__ = ["GATHER_BELOW", "CandidatePass", "float32_cosine_margin"]

#: A touched group with fewer permitted rows than this share is gathered as int8 codes, not streamed in float32.
GATHER_BELOW = 0.5


def float32_cosine_margin(dimension: int) -> float:
    """A bound on |cos₃₂ − cos₆₄| for d-dimensional vectors, doubled (the k-th and a candidate both err).

    Rounding the inputs to float32 and summing d products in float32 moves a
    cosine by at most about (d + 4)·u, u = 2⁻²⁴ (Higham, *Accuracy and Stability
    of Numerical Algorithms*, 2002, §3.1: an inner product in any summation
    order errs by γ_d ≈ d·u relative to Σ|xᵢyᵢ| ≤ ‖x‖‖y‖ = 1 for unit vectors;
    rounding both inputs adds 2u).
    """
    return 2.0 * (dimension + 4) * 2.0**-24 + 1e-12


class CandidatePass:
    """Unit rows in float32 and int8, grouped by a key per row; :meth:`candidates` gives the rows to rescore.

    ``keys[i]`` is row ``i``'s group (any sortable value). Rows are stored in
    (key, row) order; ``perm[j]`` is the original row of stored row ``j``.
    """

    def __init__(self, matrix: np.ndarray, norms: np.ndarray, keys: Sequence[object]) -> None:
        n = matrix.shape[0]
        codes = {key: code for code, key in enumerate(sorted(set(keys)))}
        group = np.fromiter((codes[k] for k in keys), dtype=np.int64, count=n)
        self.perm = np.argsort(group, kind="stable")
        # Unit rows in stored order, divided in place in one float64 copy (a zero row has norm 0 and stays 0).
        stored = np.asarray(matrix, dtype=np.float64)[self.perm]
        stored_norms = norms[self.perm][:, None]
        np.divide(stored, stored_norms, out=stored, where=stored_norms > 0)
        # Transposed (one row per dimension): ``q @ unit32t[:, a:b]`` is BLAS's non-transposed sgemv, which
        # streams a column-major slice about twice as fast here as the transposed kernel streams row-major rows.
        self.unit32t = np.ascontiguousarray(stored.T, dtype=np.float32)
        self.unit32t.setflags(write=False)
        self.n_rows = n
        self.int8 = Int8Rows(stored)
        sorted_groups = group[self.perm]
        self.starts = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]]) if n else np.zeros(0, np.int64)
        self.ends = np.r_[self.starts[1:], n].astype(np.int64) if n else np.zeros(0, np.int64)
        self.margin = float32_cosine_margin(matrix.shape[1] if matrix.ndim == 2 else 0)

    def _plan(self, stored_mask: np.ndarray | None) -> tuple[list[tuple[int, int]], np.ndarray]:
        """``(runs, gathered)``: runs of stored rows read whole in float32 (groups the mask fills at least
        :data:`GATHER_BELOW`, adjacent ones merged; every row without a mask), and the permitted stored
        rows of the groups it scatters in, read as int8 codes."""
        if stored_mask is None:
            return ([(0, self.n_rows)] if self.n_rows else []), np.zeros(0, dtype=np.int64)
        if not self.starts.size:
            return [], np.zeros(0, dtype=np.int64)
        counts = np.add.reduceat(stored_mask, self.starts, dtype=np.int64)
        filled = (counts > 0) & (counts >= GATHER_BELOW * (self.ends - self.starts))
        runs: list[tuple[int, int]] = []
        for start, end in zip(self.starts[filled].tolist(), self.ends[filled].tolist()):
            if runs and runs[-1][1] == start:
                runs[-1] = (runs[-1][0], end)
            else:
                runs.append((start, end))
        scattered = (counts > 0) & ~filled
        gathered = [start + np.flatnonzero(stored_mask[start:end])
                    for start, end in zip(self.starts[scattered].tolist(), self.ends[scattered].tolist())]
        return runs, (np.concatenate(gathered) if gathered else np.zeros(0, dtype=np.int64))

    def _approx(self, stored_mask: np.ndarray | None, q32: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(stored rows, approx, bounds)`` of every permitted row (module docs)."""
        runs, gathered = self._plan(stored_mask)
        rows, approx, bounds = [], [], []
        for start, end in runs:
            scores = q32 @ self.unit32t[:, start:end]
            if stored_mask is None:
                picked = np.arange(start, end)
            else:
                picked = start + np.flatnonzero(stored_mask[start:end])
                scores = scores[picked - start]
            rows.append(picked)
            approx.append(scores.astype(np.float64))
            bounds.append(np.full(picked.size, self.margin / 2))
        if gathered.size:
            scores, bound = self.int8.dots(gathered, q32)
            rows.append(gathered)
            approx.append(scores)
            bounds.append(bound)
        if not rows:
            return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0)
        return np.concatenate(rows), np.concatenate(approx), np.concatenate(bounds)

    def candidates(self, query: np.ndarray, top_k: int, mask: np.ndarray | None = None) -> np.ndarray:
        """Original rows (ascending) that may be in the exact top ``top_k`` with a score > 0.

        With approximate scores aᵢ and bounds bᵢ (|aᵢ − cosᵢ| ≤ bᵢ) over the
        permitted rows, and t the k-th largest aᵢ − bᵢ: the exact k-th cosine is
        ≥ t (k rows have cosᵢ ≥ aᵢ − bᵢ ≥ t), so a row of the exact top k has
        aᵢ + bᵢ ≥ t; and a score > 0 needs aᵢ + bᵢ > 0.
        """
        norm = float(np.linalg.norm(query))
        if norm == 0.0 or self.n_rows == 0:
            return np.zeros(0, dtype=np.int64)
        q32 = (np.asarray(query, dtype=np.float64) / norm).astype(np.float32)
        stored_mask = None if mask is None else mask[self.perm]
        stored, approx, bounds = self._approx(stored_mask, q32)
        if stored.size == 0:
            return np.zeros(0, dtype=np.int64)
        upper = approx + bounds
        keep = upper > 0
        if stored.size > top_k:
            lower = approx - bounds
            keep &= upper >= np.partition(lower, stored.size - top_k)[stored.size - top_k]
        return np.sort(self.perm[stored[keep]])
