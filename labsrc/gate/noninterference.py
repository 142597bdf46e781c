"""Noninterference, checked on any retriever: the boundary on every id, a rebuild, and bait.

Notebook 05 states the property: what a caller observes depends only on the
chunks that caller may see. Three checks test it from outside the retriever:

* **Every returned id** (:func:`boundary_violations`): each id any lane or the
  fused list returns, at ``top_k`` and at probe depth, is asked of the boundary
  for the case's caller and date. A hidden id is a violation, with its rank and
  the reasons (restricted, superseded, not yet effective, wrong region). This
  needs no case to name the id as forbidden.
* **Rebuild** (:func:`compare_observations` against a build over the caller's
  permitted chunks only): the same query must give the same ids, order and
  scores. A post-filtering retriever fails here even when its ids are right:
  its lists come back short, or its BM25 statistics counted hidden chunks.
* **Bait** (the same comparison against a build with
  :mod:`~labsrc.gate.bait` chunks added): a hidden chunk made to win must
  not appear, and must not move a score.

``mode`` (:data:`NONINTERFERENCE_MODES`) says how strict the comparison is.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from labsrc.boundary import BlockReason, block_reasons
from labsrc.evaluation.subject import OBSERVED_LANES, Observation
from labsrc.records.policy import Caller, PolicyChunk

__all__ = [
    "NONINTERFERENCE_MODES",
    "Comparison",
    "FieldDiff",
    "LaneDiff",
    "Violation",
    "boundary_violations",
    "compare_observations",
    "marked_fields",
    "own_text_note",
    "payload_diffs",
    "without_fields",
    "reason_detail",
    "reason_label",
]

#: How a rebuild or bait comparison decides "the same".
NONINTERFERENCE_MODES: Mapping[str, str] = MappingProxyType(
    {
        "exact": "ids, order and scores equal (==), lane by lane, and the trace (the default)",
        "ids": "ids and order equal, scores not compared (engines whose scores are not reproducible)",
        "off": "no rebuild and no bait probes",
    }
)

#: Lane names as a reader says them.
_LANE_LABEL = {"hybrid": "the fused list", "bm25": "the bm25 lane", "dense": "the dense lane"}

_UNKNOWN = "not a stored chunk"


def reason_label(reason: str) -> str:
    """``not_yet_effective`` → ``not yet effective``."""
    return reason.replace("_", " ")


@dataclass(frozen=True)
class Violation:
    """A returned id the boundary hides from the case's caller on its date."""

    case: str
    chunk_id: str
    lane: str
    rank: int
    reasons: tuple[str, ...]
    probe: bool = False
    details: tuple[str, ...] = ()
    where: str = ""

    def describe(self) -> str:
        """``case 'c': 'x' at rank 2 of the fused list: not yet effective: takes effect 2026-09-01``.

        ``where`` names the build or probe that returned it, when it was not the case's own replay
        (the bait build, concurrent requests).
        """
        rank = f"rank {self.rank} of {_LANE_LABEL.get(self.lane, self.lane)}" + (" (probe at full depth)" if self.probe else "")
        if self.where:
            rank += f" {self.where}"
        return f"case {self.case!r}: {self.chunk_id!r} at {rank}: {', '.join(self.details or self.reasons)}"

    def to_dict(self) -> dict[str, object]:
        return {"chunk_id": self.chunk_id, "lane": self.lane, "rank": self.rank, "reasons": list(self.reasons),
                "details": list(self.details or self.reasons), "probe": self.probe, "where": self.where}


def reason_detail(reason: BlockReason, chunk: PolicyChunk) -> str:
    """The rule a chunk breaks, with the date when a date is the reason: ``not yet effective: takes effect 2026-09-16``."""
    label = reason_label(reason.value)
    if reason is BlockReason.NOT_YET_EFFECTIVE:
        return f"{label}: takes effect {chunk.effective_from.isoformat()}"
    if reason is BlockReason.SUPERSEDED and chunk.effective_to is not None:
        return f"{label}: ended {chunk.effective_to.isoformat()}"
    return label


