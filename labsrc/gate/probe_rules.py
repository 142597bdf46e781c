"""Gate rules for the probes of a factory's run: the canary, repeat, concurrency and generated probes.

:func:`~labsrc.gate.gate_rules.evaluate_gates` calls these after the case rules; each
turns what a probe found (:class:`~labsrc.gate.probes.Probes`) into one verdict. A probe
with no answer behind it says NOT TESTED and fails the run (:func:`no_answer` says why).
"""

from __future__ import annotations

from collections.abc import Sequence

from labsrc.gate.generated import GeneratedCheck, probes_detail, shown
from labsrc.gate.outcomes import CaseOutcome
from labsrc.gate.probes import Probes
from labsrc.gate.verdicts import GateResult, plural

__all__ = ["BUILD_ERRORS", "build_errors_gate", "canary_gate", "comparison_name", "concurrency_gate", "generated_gate",
           "leftovers_gate", "no_answer", "not_compared", "repeat_gate", "untrusted_gate"]

#: The gate of builds that failed; a run holds it only when one did (like 'search errors').
BUILD_ERRORS = "build errors"


def comparison_name(kind: str) -> str:
    return {"rebuild": "noninterference by rebuild", "bait": "noninterference by bait"}[kind]


def no_answer(count: int, noun: str) -> str:
    """``every search of the 3 cases raised or timed out``: why a gate has no evidence behind it."""
    return f"every search of the {plural(count, noun)} raised, timed out or broke the contract"


def not_compared(reasons: Sequence[str]) -> str:
    """Why cases were not compared, one clause per reason with its count: ``2 cases: its build failed (see ...)``."""
    counts: dict[str, int] = {}
    for reason in reasons:
        counts[reason] = counts.get(reason, 0) + 1
    return "; ".join(f"{plural(n, 'case')}: {reason}" for reason, n in counts.items())


def build_errors_gate(probes: Probes) -> GateResult | None:
    """FAIL naming every build that failed, whichever probe it was made for; None when none did.

    A failed build is its own finding: the gates it was made for say their cases were not compared and point
    here. When the main build fails, the run stops there and this is its finding (exit 1: what the retriever
    did, never the gate's input).
    """
    if not probes.failed_builds:
        return None
    failing = tuple(dict.fromkeys(case for _, cases in probes.failed_builds for case in cases))
    detail = (f"{len(probes.failed_builds)} of {plural(probes.builds, 'build')} failed (raised, timed out or ended "
              "while building), so the requests made for them were not asked")
    return GateResult(BUILD_ERRORS, False, detail, failing, family="builds",
                      findings=tuple(line for line, _ in probes.failed_builds))


def generated_gate(check: GeneratedCheck) -> GateResult:
    """PASS when every generated answer kept the invariant and every tier of hidden-chunk targets got its
    ``min_coverage``; a tier below its floor fails the gate (its finding names the tier, share and floor)."""
    name = "generated probes"
    if check.asked and not check.answered:
        return GateResult(name, False, f"not tested: {check.plan.coverage()}: {no_answer(check.asked, 'generated request')}",
                          family="generated", tested=False, findings=check.errors[:5])
    short = check.below_floor
    if not check.asked:
        return GateResult(name, not short, f"{check.plan.coverage()}: nothing to generate", family="generated",
                          tested=False, findings=short)
    return GateResult(name, not check.findings and not short, probes_detail(check), family="generated",
                      findings=short + shown(check.findings))


def canary_gate(probes: Probes) -> GateResult:
    name = "factory indexes what it is handed"
    canary = probes.canary
    if canary is None:
        return GateResult(name, False, "no case's caller holds an ACL tag, so no permitted canary could be made; "
                          "the comparisons across builds cannot be trusted", family="canary", tested=False)
    withheld = ("no chunk withheld (no case returned a permitted chunk)" if canary.withheld is None
                else f"{canary.withheld!r} withheld")
    detail = f"canary {canary.canary_id!r} for {canary.caller!r} on {canary.on_date}; {withheld}"
    if canary.passed:
        detail += ": the canary came back for its own text" + ("" if canary.withheld is None else ", the withheld chunk did not")
    if canary.error is not None:  # no answer behind it: neither PASS nor a finding about indexing
        return GateResult(name, False, f"not tested: {detail}: {canary.error}", family="canary", tested=False,
                          findings=canary.findings())
    return GateResult(name, canary.passed, detail, family="canary", findings=canary.findings())


