"""The audit's rows, and the file that keeps them between runs.

An :class:`AuditRow` is one subject on one dataset: the status of each gate the
table shows and, for a failed gate, its first finding. A whole audit on a BEIR
collection takes many minutes per subject, so ``labsrc audit --rows FILE`` keeps
each finished row in ``FILE`` (JSON lines, rewritten atomically after every row:
a killed run loses at most the row it was on) and reuses a kept row instead of
running it again. A row is reused only for the same subject (name and
description), the same dataset (:attr:`AuditRow.digest`, a SHA-256 over its
chunks, callers, cases, gate config and vectors) and the same lab version, so a
changed corpus or a new release is audited afresh.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from labsrc.errors import InvalidRecord
from labsrc.records.files import atomic_write_bytes
from labsrc.records.loading import iter_jsonl
from labsrc.version import __version__

__all__ = ["ROW_STATUSES", "AuditRow", "load_rows", "save_rows"]

#: What a gate column of the table can say.
ROW_STATUSES = ("PASS", "FAIL", "NOT TESTED", "NOT RUN", "ERROR")


@dataclass(frozen=True)
class AuditRow:
    """One subject on one dataset: the status of each audited gate and why a gate failed.

    ``digest`` names the dataset's content, ``description`` the subject's configuration,
    ``lab_version`` the lab that ran it and ``seconds`` its wall time: what decides whether
    a kept row may stand in for a new run (:meth:`key`), and what the whole audit cost.
    """

    subject: str
    dataset: str
    statuses: Mapping[str, str]
    why: Mapping[str, str]
    exit_code: int
    error: str | None = None
    digest: str = ""
    description: str = ""
    seconds: float | None = None
    lab_version: str = field(default=__version__)

    def __post_init__(self) -> None:
        object.__setattr__(self, "statuses", MappingProxyType(dict(self.statuses)))
        object.__setattr__(self, "why", MappingProxyType(dict(self.why)))

    def key(self) -> tuple[str, str, str, str, str]:
        """What a kept row must match to be reused: subject, its description, dataset, digest, lab version."""
        return (self.subject, self.description, self.dataset, self.digest, self.lab_version)

    def to_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "dataset": self.dataset, "statuses": dict(self.statuses),
                "why": dict(self.why), "exit_code": self.exit_code, "error": self.error, "digest": self.digest,
                "description": self.description, "seconds": self.seconds, "lab_version": self.lab_version}


_TEXT_FIELDS = ("subject", "dataset", "digest", "description", "lab_version")


def _row(record: dict[str, Any], path: Path, line: int) -> AuditRow:
    def bad(name: str, message: str) -> InvalidRecord:
        return InvalidRecord(message, path=path, line=line, field=name)

    for name in _TEXT_FIELDS:
        if not isinstance(record.get(name), str):
            raise bad(name, f"must be a string, not {record.get(name)!r}")
    for name in ("statuses", "why"):
        value = record.get(name)
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise bad(name, f"must be an object of strings, not {value!r}")
    odd = sorted(set(record["statuses"].values()) - set(ROW_STATUSES))
    if odd:
        raise bad("statuses", f"unknown status(es) {odd}; a gate says one of {list(ROW_STATUSES)}")
    code = record.get("exit_code")
    if isinstance(code, bool) or code not in (0, 1, 2):
        raise bad("exit_code", f"must be 0, 1 or 2, not {code!r}")
    error = record.get("error")
    if error is not None and not isinstance(error, str):
        raise bad("error", f"must be a string or null, not {error!r}")
    seconds = record.get("seconds")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                or not math.isfinite(seconds) or seconds < 0):
        raise bad("seconds", f"must be a non-negative number or null, not {seconds!r}")
    return AuditRow(record["subject"], record["dataset"], record["statuses"], record["why"], code, error,
                    record["digest"], record["description"], None if seconds is None else float(seconds),
                    record["lab_version"])


def load_rows(path: str | Path) -> list[AuditRow]:
    """The rows kept in ``path`` (JSON lines); a malformed line is an :class:`InvalidRecord` naming it."""
    path = Path(path)
    return [_row(record, path, number) for number, record in iter_jsonl(path)]


def save_rows(rows: Iterable[AuditRow], path: str | Path) -> Path:
    """Replace ``path`` with ``rows``, one JSON object per line, atomically."""
    text = "".join(json.dumps(r.to_dict(), ensure_ascii=False, sort_keys=True) + "\n" for r in rows)
    return atomic_write_bytes(path, text.encode("utf-8"))