def boundary_violations(
    case: str,
    observation: Observation,
    caller: Caller,
    on_date: dt.date,
    stored: Mapping[str, PolicyChunk],
    *,
    probe: bool = False,
    where: str = "",
) -> tuple[Violation, ...]:
    """Every id in ``observation`` that ``caller`` may not see on ``on_date`` (or that is not stored).

    ``where`` is carried into each :class:`Violation` (which build or probe returned it).
    """
    found = []
    for lane in OBSERVED_LANES:
        for rank, chunk_id in enumerate(observation.ids(lane), start=1):
            chunk = stored.get(chunk_id)
            if chunk is None:
                reasons: tuple[str, ...] = (_UNKNOWN,)
                details: tuple[str, ...] = reasons
            else:
                blocked = block_reasons(caller, chunk, on_date)
                reasons = tuple(reason_label(r.value) for r in blocked)
                details = tuple(reason_detail(r, chunk) for r in blocked)
            if reasons:
                found.append(Violation(case, chunk_id, lane, rank, reasons, probe, details, where))
    return tuple(found)


@dataclass(frozen=True)
class LaneDiff:
    """How one lane's list differs from the reference (the build the caller's results must equal).

    ``missing``: ids the reference returns and the subject does not (a short list
    when the subject returned fewer); ``extra``: ids only the subject returns;
    ``order_differs``: the ids both return come in another order;
    ``max_score_diff``: the largest ``|score - reference score|`` over ids both return.
    """

    lane: str
    missing: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    order_differs: bool = False
    max_score_diff: float = 0.0
    returned: int = 0
    expected: int = 0

    def differs(self, mode: str) -> bool:
        ids = bool(self.missing or self.extra or self.order_differs)
        return ids or (mode == "exact" and self.max_score_diff != 0.0)

    def describe(self, mode: str) -> str:
        parts = []
        if self.missing:
            short = " (a short list)" if self.returned < self.expected else ""
            parts.append(f"missing {list(self.missing)}{short}")
        if self.extra:
            parts.append(f"extra {list(self.extra)}")
        if self.order_differs:
            parts.append("order differs")
        if mode == "exact" and self.max_score_diff != 0.0:
            parts.append(f"scores differ by up to {self.max_score_diff:.6g}")
        return f"{self.lane}: " + ", ".join(parts)


def _lane_diff(lane: str, reference: Sequence[tuple[str, float]], observed: Sequence[tuple[str, float]]) -> LaneDiff:
    ref_ids = [i for i, _ in reference]
    obs_ids = [i for i, _ in observed]
    ref_scores, obs_scores = dict(reference), dict(observed)
    common = [i for i in ref_ids if i in obs_scores]
    diff = max((abs(obs_scores[i] - ref_scores[i]) for i in common), default=0.0)
    return LaneDiff(
        lane,
        missing=tuple(i for i in ref_ids if i not in obs_scores),
        extra=tuple(i for i in obs_ids if i not in ref_scores),
        order_differs=common != [i for i in obs_ids if i in ref_scores],
        max_score_diff=float(diff),
        returned=len(obs_ids),
        expected=len(ref_ids),
    )


_ABSENT: object = object()


def _shown(value: object) -> str:
    """A payload value as a finding prints it: text by its length only (it may be what must not leak)."""
    if value is _ABSENT:
        return "absent"
    if isinstance(value, str):
        return f"{len(value)} chars"
    return repr(value)


def own_text_note(value: object, chunk: PolicyChunk | None) -> str:
    """How a text field relates to the chunk's own stored text: the finding names a field that is not it."""
    if not isinstance(value, str) or chunk is None or not value:
        return ""
    if value == chunk.text:
        return "the chunk's own stored text"
    if value in chunk.text:
        return "a part of the chunk's own stored text"
    return f"not the chunk's own stored text ({len(chunk.text)} chars) or a part of it"


