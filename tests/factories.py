"""Record factories shared by the tests (a plain module: conftest is not importable by name
when notebooks/ has a conftest too)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import labsrc
from labsrc.records.checksums import CHECKSUMS_FILE, checksums_json


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


def reseal(folder: Path) -> Path:
    """Write ``folder``'s ``checksums.json`` again after a test edited its files, as anyone who can edit them can.

    The digests catch damage, not an attacker (labsrc.records.checksums): a test
    of the checks behind them (a planted pattern, an array out of range) reseals
    the folder first, so that its edit reaches those checks.
    """
    names = [p.name for p in folder.iterdir() if p.name != CHECKSUMS_FILE]
    (folder / CHECKSUMS_FILE).write_bytes(checksums_json(folder, names))
    return folder
