"""The lab's exception hierarchy.

Every error the library raises on purpose is a :class:`LabError`, so callers can
catch one type. Errors about bad values also subclass :class:`ValueError`, which
is what generic Python code expects for "the value you gave me is wrong".
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["LabError", "InvalidRecord", "InvalidArgument", "MissingDependency"]


class LabError(Exception):
    """Root of every error the lab raises deliberately."""


class InvalidArgument(LabError, ValueError):
    """A function argument is out of range or of the wrong shape."""


class InvalidRecord(LabError, ValueError):
    """A record read from a file is malformed.

    The message always names the file, the 1-based line (when the format has
    lines) and the field, so the learner can jump straight to the problem.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.field = field
        where = []
        if self.path is not None:
            where.append(self.path)
        if line is not None:
            where.append(f"line {line}")
        if field is not None:
            where.append(f"field {field!r}")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class MissingDependency(LabError, ImportError):
    """An optional extra is needed; the message says how to install it."""
