"""The lane gates: permitted Recall@k per lane, and the fused list against each lane.

These are the gates that read a retriever's lanes. A retriever that returns only
its fused list (``(chunk_id, score)`` pairs, a LangChain ``Document`` list) reports
no lane, so its run makes only the gates it can measure:

=================================  ==========================================================
gate                               a fused-list-only run
=================================  ==========================================================
``recall@k hybrid``                made: the fused list is what the caller gets
``recall@k bm25`` / ``dense``      not made, unless ``min_recall`` names the lane: then it is
                                   made and fails the run (the config requires what the
                                   retriever does not report)
``hybrid >= each lane``            not made under ``at_least``; under ``strict`` made and fails
                                   (fusion cannot be shown to add what no lane was measured
                                   finding); ``off``: never made
=================================  ==========================================================

A gate not made neither passes nor fails: :func:`omitted_gates` names each with
the reason, and every report and pytest item says it. So ``require_cases`` (which
fails a gate with no case to replay) stays on for a fused-list retriever.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from labsrc.evaluation.metrics import recall_at_k
from labsrc.gate.config import LANES, GateConfig
from labsrc.gate.outcomes import CaseOutcome
from labsrc.gate.probe_rules import no_answer
from labsrc.gate.verdicts import GateResult, not_tested, plural

__all__ = ["FUSED_ONLY", "lane_gate_names", "lane_gates", "lanes_reported", "measured_lanes", "omitted_gates"]

#: Why a lane gate is not made, or cannot be measured, for a retriever that returns only its fused list.
FUSED_ONLY = "the retriever returns only its fused list, so its lanes cannot be measured"


def _lane_gates(config: GateConfig) -> tuple[tuple[str, str | None, str | None], ...]:
    """``(name, lane, off)`` per lane gate, in the table's order: ``lane`` is the recall gate's lane, or ``None``
    for the fused list against each lane; ``off`` the setting that turns the gate off, or ``None``."""
    gates: list[tuple[str, str | None, str | None]] = [(f"recall@{config.top_k} {lane}", lane, None) for lane in LANES]
    if config.hybrid_rule == "off":
        gates.append(("hybrid vs each lane", None, "hybrid_rule is 'off' in the gate config"))
    else:
        gates.append((f"hybrid {'>' if config.hybrid_rule == 'strict' else '>='} each lane", None, None))
    return tuple(gates)


def lane_gate_names(config: GateConfig) -> tuple[tuple[str, str | None], ...]:
    """The lane gates in the table's order, each with ``None`` or the setting that turns it off."""
    return tuple((name, off) for name, _, off in _lane_gates(config))


def lanes_reported(outcomes: Sequence[CaseOutcome]) -> bool:
    """Did the retriever report its lanes (a ``RetrievalResult``), or only its fused list? (A case that raised
    says nothing either way.)"""
    return all(o.lanes_reported for o in outcomes)


def measured_lanes(outcomes: Sequence[CaseOutcome]) -> tuple[str, ...]:
    """The lanes a run measured: every lane, ``("hybrid",)`` for a retriever that returns only its fused list,
    or none when no case was asked (the main build failed)."""
    if not outcomes:
        return ()
    return LANES if lanes_reported(outcomes) else ("hybrid",)


def _made_without_lanes(lane: str | None, config: GateConfig) -> bool:
    """Does a fused-list-only run still make this lane gate? Only the fused list's own recall, or a gate the
    config requires: a lane's ``min_recall``, or a ``strict`` hybrid rule (``lane`` None: the hybrid gate)."""
    if lane is not None:
        return lane == "hybrid" or lane in config.min_recall
    return config.hybrid_rule == "strict"


def omitted_gates(outcomes: Sequence[CaseOutcome], config: GateConfig) -> tuple[tuple[str, str], ...]:
    """The lane gates a run does not make, each with the reason (see the module's table)."""
    if not outcomes or lanes_reported(outcomes):
        return ()
    return tuple((name, FUSED_ONLY) for name, lane, off in _lane_gates(config)
                 if off is None and not _made_without_lanes(lane, config))


