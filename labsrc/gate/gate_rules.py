"""Gate rules: from replayed cases (and timings) to one verdict per gate, in the table's order.

:data:`GATE_TABLE` says, per gate family, what to freeze and what a failure
means; :func:`evaluate_gates` applies every rule to a run's
:class:`~labsrc.gate.outcomes.CaseOutcome` records. A failed gate carries
``findings``: one line per problem, naming the case, the chunk, its rank and why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from labsrc.gate.bait import BAIT_REASONS
from labsrc.evaluation.budgets import BUDGET_STAGES, REQUEST_STAGE
from labsrc.gate.config import GateConfig
from labsrc.evaluation.latency import LatencyReport
from labsrc.gate.lane_rules import lane_gate_names, lane_gates, lanes_reported
from labsrc.gate.outcomes import CaseOutcome, lane_recall
from labsrc.gate.generated import GeneratedCheck, GeneratedFinding, shown
from labsrc.gate.probe_rules import (
    BUILD_ERRORS,
    build_errors_gate,
    not_compared,
    canary_gate,
    comparison_name,
    concurrency_gate,
    generated_gate,
    leftovers_gate,
    no_answer,
    repeat_gate,
    untrusted_gate,
)
from labsrc.gate.probes import Probes
from labsrc.gate.verdicts import GateResult, not_tested, plural
from labsrc.records.cases import NEGATIVE_KINDS

__all__ = ["GATE_TABLE", "evaluate_gates", "gate_names"]

GATE_TABLE: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "recall": (
            "the query and the id of the required current chunk",
            "the right evidence never reaches context selection",
        ),
        "hybrid": (
            "the same positive cases, scored per lane",
            "fusion loses (or, under 'strict', fails to add) evidence a single lane finds",
        ),
        "restricted": ("queries that strongly match hidden chunks", "the retriever boundary is unsafe"),
        "superseded": ("queries that match old policy wording", "the freshness filter regressed"),
        "not_yet_effective": (
            "queries that match a rule announced but not yet in force",
            "the freshness filter lets future rules in early",
        ),
        "wrong_region": ("a caller from another region asking a matching query", "the region filter regressed"),
        "abstention": (
            "questions with no permitted supporting evidence",
            "retrieval or the answer layer overreaches",
        ),
        "boundary": (
            "every id each lane and the fused list return, at top_k and at full depth",
            "the retriever returned evidence the caller may not see",
        ),
        "rebuild": (
            "each case replayed on a build over the caller's permitted chunks only",
            "chunks the caller may not see change what the caller observes",
        ),
        "bait": (
            "hidden chunks made to match each query, one per boundary rule",
            "hidden evidence reaches a lane or moves a score",
        ),
        "canary": (
            "a permitted canary chunk added to one build, a returned chunk withheld from it",
            "the factory does not index what it is handed, so no comparison across builds can be trusted",
        ),
        "repeat": (
            "every case replayed on two builds of the same chunks, in two processes",
            "the retriever's answers are not reproducible: only what reproduces can be compared",
        ),
        "concurrency": (
            "every case replayed from many threads at once on one build, callers interleaved",
            "one request's answer depends on the requests running beside it",
        ),
        "generated": (
            "requests the gate makes up: every case's query as every caller, hidden chunks' own codes and terms, "
            "each version's edge dates",
            "a caller, query or date no case asks about gets evidence it may not see, or other answers than a build "
            "over its permitted chunks",
        ),
        "cleanup": (
            "every process a build started, found through the worker's process tree when the build ends",
            "the factory leaves processes running after its build (a helper in a new session, a daemon)",
        ),
        "builds": (
            "every build after the main one: the repeat, canary, rebuild and bait builds",
            "the factory raised (or hung) instead of building over the chunks it was handed",
        ),
        "errors": ("every search call of the run", "the retriever raised instead of answering"),
        "latency": ("per-stage p50 and p95 budgets in ms", "a stage is too slow to ship"),
    }
)


def _latency_gate(latency: LatencyReport, config: GateConfig, *, stages_reported: bool = True) -> GateResult:
    """p50/p95 within budget. A retriever that reports no stages is held to the ``request`` budget only."""
    p50_budgets, p95_budgets = dict(config.p50_budget_ms), dict(config.p95_budget_ms)
    skipped: list[str] = []
    if not stages_reported:
        skipped = sorted({s for s in (*p50_budgets, *p95_budgets) if s not in latency.samples},
                         key=BUDGET_STAGES.index)
        p50_budgets = {s: b for s, b in p50_budgets.items() if s in latency.samples}
        p95_budgets = {s: b for s, b in p95_budgets.items() if s in latency.samples}
        if not p50_budgets and not p95_budgets:
            measured = ""
            if REQUEST_STAGE in latency.samples:
                measured = (f"; measured {REQUEST_STAGE} p50 {latency.p50_ms[REQUEST_STAGE]:.3f} ms, "
                            f"p95 {latency.p95_ms[REQUEST_STAGE]:.3f} ms")
            reason = (f"the retriever reports no stage timings and the config budgets no '{REQUEST_STAGE}' stage "
                      f"(add p95_budget_ms.{REQUEST_STAGE} to gate its end-to-end time){measured}")
            return not_tested("latency p50/p95", "latency", "", config, reason=reason)
    exceeded = latency.exceeded(p50_budgets, p95_budgets)
    p50, p95 = latency.p50_ms, latency.p95_ms
    over = []
    for stat, values, budgets in (("p50", p50, p50_budgets), ("p95", p95, p95_budgets)):
        for stage in exceeded[stat]:
            measured = f"{values[stage]:.3f}" if stage in values else "not measured"
            over.append(f"{stage} {stat} {measured} > {budgets[stage]:g} ms")
    known = (*BUDGET_STAGES, *sorted(set(exceeded["p50"] + exceeded["p95"]) - set(BUDGET_STAGES)))
    stages = tuple(s for s in known if s in exceeded["p50"] or s in exceeded["p95"])
    summary = f"{len(p50_budgets)} p50 and {len(p95_budgets)} p95 budgets, {latency.requests} timed requests"
    if skipped:
        summary += f" (not reported by the retriever, so not gated: {', '.join(skipped)})"
    detail = summary if not over else f"{summary}; " + "; ".join(over)
    return GateResult("latency p50/p95", not stages, detail, family="latency", failing_stages=stages)


def _boundary_gate(outcomes: Sequence[CaseOutcome], generated: GeneratedCheck | None) -> GateResult:
    name = "boundary on every returned id"
    answered = [o for o in outcomes if not o.error]
    generated_answered = generated.answered if generated is not None else 0
    if not answered and not generated_answered:
        return GateResult(name, False, f"not tested: {no_answer(len(outcomes), 'case')}, so no returned id could be checked",
                          family="boundary", tested=False)
    flagged = [o for o in outcomes if o.violations]
    leaks = generated.of_kind("boundary") if generated is not None else ()
    hidden = sorted({v.chunk_id for o in flagged for v in o.violations})
    detail = (f"{plural(len(answered), 'case')} answered, every lane at top_k and full depth: "
              f"{plural(len(hidden), 'hidden id')} returned")
    if len(answered) < len(outcomes):
        detail += f" ({len(outcomes) - len(answered)} raised or timed out: not checked)"
    if generated is not None:
        asked = len({(f.request.caller, f.request.on_date, f.request.query) for f in leaks})
        distinct = len({f.chunk_id for f in leaks})
        detail += (f"; {plural(generated_answered, 'generated request')} answered, {asked} returned a hidden id"
                   + (f" ({distinct} distinct)" if leaks else ""))
    probed = {v.where for o in flagged for v in o.violations if v.where}
    if probed:
        detail += " (counting the bait build and concurrent requests)"
    # The stored corpus's own hidden ids first (what the caller gets today), then what probes drew out.
    findings = tuple(v.describe() for o in flagged for v in o.violations if not v.where)
    findings += tuple(v.describe() for o in flagged for v in o.violations if v.where)
    findings += shown(leaks)
    return GateResult(name, not flagged and not leaks, detail,
                      tuple(o.case.name for o in flagged), family="boundary", findings=findings)


def _comparison_gate(outcomes: Sequence[CaseOutcome], kind: str, mode: str,
                     generated: Sequence[GeneratedFinding] = (), generated_compared: int = 0) -> GateResult:
    every = [(o, getattr(o, kind)) for o in outcomes if getattr(o, kind) is not None]
    compared = [(o, c) for o, c in every if c.compared]
    skipped = len(every) - len(compared)
    reasons = not_compared([c.skipped for _, c in every if c.skipped])  # each failure is filed in its own gate
    if not compared:
        return GateResult(comparison_name(kind), False, f"not compared: {reasons}", family=kind, tested=False)
    if all(o.error for o, _ in compared) and not generated:  # the case's own search never answered
        return GateResult(comparison_name(kind), False,
                          f"not tested: {no_answer(len(compared), 'case')} on one of the two builds, so nothing was compared: "
                          f"{compared[0][1].describe()}", family=kind, tested=False)
    differing = [(o, c) for o, c in compared if c.differs]
    findings = tuple(f"case {o.case.name!r}: {c.describe()}" for o, c in differing)
    findings += shown(generated)
    if kind == "rebuild":
        name = "noninterference by rebuild"
        what = "a build over the caller's permitted chunks only"
    else:
        name = "noninterference by bait"
        what = f"a build with {len(BAIT_REASONS)} hidden bait chunks per query"
    largest = max((c.max_score_diff for _, c in compared if not c.error), default=0.0)
    detail = f"{plural(len(compared), 'case')} vs {what} ({mode}): {len(differing)} differ"
    if mode == "exact" and largest:
        detail += f", largest score difference {largest:.6g}"
    if skipped:
        detail += f"; not compared: {reasons}"
    if generated_compared:
        detail += f"; {plural(generated_compared, 'generated request')}: {len(generated)} differ"
    return GateResult(name, not differing and not generated, detail, tuple(o.case.name for o, _ in differing),
                      family=kind, findings=findings)


#: The gates that need builds of their own (a factory's run), in the table's order.
_NONINTERFERENCE_GATES = (
    "factory indexes what it is handed",
    "repeatable builds",
    "noninterference by rebuild",
    "noninterference by bait",
)


def gate_names(config: GateConfig) -> tuple[tuple[str, str | None], ...]:
    """Every gate :func:`evaluate_gates` can give a factory's run under ``config``, in its order.

    Each comes with ``None``, or the setting that turns it off. The one list of gates, next to the
    rules that make them: a new gate is added here and in :func:`evaluate_gates`, and every report
    and pytest item (:mod:`labsrc.testing.gate_items`) follows from the verdicts. ``build errors`` and
    ``search errors`` are listed, though a run holds them only when a build failed or a search raised.
    """
    gates = list(lane_gate_names(config))
    gates += [(f"{kind} exclusion", None) for kind in NEGATIVE_KINDS]
    gates += [("abstention", None), ("boundary on every returned id", None)]
    off = "noninterference is 'off' in the gate config" if config.noninterference == "off" else None
    gates += [(name, off) for name in _NONINTERFERENCE_GATES]
    gates.append(("same answers under concurrent requests",
                  None if config.concurrency else "concurrency is 0 in the gate config"))
    gates.append(("generated probes", None if config.probe_budget else "probe_budget is 0 in the gate config"))
    gates.append(("no process outlives its build", None))
    gates += [(BUILD_ERRORS, None), ("search errors", None), ("latency p50/p95", None)]
    return tuple(gates)


def evaluate_gates(
    outcomes: Sequence[CaseOutcome],
    config: GateConfig | None = None,
    latency: LatencyReport | None = None,
    probes: Probes | None = None,
    *,
    timed: bool = False,
    other_errors: Sequence[tuple[str, str]] = (),
) -> list[GateResult]:
    """Every gate's verdict, in the lesson's table order (latency last, when measured).

    ``probes`` (a factory's run, :func:`~labsrc.gate.gates.gate_retriever`) adds the canary,
    repeat and concurrency gates, and turns the rebuild and bait gates into a failing NOT TESTED
    when the canary shows that comparisons across builds prove nothing. ``timed`` says the run meant to
    time the cases: when none answered, the latency gate says NOT TESTED and fails the run.
    ``other_errors`` are searches besides the cases' own that raised (a case at a ``recall_at`` k),
    each ``(case name, finding)``: they fail the ``search errors`` gate too.

    No gate says PASS without an answer behind it: a gate whose every search raised, timed out or broke
    the contract says NOT TESTED and fails the run, whatever ``require_cases`` says.
    """
    config = config or GateConfig()
    k = config.top_k
    recall = lane_recall(outcomes, k)
    results: list[GateResult] = lane_gates(outcomes, config, recall)
    reported = lanes_reported(outcomes)

    for kind in NEGATIVE_KINDS:
        group = [o for o in outcomes if o.case.kind == kind]
        if not group:
            results.append(not_tested(f"{kind} exclusion", kind, f"{kind} cases", config))
            continue
        answered = [o for o in group if not o.error]
        if not answered:
            results.append(GateResult(f"{kind} exclusion", False, f"not tested: {no_answer(len(group), 'case')}, "
                                      "so no exclusion was shown (see 'search errors')", family=kind, tested=False))
            continue
        leaks = tuple(o.case.name for o in group if o.leaked())
        detail = f"{plural(len(group), 'case')}, {len(leaks)} leaked (all lanes, full depth)"
        if len(answered) < len(group):
            detail += f"; {len(group) - len(answered)} raised or timed out: not checked"
        findings = tuple(f"case {o.case.name!r}: forbidden {list(o.leaked())} reached a lane" for o in group if o.leaked())
        results.append(GateResult(f"{kind} exclusion", not leaks, detail, leaks, family=kind, findings=findings))

    absent = [o for o in outcomes if o.case.kind == "absent"]
    if not absent:
        results.append(not_tested("abstention", "abstention", "absent cases", config))
    elif all(o.error for o in absent):
        results.append(GateResult("abstention", False, f"not tested: {no_answer(len(absent), 'absent case')} "
                                  "(see 'search errors')", family="abstention", tested=False))
    else:
        overreach = tuple(o.case.name for o in absent if o.overreach())
        returned = sum(len(set(o.returned) - set(o.case.forbidden)) for o in absent)
        # What was checked (no forbidden id as evidence), then what came back anyway: permitted ids a reviewer
        # should look at, which do not fail the gate.
        detail = (f"{plural(len(absent), 'case')}, {len(overreach)} returned a forbidden id; "
                  f"{plural(returned, 'other fused id')} returned, for review")
        findings = tuple(f"case {o.case.name!r}: returned {list(o.overreach())} as evidence" for o in absent if o.overreach())
        results.append(GateResult("abstention", not overreach, detail, overreach, family="abstention", findings=findings))

    generated = probes.generated if probes is not None else None
    if outcomes:
        results.append(_boundary_gate(outcomes, generated))
    mode = config.noninterference
    if probes is not None and probes.noninterference:
        results.append(canary_gate(probes))
        if probes.repeat is not None:
            results.append(repeat_gate(probes, config.noninterference))
            if probes.repeat.scores_differ:
                mode = "ids"
    trusted = probes is None or not probes.noninterference or (probes.canary is not None and probes.canary.passed)
    for kind in ("rebuild", "bait"):
        if not trusted:
            results.append(untrusted_gate(kind, probes))  # type: ignore[arg-type]
        elif any(getattr(o, kind) is not None for o in outcomes):
            extra = generated.of_kind(kind) if generated is not None else ()
            compared = generated.compared if generated is not None and kind == "rebuild" else 0
            results.append(_comparison_gate(outcomes, kind, mode, extra, compared))
    if probes is not None and probes.concurrency is not None:
        results.append(concurrency_gate(outcomes, probes))
    if generated is not None:
        results.append(generated_gate(generated))
    if probes is not None:
        results.append(leftovers_gate(probes))
        failed = build_errors_gate(probes)  # a build that failed is its own finding, whichever probe it was made for
        if failed is not None:
            results.append(failed)
    raised = [o for o in outcomes if o.error]
    if raised or other_errors:
        detail = f"{plural(len(raised), 'case')} of {len(outcomes)} raised" if raised else "every case answered"
        if other_errors:
            detail += f"; {plural(len(other_errors), 'other request')} raised (asked by a probe or for the Recall@k curve)"
        failing = tuple(dict.fromkeys([o.case.name for o in raised] + [name for name, _ in other_errors if name]))
        results.append(GateResult(
            "search errors", False, detail, failing, family="errors",
            findings=tuple(f"case {o.case.name!r}: {o.error}" for o in raised) + tuple(line for _, line in other_errors),
        ))

    if latency is not None:
        results.append(_latency_gate(latency, config, stages_reported=reported))
    elif timed and outcomes:
        results.append(GateResult("latency p50/p95", False, f"not tested: {no_answer(len(outcomes), 'case')}, "
                                  "so nothing was timed", family="latency", tested=False))
    return results
