"""Permitted Recall@k at several k, for the curves a design review compares: one run, every lane it reports.

With ``recall_at=(1, 2, 5, 10)`` (``labsrc gate --recall-at 1,2,5,10``) the plan asks every
positive case once more at each k other than the config's ``top_k``, on the main build
(the ``recall`` phase of :mod:`~labsrc.gate.plan`); at ``top_k`` the case's own answer
serves. Each k is its own request, so a retriever whose ranking depends on the depth it is
asked at (RRF over lanes cut at ``top_k``) is measured as it answers, never as a prefix of
a deeper list.

Recall@k of a case in a lane is ``|expected ∩ lane[:k]| / |expected|`` (Manning, Raghavan
& Schütze 2008, §8.3), and a point of the curve is its mean over the positive cases. Every
point averages the same cases: a case that raised at any k is left out of every point and
named in :attr:`RecallCurve.errors` (and in the ``search errors`` gate). A retriever that
returns only its fused list has one curve, ``hybrid``.

The curves are measurements, never gates: the gate's thresholds are ``min_recall`` at ``top_k``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from labsrc.errors import InvalidArgument
from labsrc.evaluation.metrics import recall_at_k
from labsrc.evaluation.subject import Observation
from labsrc.gate.lane_rules import measured_lanes
from labsrc.gate.outcomes import CaseOutcome

__all__ = ["MAX_RECALL_AT", "RecallCurve", "check_recall_at", "parse_recall_at", "recall_curve", "recall_key"]

#: The most k values one run measures (each is one more request per positive case).
MAX_RECALL_AT = 20
#: The deepest k: a Recall@k deeper than this is a retrieval benchmark's job (``labsrc beir``), not a gate's.
MAX_K = 10_000


def check_recall_at(values: object) -> tuple[int, ...]:
    """``values`` as sorted, distinct k (each a whole number from 1 to :data:`MAX_K`), or :class:`InvalidArgument`."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise InvalidArgument(f"recall_at must be a list of whole numbers k >= 1, not {values!r}")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_K:
            raise InvalidArgument(f"recall_at: each k must be a whole number from 1 to {MAX_K:,}, not {value!r}")
    ks = tuple(sorted(set(values)))
    if len(ks) > MAX_RECALL_AT:
        raise InvalidArgument(f"recall_at: at most {MAX_RECALL_AT} values of k, got {len(ks)}")
    return ks


def parse_recall_at(text: str) -> tuple[int, ...]:
    """``"1,2,5,10"`` → ``(1, 2, 5, 10)`` (the ``--recall-at`` option); a bad list names the bad part."""
    parts = [part.strip() for part in text.split(",")]
    values = []
    for part in parts:
        try:
            values.append(int(part))
        except ValueError:
            raise InvalidArgument(f"--recall-at: expected whole numbers joined by commas (1,2,5,10); "
                                  f"{part!r} in {text!r} is not one") from None
    try:
        return check_recall_at(values)
    except InvalidArgument as exc:
        raise InvalidArgument(f"--{exc}".replace("recall_at", "recall-at", 1)) from None


def recall_key(index: int, k: int) -> str:
    """The plan's key of positive case ``index`` asked at ``k``."""
    return f"recall {index} at {k}"


@dataclass(frozen=True)
class RecallCurve:
    """Mean permitted Recall@k per lane at each k of ``ks``, over ``cases`` (the positive cases that answered).

    ``per_case`` maps each counted case's name to ``{lane: (recall at each k)}``; ``errors`` names each
    case left out and why; ``top_k`` is the config's (its point is the gate's own recall).
    """

    ks: tuple[int, ...]
    lanes: tuple[str, ...]
    per_case: Mapping[str, Mapping[str, tuple[float, ...]]]
    top_k: int
    errors: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "per_case", MappingProxyType(
            {name: MappingProxyType({lane: tuple(v) for lane, v in lanes.items()}) for name, lanes in self.per_case.items()}))

    @property
    def cases(self) -> int:
        return len(self.per_case)

    def means(self) -> dict[str, tuple[float, ...]]:
        """Each lane's mean Recall@k at each k (0.0 everywhere when no case counted)."""
        n = len(self.per_case)
        return {lane: tuple(sum(c[lane][i] for c in self.per_case.values()) / n if n else 0.0
                            for i in range(len(self.ks))) for lane in self.lanes}

    def to_dict(self) -> dict[str, Any]:
        return {"k": list(self.ks), "top_k": self.top_k, "cases": self.cases,
                "lanes": {lane: list(values) for lane, values in self.means().items()},
                "per_case": {name: {lane: list(v) for lane, v in lanes.items()} for name, lanes in self.per_case.items()},
                "errors": list(self.errors)}


def recall_curve(ks: Sequence[int], outcomes: Sequence[CaseOutcome], got: Mapping[str, Observation],
                 top_k: int) -> RecallCurve:
    """The curve from a run's answers: ``got`` holds :func:`recall_key` answers; at ``top_k`` each outcome's own."""
    lanes = measured_lanes(outcomes)
    per_case: dict[str, dict[str, tuple[float, ...]]] = {}
    errors: list[str] = []
    for i, o in enumerate(outcomes):
        if o.case.kind != "positive":
            continue
        if o.error:
            errors.append(f"case {o.case.name!r}: left out, its search at top_k raised ({o.error})")
            continue
        ranked: dict[int, Mapping[str, Sequence[str]]] = {}
        for k in ks:
            if k == top_k:
                ranked[k] = o.ids
                continue
            answer = got.get(recall_key(i, k))
            if answer is None or answer.error:
                why = "was not asked" if answer is None else f"raised {answer.error}"
                errors.append(f"case {o.case.name!r}: left out, its search at k={k} {why}")
                break
            ranked[k] = {lane: answer.ids(lane) for lane in lanes}
        else:
            per_case[o.case.name] = {lane: tuple(recall_at_k(ranked[k][lane], o.case.expected, k) for k in ks)
                                     for lane in lanes}
    return RecallCurve(tuple(ks), tuple(lanes), per_case, top_k, tuple(errors))