def _recall_gate(name: str, lane: str, positives: Sequence[CaseOutcome], recall: Mapping[str, float],
                 config: GateConfig) -> GateResult:
    k = config.top_k
    threshold = config.min_recall.get(lane)
    passed = threshold is None or recall[lane] >= threshold
    bound = "reported only" if threshold is None else f">= {threshold:.2f}"
    detail = f"{recall[lane]:.2f} ({bound}; {plural(len(positives), 'positive case')})"
    failing = tuple(o.case.name for o in positives if recall_at_k(o.ids[lane], o.case.expected, k) < 1.0) \
        if not passed else ()
    findings = tuple(
        f"case {o.case.name!r}: {[e for e in o.case.expected if e not in o.ids[lane][:k]]} not in {lane}'s top {k} "
        f"(it returned {list(o.ids[lane][:k])})"
        for o in positives if o.case.name in failing
    )
    return GateResult(name, passed, detail, failing, family="recall", findings=findings)


def _hybrid_gate(name: str, positives: Sequence[CaseOutcome], recall: Mapping[str, float], rule: str,
                 k: int) -> GateResult:
    """Fusion against each lane on mean Recall@k. A failure names each case where a lane found an expected id
    that the fused top k lost; under ``strict`` with no such case (fusion only tied), the lane it added nothing over."""
    lanes = [lane for lane in LANES if lane != "hybrid"]
    if rule == "strict":
        behind = [lane for lane in lanes if not recall["hybrid"] > recall[lane]]
    else:
        behind = [lane for lane in lanes if not recall["hybrid"] >= recall[lane]]
    detail = f"hybrid {recall['hybrid']:.2f} vs " + ", ".join(f"{lane} {recall[lane]:.2f}" for lane in lanes)
    if not behind:
        return GateResult(name, True, detail, family="hybrid")
    failing: list[str] = []
    findings: list[str] = []
    for o in positives:
        fused = set(o.ids["hybrid"][:k])
        for lane in lanes:
            lost = [e for e in o.case.expected if e in o.ids[lane][:k] and e not in fused]
            if lost:
                findings.append(f"case {o.case.name!r}: {lane} found {lost} in its top {k}; the fused list lost "
                                f"{'it' if len(lost) == 1 else 'them'} (it returned {list(o.ids['hybrid'][:k])})")
                if o.case.name not in failing:
                    failing.append(o.case.name)
    if not findings:
        findings = [f"no positive case where the fused list finds an expected id that {lane} misses: fusion adds "
                    f"nothing over {lane}, and hybrid_rule 'strict' asks that it does" for lane in behind]
    return GateResult(name, False, detail, tuple(failing), family="hybrid", findings=tuple(findings))


def lane_gates(outcomes: Sequence[CaseOutcome], config: GateConfig, recall: Mapping[str, float]) -> list[GateResult]:
    """Every lane gate the run makes (not those :func:`omitted_gates` names), in the table's order."""
    positives = [o for o in outcomes if o.case.kind == "positive"]
    answered = [o for o in positives if not o.error]
    omitted = {name for name, _ in omitted_gates(outcomes, config)}
    reported = lanes_reported(outcomes)
    no_positive_answer = (f"not tested: {no_answer(len(positives), 'positive case')}, so no recall was measured "
                          "(see 'search errors')")
    results = []
    for name, lane, off in _lane_gates(config):
        if off is not None or name in omitted:
            continue
        family = "recall" if lane is not None else "hybrid"
        if not positives:
            results.append(not_tested(name, family, "positive cases", config))
        elif not answered:
            results.append(GateResult(name, False, no_positive_answer, family=family, tested=False))
        elif lane not in (None, "hybrid") and not reported:  # made only because the config requires this lane
            results.append(GateResult(name, False, f"{FUSED_ONLY}, but the config sets min_recall[{lane!r}]",
                                      family="recall", tested=False))
        elif lane is not None:
            results.append(_recall_gate(name, lane, positives, recall, config))
        elif not reported:  # strict: fusion must be shown to add evidence, and no lane was measured
            results.append(GateResult(name, False, f"{FUSED_ONLY}, so hybrid_rule 'strict' cannot be shown",
                                      family="hybrid", tested=False))
        else:
            results.append(_hybrid_gate(name, positives, recall, config.hybrid_rule, config.top_k))
    return results
