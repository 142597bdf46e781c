"""A BEIR collection with permissions: regions, ACL tags and effective dates, callers, and gate cases from its qrels.

BEIR collections have no access control (:func:`~labsrc.datasets.beir.as_chunks`
gives every document to one caller). To audit a retriever at a realistic scale,
this module lays a deterministic permission layout over one:

* every document gets a region (``eu`` or ``us``), an ACL tag (``public``,
  ``staff`` or ``legal``) and an effective window, each drawn from the SHA-256
  of its id, so the layout depends on nothing but the ids (not on file order or
  on the Python version): about 1 in 10 documents is superseded (ended the day
  before the evaluation date) and 1 in 20 not yet effective (starts the day after);
* four callers hold different tag sets in the two regions (:data:`CALLERS`);
* each judged query of a split is asked by one caller (round robin over the
  queries sorted by id): a **positive** case when the caller may see some of its
  relevant documents (those are expected), else a **restricted**,
  **superseded**, **not_yet_effective** or **wrong_region** case forbidding the
  relevant documents the caller may not see, named by why the first of them is hidden.

The case's ``name`` is the BEIR query id, so a ``vectors/<model>/`` folder's
query vectors reach the dense lane (:func:`~labsrc.lanes.sources.load_dense_source`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from labsrc.boundary import BlockReason, block_reasons
from labsrc.datasets.beir import BeirDataset
from labsrc.errors import InvalidArgument
from labsrc.records.cases import Case
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["AUDIT_DATE", "CALLERS", "PermissionedCollection", "permissioned"]

#: The evaluation date of every permissioned collection.
AUDIT_DATE = dt.date(2026, 6, 1)
_START = dt.date(2020, 1, 1)
REGIONS = ("eu", "us")
TAGS = ("public", "staff", "legal")
CALLERS: tuple[Caller, ...] = (
    Caller("eu-staff", "eu", frozenset({"public", "staff"})),
    Caller("us-staff", "us", frozenset({"public", "staff"})),
    Caller("eu-legal", "eu", frozenset({"public", "legal"})),
    Caller("us-public", "us", frozenset({"public"})),
)
_KIND = {
    BlockReason.RESTRICTED: "restricted",
    BlockReason.SUPERSEDED: "superseded",
    BlockReason.NOT_YET_EFFECTIVE: "not_yet_effective",
    BlockReason.WRONG_REGION: "wrong_region",
}


@dataclass(frozen=True)
class PermissionedCollection:
    """Chunks, callers and cases of a BEIR collection under the layout, and its evaluation date."""

    name: str
    chunks: tuple[PolicyChunk, ...]
    callers: tuple[Caller, ...]
    cases: tuple[Case, ...]
    on_date: dt.date


def _draw(doc_id: str) -> int:
    return int.from_bytes(hashlib.sha256(doc_id.encode("utf-8")).digest()[:8], "big")


def _chunk(doc_id: str, title: str, text: str, on_date: dt.date) -> PolicyChunk:
    h = _draw(doc_id)
    window = h // (len(REGIONS) * len(TAGS)) % 20
    start, end, version = _START, None, "v1"
    if window < 2:  # 1 in 10: superseded the day before the evaluation date
        end, version = on_date - dt.timedelta(days=1), "v0"
    elif window == 2:  # 1 in 20: takes effect the day after
        start, version = on_date + dt.timedelta(days=1), "v2"
    return PolicyChunk(
        chunk_id=doc_id, document_id=doc_id, parent_id=doc_id, version=version,
        region=REGIONS[h % len(REGIONS)], acl_tag=TAGS[h // len(REGIONS) % len(TAGS)],
        effective_from=start, effective_to=end, text=text, title=title or None,
    )


def permissioned(
    dataset: BeirDataset, *, split: str = "test", on_date: dt.date = AUDIT_DATE,
    max_cases: Mapping[str, int] | None = None,
) -> PermissionedCollection:
    """``dataset`` under the layout above, with cases from the qrels of ``split``.

    ``max_cases`` caps the cases of each kind (``{"positive": 60, "restricted": 10}``;
    a kind it leaves out is not capped), keeping the first by query id.
    Judged documents missing from the corpus are ignored.
    """
    caps = dict(max_cases or {})
    bad = {k: v for k, v in caps.items() if not isinstance(v, int) or isinstance(v, bool) or v < 0}
    if bad:
        raise InvalidArgument(f"max_cases values must be non-negative ints, got {bad}")
    chunks = tuple(_chunk(d.doc_id, d.title, d.indexed_text, on_date) for d in dataset.corpus.values())
    by_id = {c.chunk_id: c for c in chunks}
    cases: list[Case] = []
    counts: dict[str, int] = {}
    for i, (qid, judged) in enumerate(sorted(dataset.split_qrels(split).items())):
        caller = CALLERS[i % len(CALLERS)]
        relevant = sorted(d for d, grade in judged.items() if grade > 0 and d in by_id)
        if not relevant:
            continue
        hidden = {d: block_reasons(caller, by_id[d], on_date) for d in relevant}
        visible = tuple(d for d in relevant if not hidden[d])
        if visible:
            kind, expected, forbidden = "positive", visible, ()
        else:
            kind, expected, forbidden = _KIND[hidden[relevant[0]][0]], (), tuple(relevant)
        cap = caps.get(kind)
        if cap is not None and counts.get(kind, 0) >= cap:
            continue
        counts[kind] = counts.get(kind, 0) + 1
        cases.append(Case(name=qid, query=dataset.queries[qid], caller=caller.actor_id, kind=kind,
                          expected=expected, forbidden=forbidden, on_date=on_date))
    return PermissionedCollection(dataset.name, chunks, CALLERS, tuple(cases), on_date)
