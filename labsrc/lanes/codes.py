"""Int8 codes of unit rows, each with a proven error bound: the dense lane's pass for scattered masks.

When a caller's permitted rows are scattered inside their boundary groups (date
windows do that), reading every row of the groups in float32 reads mostly rows
the caller may not see. Gathering only the permitted rows costs a random read
per row, so the row had better be small: each unit row u is stored once more
as int8 codes c with a scale s (the row's largest magnitude over 127,
c = round(u / s)), 384 bytes a row at 384 dimensions instead of float32's 1,536.
A request gathers a block of the permitted rows' codes, casts it to float32 in
cache (exact: every int8 is a float32) and multiplies it by BLAS:
approxᵢ = sᵢ·(cᵢ·q).

**The bound.** Row i's quantisation error is known exactly at build time,
eᵢ = ‖uᵢ − sᵢcᵢ‖₂ (float64), and for a unit query q, by Cauchy–Schwarz,
|uᵢ·q − sᵢcᵢ·q| ≤ eᵢ. Rounding q to float32 and summing d products in float32
add at most (d + 1)·u·(1 + eᵢ) more, u = 2⁻²⁴ (Higham, *Accuracy and Stability
of Numerical Algorithms*, 2002, §3.1: γ_d relative to Σ|cᵢⱼqⱼ| ≤ ‖cᵢ‖, and
sᵢ‖cᵢ‖ ≤ 1 + eᵢ). So :func:`int8_bounds` gives
bᵢ = eᵢ + 1.01·(d + 4)·u·(1 + eᵢ) + 10⁻¹², which bounds |cosᵢ − approxᵢ|; the
candidate pass keeps every row whose approxᵢ + bᵢ reaches the k-th largest
approxᵢ − bᵢ and rescores them from their float64 rows, so the answer is exact.
"""

from __future__ import annotations

import numpy as np

from labsrc.errors import InvalidArgument

__all__ = ["GATHER_BLOCK_ROWS", "Int8Rows", "int8_bounds", "int8_codes"]

#: Rows gathered, cast and multiplied per block: 512 rows of 384 float32 are 768 KiB, inside a 1 MiB L2 cache.
GATHER_BLOCK_ROWS = 512
#: Rows quantised at a time when building, so the float64 temporaries stay small.
_BUILD_BLOCK_ROWS = 8_192
_U = 2.0**-24


def int8_codes(unit: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(codes, scales, errors)`` of rows: int8 codes, each row's scale, and ‖row − scale·codes‖₂.

    ``scale = max|row| / 127``; a zero row has scale 0, codes 0 and error 0.
    ``codes = round(row / scale)`` is in [-127, 127]. The error is computed in
    float64 from the codes actually stored: ``int8_codes(np.array([[0.6, 0.8]]))``
    gives scale 0.8/127, codes [95, 127] and error |0.6 − 95·0.8/127| ≈ 0.00157.
    """
    unit = np.asarray(unit, dtype=np.float64)
    if unit.ndim != 2:
        raise InvalidArgument(f"int8_codes takes a 2-D array of rows, got shape {unit.shape}")
    n = unit.shape[0]
    codes = np.zeros(unit.shape, dtype=np.int8)
    scales = np.zeros(n)
    errors = np.zeros(n)
    for start in range(0, n, _BUILD_BLOCK_ROWS):
        rows = unit[start : start + _BUILD_BLOCK_ROWS]
        scale = np.abs(rows).max(axis=1) / 127.0 if rows.shape[1] else np.zeros(rows.shape[0])
        quotient = np.zeros_like(rows)
        np.divide(rows, scale[:, None], out=quotient, where=scale[:, None] > 0)
        block = np.clip(np.rint(quotient), -127, 127).astype(np.int8)
        codes[start : start + rows.shape[0]] = block
        scales[start : start + rows.shape[0]] = scale
        errors[start : start + rows.shape[0]] = np.linalg.norm(rows - scale[:, None] * block, axis=1)
    return codes, scales, errors


def int8_bounds(errors: np.ndarray, dimension: int) -> np.ndarray:
    """bᵢ = eᵢ + 1.01·(d + 4)·2⁻²⁴·(1 + eᵢ) + 10⁻¹²: a bound on |cosᵢ − approxᵢ| (module docs)."""
    errors = np.asarray(errors, dtype=np.float64)
    return errors + 1.01 * (dimension + 4) * _U * (1.0 + errors) + 1e-12


class Int8Rows:
    """Unit rows as int8 codes with their scales and bounds; :meth:`dots` scores a chosen few."""

    def __init__(self, unit: np.ndarray) -> None:
        codes, self.scales, errors = int8_codes(unit)
        self.dimension = codes.shape[1]
        self.codes = np.ascontiguousarray(codes)
        self.codes.setflags(write=False)
        self.bounds = int8_bounds(errors, self.dimension)

    def dots(self, rows: np.ndarray, q32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(approx, bounds)`` of ``rows`` (in range) for the float32 unit query ``q32``, float64 each."""
        count = rows.size
        out = np.empty(count, dtype=np.float32)
        size = min(GATHER_BLOCK_ROWS, count)
        gathered = np.empty((size, self.dimension), dtype=np.int8)
        block = np.empty((size, self.dimension), dtype=np.float32)
        for at in range(0, count, GATHER_BLOCK_ROWS):
            part = rows[at : at + GATHER_BLOCK_ROWS]
            # mode="clip" skips the bounds check (the rows are in range) and is ~40 % faster than "raise".
            np.take(self.codes, part, axis=0, out=gathered[: part.size], mode="clip")
            block[: part.size] = gathered[: part.size]  # int8 → float32: exact
            np.matmul(block[: part.size], q32, out=out[at : at + part.size])
        return self.scales[rows] * out.astype(np.float64), self.bounds[rows]
