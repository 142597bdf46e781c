"""A run's generated probes as plain data: each request, and the plan's coverage line and report record.

:mod:`~labsrc.gate.generate` makes the plan up; :mod:`~labsrc.gate.generated` judges what it asked.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any

from labsrc.gate.config import DEFAULT_PROBE_BUDGET, PROBE_TIERS
from labsrc.gate.verdicts import plural

__all__ = ["FAMILIES", "TIER_LABELS", "GeneratedRequest", "ProbePlan"]

#: The families of generated requests, in report order, with what each asks.
FAMILIES: Mapping[str, str] = MappingProxyType(
    {
        "cross-caller": "every case's query as every caller, on every case date, one caller right after another",
        "hidden-chunk": "a hidden chunk's own code and rarest terms, asked as a caller it is hidden from",
        "boundary-date": "a version's own text on its first and last effective day and the day either side",
    }
)
#: How the coverage line names each tier of :data:`~labsrc.gate.config.PROBE_TIERS`.
TIER_LABELS: Mapping[str, str] = MappingProxyType(
    {"sibling": "siblings", "shared": "sharing a code or rare term", "rest": "the rest"})


def _counted(count: int, noun: str) -> str:
    """``1 request``, ``1,600 requests``: :func:`~labsrc.gate.verdicts.plural` with thousands separated."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def _percent(share: float) -> str:
    """``0.04%``, ``33.3%``, ``100%``: three significant digits, so a small share never prints as 0."""
    return f"{100 * share:.3g}%"


@dataclass(frozen=True)
class GeneratedRequest:
    """One request the gate made up: who asks what on which date, which chunk it aims at, and why.

    ``tier`` is a hidden-chunk target's tier (:data:`~labsrc.gate.config.PROBE_TIERS`); ``top_k`` the
    depth it is asked at (``None``: the run's ``top_k``); ``deep`` marks a probe's second request, at
    :func:`~labsrc.gate.config.deep_top_k`.
    """

    family: str
    caller: str
    on_date: dt.date
    query: str
    target: str | None = None
    why: str = ""
    shown: str | None = None  # how reports show the query when it is words of a hidden chunk
    tier: str | None = None
    top_k: int | None = None
    deep: bool = False

    @property
    def printable(self) -> bool:
        """Whether reports may show the query as it is (a case's query, a code), not only by reference."""
        return self.shown is None

    def describe(self) -> str:
        """``hidden-chunk probe (code of 'x'): as 'bob' on 2026-06-15, query 'CD-12'``; a deep request says its k."""
        why = f" ({self.why})" if self.why else ""
        query = repr(self.query) if self.shown is None else self.shown
        depth = f" at top_k {self.top_k} (deep)" if self.deep else ""
        return f"{self.family} probe{why}: as {self.caller!r} on {self.on_date}{depth}, query {query}"

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "caller": self.caller, "on_date": self.on_date.isoformat(),
                "query": self.query if self.shown is None else self.shown, "target": self.target, "why": self.why,
                "tier": self.tier, "top_k": self.top_k, "deep": self.deep}


