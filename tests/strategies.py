"""Hypothesis strategies for the noninterference property tests: random corpora, callers and hidden chunks."""

from __future__ import annotations

import datetime as dt

from hypothesis import strategies as st

import labsrc

REGIONS = ["EU", "US", "APAC"]
TAGS = ["support:eu", "support:us", "merchant:vip-ops", "legal:internal"]
WORDS = [
    "refund", "replacement", "damaged", "refurbished", "laptop", "parcel", "carrier", "footwear",
    "rpl-14", "clm-7", "vip-rpl-1", "days", "delivery", "rückgabe", "the", "within", "a",
]  # fmt: skip
BASE_DAY = dt.date(2026, 5, 27)

texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=10).map(" ".join)
days = st.integers(min_value=-400, max_value=400).map(lambda n: BASE_DAY + dt.timedelta(days=n))


@st.composite
def chunk_records(draw, prefix: str, count: int):
    out = []
    for i in range(count):
        start = draw(days)
        end = draw(st.one_of(st.none(), st.integers(0, 300).map(lambda n, s=start: s + dt.timedelta(days=n))))
        out.append(
            labsrc.PolicyChunk(
                chunk_id=f"{prefix}{i:03d}",
                document_id=f"doc-{i % 3}",
                parent_id=f"parent-{i}",
                version=f"v{i}",
                region=draw(st.sampled_from(REGIONS)),
                acl_tag=draw(st.sampled_from(TAGS)),
                effective_from=start,
                effective_to=end,
                text=f"{draw(texts)} [{prefix}{i:03d}]",
            )
        )
    return out


@st.composite
def scenarios(draw):
    corpus = draw(st.integers(0, 12).flatmap(lambda n: chunk_records("c", n)))
    caller = labsrc.Caller("someone", draw(st.sampled_from(REGIONS)), frozenset(draw(st.sets(st.sampled_from(TAGS)))))
    on_date = draw(days)
    query = draw(st.one_of(texts, st.sampled_from(["", "   ", "unseen-term"])))
    top_k = draw(st.one_of(st.integers(1, 3), st.integers(4, 500)))
    return corpus, caller, on_date, query, top_k


@st.composite
def invisible_chunks(draw, caller: labsrc.Caller, on_date: dt.date):
    """Chunks this caller cannot see, each blocked for a drawn reason."""
    hidden = []
    for i in range(draw(st.integers(1, 6))):
        reason = draw(st.sampled_from(["region", "acl", "expired", "future"]))
        region = draw(st.sampled_from(REGIONS))
        tag = draw(st.sampled_from(TAGS))
        start, end = on_date - dt.timedelta(days=30), None
        if reason == "region":
            region = draw(st.sampled_from([r for r in REGIONS if r != caller.region] + ["MARS"]))
        elif reason == "acl":
            tag = draw(st.sampled_from([t for t in TAGS if t not in caller.acl_tags] + ["secret:x"]))
        elif reason == "expired":
            end = on_date - dt.timedelta(days=draw(st.integers(1, 100)))
            start = end - dt.timedelta(days=10)
        else:
            start = on_date + dt.timedelta(days=draw(st.integers(1, 100)))
        hidden.append(
            labsrc.PolicyChunk(
                chunk_id=f"hidden-{i:02d}",
                document_id="secret-doc",
                parent_id="secret",
                version="secret/1",
                region=region,
                acl_tag=tag,
                effective_from=start,
                effective_to=end,
                text=f"{draw(texts)} hidden secret text {i}",
            )
        )
    return hidden
