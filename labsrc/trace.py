"""The retrieval trace: which run served a query, lane by lane, without any text.

A trace is what you keep for debugging and audits. It holds ids, versions and
measured timings, and by construction it never holds chunk text, so it can be
stored and shared without leaking the content of a restricted policy.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["RetrievalTrace", "StageTimer"]


@dataclass(frozen=True)
class RetrievalTrace:
    """Lesson spec, "Trace". ``timings_ms`` are measured with ``time.perf_counter``."""

    versions: Mapping[str, str]
    query_kind: str
    sparse_ids: tuple[str, ...]
    dense_ids: tuple[str, ...]
    fused_ids: tuple[str, ...]
    timings_ms: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "versions", MappingProxyType(dict(self.versions)))
        object.__setattr__(self, "timings_ms", MappingProxyType(dict(self.timings_ms)))
        for name in ("sparse_ids", "dense_ids", "fused_ids"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def to_dict(self, *, include_timings: bool = True) -> dict[str, Any]:
        """Plain JSON-ready dict; ``include_timings=False`` gives the replay-stable part."""
        out: dict[str, Any] = {
            "versions": dict(self.versions),
            "query_kind": self.query_kind,
            "sparse_ids": list(self.sparse_ids),
            "dense_ids": list(self.dense_ids),
            "fused_ids": list(self.fused_ids),
        }
        if include_timings:
            out["timings_ms"] = dict(self.timings_ms)
        return out


class StageTimer:
    """Collects wall-clock milliseconds per stage: ``with timer.stage("bm25"): ...``."""

    def __init__(self) -> None:
        self.timings_ms: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings_ms[name] = (time.perf_counter() - start) * 1000.0