def untrusted_gate(kind: str, probes: Probes) -> GateResult:
    """A rebuild or bait gate whose comparison was not made: the factory failed the canary, or its build or
    search failed so that nothing showed the factory indexes what it is handed."""
    why = ("could not be shown to index what it is handed" if probes.canary is not None and probes.canary.error
           else "does not index what it is handed")
    return GateResult(comparison_name(kind), False,
                      f"not compared: the factory {why} (see 'factory indexes what it is "
                      "handed'), so builds over other chunks prove nothing", family=kind, tested=False)


def repeat_gate(probes: Probes, mode: str) -> GateResult:
    name = "repeatable builds"
    repeat = probes.repeat
    assert repeat is not None
    if repeat.error is not None:  # filed under 'build errors', not here
        return GateResult(name, False, f"not tested: {repeat.error}",
                          family="repeat", tested=False)
    if repeat.compared == 0:
        return GateResult(name, False, "no case answered on both builds, so nothing could be compared",
                          family="repeat", tested=False)
    detail = f"{plural(repeat.compared, 'case')} on two builds of the same chunks"
    findings = tuple(f"case {c!r}: not reproducible: {what}" for c, what in repeat.ids_differ)
    if repeat.ids_differ:
        detail += (f": {len(repeat.ids_differ)} give other ids or order; those cases are not compared by the "
                   "rebuild and bait gates")
    if repeat.scores_differ:
        detail += (f"{';' if repeat.ids_differ else ':'} scores of {plural(len(repeat.scores_differ), 'case')} differ "
                   f"by up to {repeat.largest:.6g}, so the rebuild and bait gates compared ids and order only")
        if mode == "exact":
            findings += (f"scores are not reproducible (up to {repeat.largest:.6g} in {', '.join(repeat.scores_differ)}); "
                         "if that is expected (an approximate index), set noninterference to 'ids'",)
    if not repeat.ids_differ and not repeat.scores_differ:
        detail += ": the same ids, order and scores"
    passed = not repeat.ids_differ and (mode == "ids" or not repeat.scores_differ)
    failing = tuple(c for c, _ in repeat.ids_differ) + (repeat.scores_differ if mode == "exact" else ())
    return GateResult(name, passed, detail, failing, family="repeat", findings=findings)


def concurrency_gate(outcomes: Sequence[CaseOutcome], probes: Probes) -> GateResult:
    name = "same answers under concurrent requests"
    check = probes.concurrency
    assert check is not None
    what = (f"{plural(check.requests, 'request')} ({check.rounds} rounds of every case) from {check.threads} threads "
            "at once, callers interleaved")
    if check.requests == 0:
        return GateResult(name, False, "no case answered when replayed alone, so none could be replayed at once",
                          family="concurrency", tested=False)
    if check.error is not None:
        return GateResult(name, False, f"{what}: {check.error}", family="concurrency", findings=(check.error,))
    differing = [o for o in outcomes if o.concurrency is not None and o.concurrency.differs]
    detail = f"{what}: {len(differing)} of {plural(sum(o.concurrency is not None for o in outcomes), 'case')} differ from the case alone"
    findings = tuple(f"case {o.case.name!r}: {o.concurrency.describe()}" for o in differing)  # type: ignore[union-attr]
    return GateResult(name, not differing, detail, tuple(o.case.name for o in differing), family="concurrency",
                      findings=findings)


#: How the leftovers gate names what held a run's processes (``Probes.containment``).
_CONTAINMENT = {
    "pid-namespace": " (each build in a PID namespace of its own, which no process can leave)",
    "subreaper": (" (each build's worker a child subreaper, no PID namespace here: a process that leaves its "
                  "tree and its token is not found)"),
    "process-group": " (each build's process group only: no /proc here)",
}


def leftovers_gate(probes: Probes) -> GateResult:
    """Every process a build started ended with it; the gate kills what was left and names it here."""
    name = "no process outlives its build"
    if probes.leftovers is None:
        return GateResult(name, True, "not tested: this platform has no /proc, so a process started in a new "
                          "session cannot be found (the worker's process group is still killed)",
                          family="cleanup", tested=False)
    held = _CONTAINMENT.get(probes.containment or "", "")
    if not probes.leftovers:
        return GateResult(name, True, f"{plural(probes.builds, 'build')}{held}: every process the factory started "
                          "ended with its build", family="cleanup")
    count = len(probes.leftovers)
    detail = (f"the factory left {count} {'process' if count == 1 else 'processes'} running after its build ended"
              f"{held}; the gate killed them: stop them in the retriever's close()")
    return GateResult(name, False, detail, family="cleanup",
                      findings=tuple(f"the factory left a process running: {line}" for line in probes.leftovers))
