"""Record factories shared by the tests (a plain module: conftest is not importable by name
when notebooks/ has a conftest too)."""

from __future__ import annotations

import datetime as dt

import labsrc


def make_chunk(chunk_id: str, text: str = "some policy text", **overrides: object) -> labsrc.PolicyChunk:
    """A valid chunk with sensible defaults; override any field by keyword."""
    fields: dict[str, object] = dict(
        chunk_id=chunk_id,
        document_id=f"doc-{chunk_id}",
        parent_id=f"parent-{chunk_id}",
        version=f"doc-{chunk_id}/2026-01-01",
        region="EU",
        acl_tag="support:eu",
        effective_from=dt.date(2026, 1, 1),
        effective_to=None,
        text=text,
    )
    fields.update(overrides)
    return labsrc.PolicyChunk(**fields)  # type: ignore[arg-type]