@dataclass(frozen=True)
class FieldDiff:
    """One payload field of one result that differs from the reference (:func:`payload_diffs`)."""

    chunk_id: str
    field: str
    observed: str
    reference: str
    note: str = ""

    def describe(self, reference: str) -> str:
        note = f"; it is {self.note}" if self.note else ""
        return (f"field {self.field!r} of {self.chunk_id!r} differs: {self.observed} against {self.reference} on "
                f"the {reference}{note}")


def payload_diffs(reference: Observation, observed: Observation, *, ignore: Collection[str] = (),
                  stored: Mapping[str, PolicyChunk] | None = None) -> tuple[FieldDiff, ...]:
    """Every payload field that differs, for every chunk both fused lists return (``ignore``: fields not compared).

    Exact, and blind to meaning: a field present on one side only differs too. ``stored`` lets a
    text field be named as the chunk's own stored text, or not.
    """
    out = []
    for chunk_id in observed.ids("hybrid"):
        if chunk_id not in reference.ids("hybrid"):
            continue
        ours, theirs = observed.fields(chunk_id), reference.fields(chunk_id)
        for name in sorted(set(ours) | set(theirs)):
            if name in ignore:
                continue
            a, b = ours.get(name, _ABSENT), theirs.get(name, _ABSENT)
            if a is _ABSENT and b is _ABSENT or (a is not _ABSENT and b is not _ABSENT and type(a) is type(b) and a == b):
                continue
            note = own_text_note(a, (stored or {}).get(chunk_id))
            out.append(FieldDiff(chunk_id, name, _shown(a), _shown(b), note))
    return tuple(out)


def marked_fields(observed: Observation, markers: Mapping[str, str]) -> tuple[str, ...]:
    """Payload text carrying a bait chunk's marker word: ``field 'text' of 'x' carries 'bait-001-restricted''s text``."""
    found = []
    for (chunk_id, _), fields in zip(observed.lanes["hybrid"], observed.payload):
        for name, value in fields:
            if isinstance(value, str):
                low = value.lower()
                found += [f"field {name!r} of {chunk_id!r} carries {bait!r}'s text"
                          for marker, bait in sorted(markers.items()) if marker in low]
    return tuple(found)


def without_fields(observation: Observation, names: Collection[str]) -> Observation:
    """``observation`` with the payload fields in ``names`` left out (noise, not compared)."""
    if not names or not observation.payload:
        return observation
    payload = tuple(tuple((k, v) for k, v in fields if k not in names) for fields in observation.payload)
    return replace(observation, payload=payload)


#: How many payload differences a finding prints; report.json keeps them all.
SHOWN_FIELDS = 3


