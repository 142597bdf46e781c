"""The dense lane's fast pass: float32 candidates with a proven rounding bound, rescored exactly.

An exact cosine over every permitted row in float64 reads eight bytes a value,
and the einsum that keeps a row's score independent of its neighbours is not a
BLAS kernel. The fast pass reads four, through BLAS: unit rows are stored once
in float32, grouped by boundary key (region, ACL tag) so that a caller's rows
sit in a few contiguous slices, and a request multiplies only the slices of
the groups its mask touches. Then every row whose float32 score is within
:func:`float32_cosine_margin` of the k-th is *rescored* from the float64 row,
exactly as before. No row of the true top k can fall outside that margin, so
the answer (ids, order, and every bit of every score) is the exact lane's.

FAISS's exact filtered search (``IndexFlatIP`` with an ``IDSelectorBitmap``)
is the same idea without the rescoring; ``benchmarks/bench_dense.py`` runs both.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["Float32Pass", "float32_cosine_margin"]


def float32_cosine_margin(dimension: int) -> float:
    """A bound on |cos₃₂ − cos₆₄| for d-dimensional vectors, doubled (the k-th and a candidate both err).

    Rounding the inputs to float32 and summing d products in float32 moves a
    cosine by at most about (d + 4)·u, u = 2⁻²⁴ (Higham, *Accuracy and Stability
    of Numerical Algorithms*, 2002, §3.1: an inner product in any summation
    order errs by γ_d ≈ d·u relative to Σ|xᵢyᵢ| ≤ ‖x‖‖y‖ = 1 for unit vectors;
    rounding both inputs adds 2u).
    """
    return 2.0 * (dimension + 4) * 2.0**-24 + 1e-12


class Float32Pass:
    """Unit rows in float32, grouped by a key per row; :meth:`candidates` gives the rows to rescore.

    ``keys[i]`` is row ``i``'s group (any sortable value). Rows are stored in
    (key, row) order; ``perm[j]`` is the original row of stored row ``j``.
    """

    def __init__(self, matrix: np.ndarray, norms: np.ndarray, keys: Sequence[object]) -> None:
        n = matrix.shape[0]
        codes = {key: code for code, key in enumerate(sorted(set(keys)))}
        group = np.fromiter((codes[k] for k in keys), dtype=np.int64, count=n)
        self.perm = np.argsort(group, kind="stable")
        unit = np.zeros_like(matrix, dtype=np.float64)
        np.divide(matrix, norms[:, None], out=unit, where=norms[:, None] > 0)
        self.unit32 = np.ascontiguousarray(unit[self.perm], dtype=np.float32)
        self.unit32.setflags(write=False)
        sorted_groups = group[self.perm]
        self.starts = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]]) if n else np.zeros(0, np.int64)
        self.ends = np.r_[self.starts[1:], n].astype(np.int64) if n else np.zeros(0, np.int64)
        self.margin = float32_cosine_margin(matrix.shape[1] if matrix.ndim == 2 else 0)

    def _slices(self, stored_mask: np.ndarray | None) -> list[tuple[int, int]]:
        """Contiguous runs of stored rows covering every group the mask touches (all rows without a mask)."""
        if stored_mask is None:
            return [(0, self.unit32.shape[0])] if self.unit32.shape[0] else []
        touched = np.logical_or.reduceat(stored_mask, self.starts) if self.starts.size else np.zeros(0, bool)
        runs: list[tuple[int, int]] = []
        for start, end in zip(self.starts[touched].tolist(), self.ends[touched].tolist()):
            if runs and runs[-1][1] == start:
                runs[-1] = (runs[-1][0], end)
            else:
                runs.append((start, end))
        return runs

    def candidates(self, query: np.ndarray, top_k: int, mask: np.ndarray | None = None) -> np.ndarray:
        """Original rows (ascending) that may be in the exact top ``top_k`` with a score > 0.

        With approximate scores aᵢ (|aᵢ − cosᵢ| ≤ ε, ε = margin/2) and t the k-th
        largest aᵢ over permitted rows: the exact k-th is ≥ t − ε, so a row of the
        exact top k has aᵢ ≥ t − 2ε; and a score > 0 needs aᵢ > −ε.
        """
        norm = float(np.linalg.norm(query))
        if norm == 0.0 or self.unit32.shape[0] == 0:
            return np.zeros(0, dtype=np.int64)
        q32 = (np.asarray(query, dtype=np.float64) / norm).astype(np.float32)
        stored_mask = None if mask is None else mask[self.perm]
        scores, rows = [], []
        for start, end in self._slices(stored_mask):
            approx = self.unit32[start:end] @ q32
            if stored_mask is None:
                scores.append(approx)
                rows.append(self.perm[start:end])
            else:
                keep = stored_mask[start:end]
                scores.append(approx[keep])
                rows.append(self.perm[start:end][keep])
        if not scores:
            return np.zeros(0, dtype=np.int64)
        approx = np.concatenate(scores).astype(np.float64)
        original = np.concatenate(rows)
        if approx.size == 0:
            return np.zeros(0, dtype=np.int64)
        kth = np.partition(approx, approx.size - top_k)[approx.size - top_k] if approx.size > top_k else approx.min()
        cut = max(kth - self.margin, -self.margin / 2)
        return np.sort(original[approx >= cut])
