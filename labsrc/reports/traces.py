"""A failed case's compact trace: ids with lane ranks, leaks, versions, timings, and what the
noninterference gates found. Never text, so it can be shared (``failed_traces.jsonl``, JUnit XML)."""

from __future__ import annotations

from typing import Any

from labsrc.gate.config import LANES
from labsrc.gate.gates import GateRun
from labsrc.gate.outcomes import CaseOutcome

__all__ = ["compact_trace"]


def compact_trace(o: CaseOutcome, run: GateRun) -> dict[str, Any]:
    """A failed case's trace: ids with lane ranks, leaks, versions, timings. Never text."""
    ranks: dict[str, dict[str, int | None]] = {}
    lists = dict(o.probe_ids or {}) if o.case.forbidden else {}
    for lane in LANES:
        for chunk_id in (*o.ids[lane], *lists.get(lane, ())):
            ranks.setdefault(chunk_id, {})
    for chunk_id in ranks:
        for lane in LANES:
            ranks[chunk_id][f"{lane}_rank"] = o.lane_rank(chunk_id, lane)
            if lists:
                probe = lists[lane]
                ranks[chunk_id][f"{lane}_probe_rank"] = probe.index(chunk_id) + 1 if chunk_id in probe else None
    failed_gates = sorted(g.name for g in run.gates if o.case.name in g.failing_cases)
    # What the noninterference gates found, only when they found something (ids and numbers, never text).
    extra: dict[str, Any] = {}
    if o.error:
        extra["error"] = o.error
    if o.violations:
        extra["hidden_returned"] = [v.to_dict() for v in o.violations]
    for name, comparison in (("rebuild", o.rebuild), ("bait", o.bait), ("concurrency", o.concurrency)):
        if comparison is not None and comparison.differs:
            extra[name] = comparison.to_dict()
    return {
        "case": o.case.name,
        "kind": o.case.kind,
        "caller": o.case.caller,
        "on_date": (o.case.on_date or run.on_date).isoformat(),
        "failed_gates": failed_gates,
        "expected": list(o.case.expected),
        "forbidden": list(o.case.forbidden),
        "leaked": list(o.leaked()) if o.case.kind != "absent" else list(o.overreach()),
        "top_k": run.config.top_k,
        "sparse_ids": list(o.trace.sparse_ids),
        "dense_ids": list(o.trace.dense_ids),
        "fused_ids": list(o.trace.fused_ids),
        "candidates": [{"chunk_id": cid, **r} for cid, r in sorted(ranks.items())],
        "versions": dict(o.trace.versions),
        "timings_ms": dict(o.trace.timings_ms),
        **extra,
    }