@dataclass(frozen=True)
class ProbePlan:
    """The generated probes of one run, and what they cover.

    ``requests`` holds the probes the budget kept, in the order they run; :attr:`asked` is what the
    run asks: every probe at each of ``depths`` (all at the first, then all at the second), or each
    once at the run's ``top_k`` when ``depths`` is empty. ``planned`` counts each family's probes
    before the budget. ``callers_without_case`` names callers of the file that no case asks as.
    ``tiers`` counts the (caller, hidden chunk, date) triples of each tier over the case dates, each
    a target of the hidden-chunk family (``hidden_pairs``: all of them); a hidden chunk with no
    attack query (no code, no term) is no target. ``min_coverage`` is the floor on each tier's share
    attacked (:meth:`below_floor`); ``sized_from`` the number of stored chunks an ``"auto"`` budget
    was sized from.
    """

    requests: tuple[GeneratedRequest, ...]
    budget: int
    seed: int
    planned: Mapping[str, int]
    callers: tuple[str, ...]
    callers_without_case: tuple[str, ...]
    hidden_pairs: int = 0
    dates: tuple[dt.date, ...] = field(default=())
    tiers: Mapping[str, int] = field(default_factory=dict)
    depths: tuple[int, ...] = ()
    min_coverage: Mapping[str, float] | None = None
    sized_from: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "requests", tuple(self.requests))
        object.__setattr__(self, "planned", MappingProxyType(dict(self.planned)))
        object.__setattr__(self, "tiers", MappingProxyType(dict(self.tiers)))
        object.__setattr__(self, "depths", tuple(self.depths))
        if self.min_coverage is not None:
            object.__setattr__(self, "min_coverage", MappingProxyType(dict(self.min_coverage)))

    @cached_property
    def asked(self) -> tuple[GeneratedRequest, ...]:
        """The requests the run asks, in order: every probe at the first depth, then every probe at the next."""
        if not self.depths:
            return self.requests
        return tuple(replace(r, top_k=k, deep=n > 0) for n, k in enumerate(self.depths) for r in self.requests)

    def kept(self) -> dict[str, int]:
        counts = {family: 0 for family in FAMILIES}
        for request in self.requests:
            counts[request.family] += 1
        return counts

    def left_out(self) -> dict[str, int]:
        """Planned probes the budget left out, per family (only families that lost some)."""
        kept = self.kept()
        return {f: self.planned.get(f, 0) - kept[f] for f in FAMILIES if self.planned.get(f, 0) > kept[f]}

    @property
    def callers_probed(self) -> tuple[str, ...]:
        return tuple(sorted({r.caller for r in self.requests}))

    @property
    def hidden_attacked(self) -> int:
        """Distinct (caller, chunk, date) the hidden-chunk family asked about (:attr:`hidden_pairs` counts them all)."""
        return len({(r.caller, r.target, r.on_date) for r in self.requests if r.family == "hidden-chunk"})

    def attacked(self) -> dict[str, int]:
        """Distinct (caller, chunk, date) the hidden-chunk family asked about, per tier."""
        seen: dict[str, set[tuple[str, str | None, dt.date]]] = {tier: set() for tier in PROBE_TIERS}
        for r in self.requests:
            if r.family == "hidden-chunk" and r.tier in seen:
                seen[r.tier].add((r.caller, r.target, r.on_date))
        return {tier: len(triples) for tier, triples in seen.items()}

    def shares(self) -> dict[str, float]:
        """Each tier's share attacked: attacked / targets (1.0 for a tier with no target: nothing was left)."""
        attacked = self.attacked()
        return {tier: attacked[tier] / self.tiers[tier] if self.tiers.get(tier) else 1.0 for tier in PROBE_TIERS}

    def below_floor(self) -> list[tuple[str, float, float]]:
        """``(tier, share, floor)`` for every tier whose share attacked is below ``min_coverage``, in tier order."""
        if not self.min_coverage:
            return []
        shares = self.shares()
        return [(tier, shares[tier], floor) for tier, floor in self.min_coverage.items() if shares[tier] < floor]

    def floor_findings(self) -> tuple[str, ...]:
        """One line per tier below its floor, naming the tier, its share attacked and the floor."""
        attacked = self.attacked()
        return tuple(f"coverage of the hidden chunks, {TIER_LABELS[tier]}: {attacked[tier]:,} of "
                     f"{self.tiers.get(tier, 0):,} (caller, chunk, date) attacked ({_percent(share)}), below "
                     f"min_coverage {_percent(floor)}; raise probe_budget or lower the floor"
                     for tier, share, floor in self.below_floor())

    @property
    def dates_tried(self) -> tuple[dt.date, ...]:
        return tuple(sorted({r.on_date for r in self.requests}))

    def coverage(self) -> str:
        """One line: what was probed, each tier's share, and what the budget left out."""
        count = len(self.requests)
        budget = f"budget {self.budget:,}"
        if self.sized_from is not None and self.budget != DEFAULT_PROBE_BUDGET:
            budget += f" for {self.sized_from:,} chunks"
        if self.depths:
            head = (f"{_counted(count, 'generated probe')} at top_k {' and '.join(map(str, self.depths))} "
                    f"({_counted(len(self.asked), 'request')}; {budget}, seed {self.seed})")
        else:
            head = f"{plural(count, 'generated request')} ({budget}, seed {self.seed})"
        line = f"{head}: {len(self.callers_probed)} of {plural(len(self.callers), 'caller')} probed, "
        if self.tiers:
            attacked = self.attacked()
            line += ("hidden chunks attacked (per caller and date): "
                     + ", ".join(f"{TIER_LABELS[t]} {attacked[t]:,} of {self.tiers.get(t, 0):,}" for t in PROBE_TIERS)
                     + f"; {plural(len(self.dates_tried), 'date')} tried")
        else:
            line += (f"{self.hidden_attacked} of {self.hidden_pairs} hidden chunks attacked (per caller and date), "
                     f"{plural(len(self.dates_tried), 'date')} tried")
        left = self.left_out()
        if left:
            line += "; left out by the budget: " + ", ".join(f"{n:,} {family}" for family, n in left.items())
        if self.callers_without_case:
            line += f"; callers no case asks as: {', '.join(self.callers_without_case)}"
        short = self.below_floor()
        if short:
            line += "; below min_coverage: " + ", ".join(f"{TIER_LABELS[t]} {_percent(s)} < {_percent(f)}"
                                                        for t, s, f in short)
        return line

    def to_dict(self) -> dict[str, Any]:
        attacked, shares = self.attacked(), self.shares()
        return {
            "budget": self.budget, "seed": self.seed, "sized_from": self.sized_from, "probes": len(self.requests),
            "depths": list(self.depths), "requests": len(self.asked),
            "planned": dict(self.planned), "kept": self.kept(), "left_out": self.left_out(),
            "callers": list(self.callers), "callers_probed": list(self.callers_probed),
            "callers_without_case": list(self.callers_without_case),
            "hidden_pairs": self.hidden_pairs, "hidden_attacked": self.hidden_attacked,
            "tiers": {t: {"targets": self.tiers.get(t, 0), "attacked": attacked[t], "share": shares[t]}
                      for t in PROBE_TIERS} if self.tiers else {},
            "min_coverage": None if self.min_coverage is None else dict(self.min_coverage),
            "below_min_coverage": [{"tier": t, "share": s, "floor": f} for t, s, f in self.below_floor()],
            "dates_tried": [d.isoformat() for d in self.dates_tried], "coverage": self.coverage(),
        }