@dataclass(frozen=True)
class Comparison:
    """One case replayed on a second build (``rebuild`` or ``bait``) against the caller's reference.

    ``error`` is set when the second build or its search failed, so nothing could be compared;
    ``bait_returned`` lists bait ids the subject returned (any lane, any rank). ``skipped`` says
    why the case was deliberately not compared (its ids are not reproducible between two builds
    of the same chunks): it neither differs nor counts as compared.
    """

    kind: str
    mode: str
    lanes: tuple[LaneDiff, ...] = ()
    trace_differs: bool = False
    error: str | None = None
    bait_returned: tuple[str, ...] = ()
    skipped: str | None = None
    fields: tuple[FieldDiff, ...] = ()
    bait_text: tuple[str, ...] = ()

    @property
    def compared(self) -> bool:
        return self.skipped is None

    @property
    def differs(self) -> bool:
        if self.skipped is not None:
            return False
        return bool(
            self.error
            or self.bait_returned
            or self.bait_text
            or self.fields
            or any(d.differs(self.mode) for d in self.lanes)
            or (self.mode == "exact" and self.trace_differs)
        )

    @property
    def max_score_diff(self) -> float:
        return max((d.max_score_diff for d in self.lanes), default=0.0)

    def describe(self) -> str:
        """One line: what differs, or ``"same"``."""
        if self.skipped is not None:
            return f"not compared: {self.skipped}"
        if self.error:
            return f"not compared: {self.error}"
        parts = []
        if self.bait_returned:
            parts.append(f"bait returned: {list(self.bait_returned)}")
        parts += list(self.bait_text)
        parts += [d.describe(self.mode) for d in self.lanes if d.differs(self.mode)]
        if self.fields:
            reference = _SIDE.get(self.kind, {}).get("reference", "reference")
            parts += [f.describe(reference) for f in self.fields[:SHOWN_FIELDS]]
            if len(self.fields) > SHOWN_FIELDS:
                parts.append(f"{len(self.fields) - SHOWN_FIELDS} more fields differ")
        if self.mode == "exact" and self.trace_differs and not parts:
            parts.append("the trace differs")
        return "; ".join(parts) or "same"

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "mode": self.mode,
            "differs": self.differs,
            "detail": self.describe(),
            "error": self.error,
            "bait_returned": list(self.bait_returned),
            "bait_text": list(self.bait_text),
            "fields": [{"chunk_id": f.chunk_id, "field": f.field, "observed": f.observed, "reference": f.reference,
                        "note": f.note} for f in self.fields],
            "skipped": self.skipped,
            "max_score_diff": self.max_score_diff,
            "lanes": {
                d.lane: {"missing": list(d.missing), "extra": list(d.extra), "order_differs": d.order_differs,
                         "max_score_diff": d.max_score_diff, "returned": d.returned, "expected": d.expected}
                for d in self.lanes
            },
        }


def compare_observations(
    reference: Observation, observed: Observation, *, kind: str, mode: str = "exact",
    bait_ids: frozenset[str] = frozenset(), ignore_fields: Collection[str] = (),
    stored: Mapping[str, PolicyChunk] | None = None, bait_markers: Mapping[str, str] | None = None,
) -> Comparison:
    """How ``observed`` (the subject's answer on the full store) differs from ``reference``.

    For ``kind="rebuild"`` the reference is the build over the caller's permitted
    chunks only; for ``kind="bait"`` the *observed* side is the build with bait
    added and the reference is the full store. Lanes are compared when both
    report them; the fused list always, with every result's payload (the text and
    metadata it hands on), in every mode, but the fields in ``ignore_fields``
    (those that differ between two builds of the same chunks). ``bait_markers``
    (marker word to bait id) finds payload text carrying a bait chunk's own text.
    """
    for side, obs in (("reference", reference), ("observed", observed)):
        if obs.error:
            return Comparison(kind, mode, error=f"the {_SIDE[kind][side]} raised {obs.error}")
    lanes = ("bm25", "dense", "hybrid") if reference.lanes_reported and observed.lanes_reported else ("hybrid",)
    diffs = tuple(_lane_diff(lane, reference.lanes[lane], observed.lanes[lane]) for lane in lanes)
    returned = {i for lane in OBSERVED_LANES for i in observed.ids(lane)}
    trace_differs = reference.trace is not None and observed.trace is not None and dict(reference.trace) != dict(observed.trace)
    return Comparison(kind, mode, diffs, trace_differs, bait_returned=tuple(sorted(returned & bait_ids)),
                      fields=payload_diffs(reference, observed, ignore=ignore_fields, stored=stored),
                      bait_text=marked_fields(observed, bait_markers or {}))


_SIDE = {
    "rebuild": {"reference": "build over the permitted chunks only", "observed": "full build"},
    "bait": {"reference": "full build", "observed": "build with bait"},
    "repeat": {"reference": "first build", "observed": "second build"},
    "concurrency": {"reference": "case replayed alone", "observed": "case under concurrent requests"},
}
