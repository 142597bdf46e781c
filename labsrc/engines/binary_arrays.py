"""PostgreSQL's binary ``float8[]``, both ways: the exact vectors go in by ``COPY BINARY`` and come back by ``array_send``.

The layout (PostgreSQL's ``arrayfuncs.c``, ``array_send`` / ``array_recv``; the
same bytes in a ``COPY BINARY`` field) of a one-dimensional array without
NULLs, all big-endian:

=======================  ==========================================
header, 20 bytes         ndim (1), has-nulls flag (0), element type OID (701, ``float8``),
                         the dimension's length and lower bound (1)
per element, 12 bytes    its byte length (8), then the IEEE-754 double
=======================  ==========================================

The empty array ``'{}'`` is the first three header fields alone (ndim 0). No
text is printed or parsed on either side, so every double arrives bit for bit
(-0.0, subnormals and all) and 20 vectors at 384-d decode in microseconds
where their text took milliseconds.
"""

from __future__ import annotations

import numpy as np

from labsrc.errors import LabError

__all__ = ["FLOAT8_OID", "float8_array", "float8_array_binary"]

#: ``float8``'s type OID, as a binary array names its element type.
FLOAT8_OID = 701
_HEADER = np.dtype([("ndim", ">i4"), ("has_nulls", ">i4"), ("oid", ">u4"), ("length", ">i4"), ("lbound", ">i4")])
_CELL = np.dtype([("size", ">i4"), ("value", ">f8")])
_EMPTY_SIZE = 12  # ndim, has-nulls, OID: no dimension follows


def float8_array_binary(matrix: np.ndarray) -> list[bytes]:
    """Each row as PostgreSQL's binary ``float8[]`` (one dimension, no NULLs, big-endian), for ``COPY BINARY``."""
    rows, dimension = matrix.shape
    header = np.array([1, 0, FLOAT8_OID, dimension, 1], dtype=">i4").tobytes()
    body = np.empty((rows, dimension), dtype=_CELL)
    body["size"] = 8
    body["value"] = matrix
    return [header + body[i].tobytes() for i in range(rows)]


def float8_array(data: bytes) -> np.ndarray:
    """A binary ``float8[]`` (as ``array_send`` returns it) as float64, bit for bit.

    Raises :class:`~labsrc.errors.LabError` naming what arrived when it is not a
    one-dimensional ``float8`` array without NULLs of the length its header states.
    """
    if len(data) == _EMPTY_SIZE and np.frombuffer(data, dtype=">i4", count=1)[0] == 0:
        return np.empty(0, dtype=np.float64)
    if len(data) < _HEADER.itemsize:
        raise LabError(f"expected a binary float8[], got {len(data)} bytes")
    header = np.frombuffer(data, dtype=_HEADER, count=1)[0]
    ndim, has_nulls, oid, length = (int(header[name]) for name in ("ndim", "has_nulls", "oid", "length"))
    if ndim != 1 or has_nulls or oid != FLOAT8_OID or length < 0:
        raise LabError(
            f"expected a one-dimensional float8[] without NULLs, got ndim={ndim}, has_nulls={has_nulls}, "
            f"element type OID {oid}"
        )
    expected = _HEADER.itemsize + length * _CELL.itemsize
    if len(data) != expected:
        raise LabError(f"a binary float8[] of {length} elements takes {expected} bytes, not {len(data)}")
    cells = np.frombuffer(data, dtype=_CELL, count=length, offset=_HEADER.itemsize)
    if np.any(cells["size"] != 8):
        raise LabError("a binary float8[] element is not 8 bytes long")
    return cells["value"].astype(np.float64)
