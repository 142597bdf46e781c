"""How an answer becomes a finding: every answer of a gate run judged, then every gate's verdict.

:func:`judge` reads the plan (:mod:`~labsrc.gate.plan`) and what the run got
(:class:`~labsrc.gate.answers.Answers`), probe by probe:

* **cases**: each case's answers at ``top_k`` and as deep as the corpus become a
  :class:`~labsrc.gate.outcomes.CaseOutcome`, every returned id checked against the
  boundary for the case's caller and date (:func:`~labsrc.gate.outcomes.case_outcome`);
* **repeat**: the main and the repeat build's answers, case by case
  (:class:`~labsrc.gate.probes.Repeatability`); scores that do not reproduce make every
  comparison across builds compare ids and order only;
* **canary**: did the canary come back for its code, and the withheld chunk not at all
  (:class:`~labsrc.gate.probes.CanaryCheck`);
* **concurrency**: each case's answers under concurrent requests against the case alone;
  a hidden id among them names the caller who may see it;
* **rebuild** and **bait**: each case's main answer against its (caller, date)'s build
  (:func:`~labsrc.gate.noninterference.compare_observations`); a bait chunk that came back
  is a boundary violation of its case;
* **generated**: :func:`~labsrc.gate.generated.judge_generated`;
* **errors**: every build after the main one that failed, and every search a probe asked that raised,
  whatever it raised, each its own finding (the ``build errors`` and ``search errors`` gates); a comparison
  they kept from being made is not compared (it says why and where the failure is filed), never a difference.

The findings then meet the gate rules (:func:`~labsrc.gate.gate_rules.evaluate_gates`),
and the run's verdicts are a :class:`~labsrc.gate.verdicts.GateRun`. The runner asks
:func:`rules_now` mid-run for the rules a plan entry waits on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from labsrc.boundary import block_reasons
from labsrc.evaluation.subject import Observation, Request
from labsrc.gate.answers import Answers
from labsrc.gate.config import LANES, GateConfig
from labsrc.gate.gate_rules import evaluate_gates
from labsrc.gate.lane_rules import omitted_gates
from labsrc.gate.recall_curve import recall_curve
from labsrc.gate.generated import GeneratedCheck, judge_generated
from labsrc.gate.bait import bait_markers
from labsrc.gate.noninterference import (
    Comparison,
    Violation,
    boundary_violations,
    compare_observations,
    without_fields,
)
from labsrc.gate.outcomes import CaseOutcome, case_outcome, lane_recall
from labsrc.gate.probe_rules import build_errors_gate, leftovers_gate
from labsrc.gate.plan import CANARY_CODE, CANARY_WITHHELD, BuildStep, GatePlan, Phase, phase_key
from labsrc.gate.probes import (
    CONCURRENCY_ROUNDS,
    CanaryCheck,
    ConcurrencyCheck,
    Probes,
    Repeatability,
    compare_concurrent,
    repeatability,
    withheld_rank,
)
from labsrc.gate.result import GateRun
from labsrc.records.cases import Case
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["Rules", "judge", "rules_now"]

_UNSTABLE = "its ids and order differ between two builds of the same chunks (see 'repeatable builds')"

#: Why a comparison was not made when a build failed or a search raised: each failure is filed once, in its own gate.
_BUILD_FAILED = "its build failed (see 'build errors')"
_RAISED_ON_MAIN = "its search raised on the main build (see 'search errors')"

#: The gate each kind of build is made for, as the 'build errors' and 'search errors' findings name it.
_MADE_FOR = {"cases": "the cases", "repeat": "repeatable builds", "canary": "factory indexes what it is handed",
             "rebuild": "noninterference by rebuild", "bait": "noninterference by bait",
             "concurrency": "same answers under concurrent requests", "generated": "generated probes"}


@dataclass(frozen=True)
class Rules:
    """What the answers so far allow (:data:`~labsrc.gate.plan.RULES`): did the canary pass, which cases reproduced."""

    canary_passed: bool
    unstable: frozenset[int]

    def allows(self, rule: str, index: int | None = None) -> bool:
        if rule == "canary passed":
            return self.canary_passed
        if rule == "reproducible":
            return index not in self.unstable
        if rule == "all reproducible":
            return not self.unstable
        raise ValueError(f"unknown rule {rule!r}")  # pragma: no cover - the plan names only RULES


def rules_now(plan: GatePlan, answers: Answers) -> Rules:
    canary, repeat = _canary(plan, answers), _repeat(plan, answers)
    names = repeat.unstable() if repeat is not None else frozenset()
    return Rules(canary is not None and canary.passed,
                 frozenset(i for i, case in enumerate(plan.cases) if case.name in names))


def _phase(step: BuildStep | None, probe: str, how: str) -> Phase | None:
    if step is None:
        return None
    return next((p for p in step.phases if p.probe == probe and p.how == how), None)


def _main_answers(plan: GatePlan, answers: Answers) -> list[Observation]:
    """Each case's answer at ``top_k`` on the main build."""
    return [answers.got[f"case {i}"] for i in range(len(plan.cases))]


def _repeat(plan: GatePlan, answers: Answers) -> Repeatability | None:
    step = plan.step("repeat")
    if step is None or step.name not in answers.made:
        return None
    if step.name in answers.failed:
        return Repeatability(0, error="the second build of the same chunks failed (see 'build errors')")
    top = _main_answers(plan, answers)
    # A case that raised on the main build was not asked again: it keeps that error.
    again = [answers.got.get(a.key, top[a.index]) for a in step.asks()]
    return repeatability(plan.cases, top, again)


def _canary(plan: GatePlan, answers: Answers) -> CanaryCheck | None:
    step = plan.step("canary")
    if step is None or step.name not in answers.made:
        return None
    code = next(a.request for a in step.asks() if a.key == CANARY_CODE)
    canary = step.added[0]
    withheld = answers.withheld.get(step.name)
    base = CanaryCheck(code.caller.actor_id, code.on_date, canary.chunk_id, canary.text,
                       withheld=None if withheld is None else withheld[1],
                       withheld_case=None if withheld is None else plan.cases[withheld[0]].name)
    if step.name in answers.failed:
        return replace(base, error=_BUILD_FAILED)
    answer = answers.got[CANARY_CODE]
    if answer.error:
        return replace(base, error="the search for the canary's own code raised (see 'search errors')")
    rank = None
    if withheld is not None:
        deep = answers.got[CANARY_WITHHELD]
        if deep.error:
            return replace(base, error=f"case {base.withheld_case!r} raised on the canary build (see 'search errors')")
        rank = withheld_rank(deep, withheld[1])
    return replace(base, returned=answer.ids("hybrid"), withheld_rank=rank)


def _concurrent_violations(case: Case, answer: Observation, request: Request, callers: Mapping[str, Caller],
                           actors: Sequence[str], stored: Mapping[str, PolicyChunk]) -> list[Violation]:
    """Hidden ids a case got under concurrent requests, each naming a caller of the probe who may see it."""
    out = []
    for v in boundary_violations(case.name, answer, request.caller, request.on_date, stored):
        chunk = stored.get(v.chunk_id)
        others = [a for a in actors if a != case.caller and chunk is not None
                  and not block_reasons(callers[a], chunk, request.on_date)]
        whose = f", which {others[0]!r} may see" if others else ""
        out.append(replace(v, where=f"(under concurrent requests{whose})"))
    return out


def _concurrency(plan: GatePlan, answers: Answers, outcomes: Sequence[CaseOutcome],
                 stored: Mapping[str, PolicyChunk], noisy: frozenset[str]) -> tuple[ConcurrencyCheck | None,
                                                                                    dict[int, Comparison],
                                                                                    list[tuple[int, Violation]]]:
    """Each case under concurrent requests against the case alone (``exact``), and the hidden ids it got."""
    main = plan.step("cases")
    alone_phase, together_phase = _phase(main, "concurrency", "in turn"), _phase(main, "concurrency", "at once")
    if alone_phase is None or together_phase is None:
        return None, {}, []
    asked = [a for a in together_phase.asks if not outcomes[a.index].error]
    check = ConcurrencyCheck(together_phase.threads, CONCURRENCY_ROUNDS, len(asked))
    failed = answers.failed.get(phase_key(main, together_phase))
    if not asked or failed:
        return replace(check, error=failed or "every case raised when replayed alone"), {}, []
    alone = {a.index: answers.got[a.key] for a in alone_phase.asks if a.key in answers.got}
    comparisons: dict[int, Comparison] = {}
    violations: list[tuple[int, Violation]] = []
    actors = sorted({plan.cases[a.index].caller for a in asked})
    for a in asked:
        i, answer = a.index, answers.got[a.key]
        comparison = compare_concurrent(alone[i], answer, "exact", noisy)
        if i not in comparisons or (comparison.differs and not comparisons[i].differs):
            comparisons[i] = comparison
        if comparison.differs and not answer.error:
            violations += [(i, v) for v in _concurrent_violations(
                plan.cases[i], answer, a.request, plan.callers, actors, stored)]
    return check, comparisons, violations


def _comparisons(plan: GatePlan, answers: Answers, top: Sequence[Observation], repeat: Repeatability | None,
                 mode: str, stored: Mapping[str, PolicyChunk]) -> tuple[dict[int, Comparison], dict[int, Comparison],
                                                                        list[tuple[int, Violation]]]:
    """Per case: its main answer against its (caller, date)'s rebuild and bait builds (ids, scores, every payload
    field but the noisy ones), and the bait it got back, by id or by its marker word in the payload."""
    found: dict[str, dict[int, Comparison]] = {"rebuild": {}, "bait": {}}
    returned: list[tuple[int, Violation]] = []
    unstable = repeat.unstable() if repeat is not None else frozenset()
    noisy = repeat.noisy_fields() if repeat is not None else frozenset()
    for step in plan.builds:
        if step.probe not in found:
            continue
        kind, target = step.probe, found[step.probe]
        planted = {c.chunk_id: c for c in step.added}
        markers = bait_markers(step.added)
        for a in step.asks():
            if a.probe != kind:
                continue
            i, case = a.index, plan.cases[a.index]
            if case.name in unstable:
                target[i] = Comparison(kind, mode, skipped=_UNSTABLE)
            elif step.name in answers.failed:
                target[i] = Comparison(kind, mode, skipped=_BUILD_FAILED)
            elif top[i].error:
                target[i] = Comparison(kind, mode, skipped=_RAISED_ON_MAIN)
            elif answers.got[a.key].error:
                target[i] = Comparison(kind, mode, skipped=f"its search raised on the build {step.what} (see 'search errors')")
            elif kind == "rebuild":
                target[i] = compare_observations(answers.got[a.key], top[i], kind=kind, mode=mode,
                                                 ignore_fields=noisy, stored=stored)
            else:
                answer = answers.got[a.key]
                target[i] = compare_observations(top[i], answer, kind=kind, mode=mode, bait_ids=frozenset(planted),
                                                 ignore_fields=noisy, stored={**stored, **planted},
                                                 bait_markers=markers)
                if target[i].bait_returned:
                    hits = boundary_violations(case.name, answer, a.request.caller, a.request.on_date,
                                               planted, where="(bait build)")
                    returned += [(i, v) for v in hits if v.chunk_id in planted]
    return found["rebuild"], found["bait"], returned


def _why_not_compared(config: GateConfig, canary: CanaryCheck | None, repeat: Repeatability | None) -> str | None:
    """Why generated answers were not compared with a permitted-only rebuild, or None when they could be."""
    if config.noninterference == "off":
        return "no permitted-only rebuilds were made: the config's comparison mode is 'off'"
    if canary is None or not canary.passed:
        return "the factory was not shown to index what it is handed, so no rebuild was made"
    if repeat is not None and repeat.ids_differ:
        return "ids differ between two builds of the same chunks, so no difference could be told from noise"
    return None


def _generated(plan: GatePlan, answers: Answers, stored: Mapping[str, PolicyChunk], canary: CanaryCheck | None,
               repeat: Repeatability | None, mode: str | None) -> GeneratedCheck | None:
    phase = _phase(plan.step("cases"), "generated", "in turn")
    if plan.generated is None or phase is None:
        return None
    noisy = repeat.noisy_fields() if repeat is not None else frozenset()
    got = [without_fields(answers.got[a.key], noisy) for a in phase.asks if a.key in answers.got]  # stop early, never skip
    rebuilt = {a.index: without_fields(answers.got[a.key], noisy) for step in plan.builds if step.probe == "rebuild"
               for a in step.asks() if a.probe == "generated" and a.key in answers.got}
    return judge_generated(plan.generated, got, stored, plan.callers, rebuilt=rebuilt, mode=mode or "exact",
                           not_compared=_why_not_compared(plan.config, canary, repeat))


def _failed_builds(plan: GatePlan, answers: Answers) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each build after the main one that failed, as ``(line, cases)``: the 'build errors' gate's findings.

    The line names the build, the gate it was made for and the build's own error (the factory, what it was
    handed, how many chunks, the exception and the user's file:line); ``cases`` the cases it was to answer.
    """
    out = []
    for step in plan.builds:
        if step.name in answers.failed and not step.required:
            cases = tuple(dict.fromkeys(plan.cases[a.index].name for a in step.asks()
                                        if a.probe == step.probe and a.index >= 0))
            out.append((f"build {step.name!r}, made for {_MADE_FOR[step.probe]!r}: {answers.failed[step.name]}", cases))
    return tuple(out)


def _probe_search_errors(plan: GatePlan, answers: Answers) -> tuple[tuple[str, str], ...]:
    """``(case name, line)`` per search of a probe that raised or timed out, the name ``""`` when it asked no case:
    the 'search errors' gate's findings besides the cases' own (their outcomes' errors) and the Recall@k curve's.

    A line names the case (or the generated request, its query as reports print it), the build when it is not
    the main one, the gate the search was made for, and the error (its class, message and the user's file:line).
    """
    lines: list[tuple[str, str]] = []
    for step in plan.builds:
        where = "" if step.required else f" on build {step.name!r} ({step.what})"
        for a in step.asks():
            answer = answers.got.get(a.key)
            if answer is None or not answer.error or a.probe in ("cases", "recall", "latency"):
                continue
            made_for = _MADE_FOR.get(a.probe, a.probe)
            if a.probe == "generated" and plan.generated is not None:
                lines.append(("", f"{plan.generated.asked[a.index].describe()}{where}, for {made_for!r}: {answer.error}"))
            elif a.index >= 0 or a.key == CANARY_WITHHELD:
                name = plan.cases[a.index if a.index >= 0 else answers.withheld[step.name][0]].name
                lines.append((name, f"case {name!r}{where}, for {made_for!r}: {answer.error}"))
            else:  # the canary's own code
                lines.append(("", f"the canary's own code{where}, for {made_for!r}: {answer.error}"))
    return tuple(dict.fromkeys(lines))  # a case asked 4 times at once that raised each time is one line


def _unbuilt(plan: GatePlan, answers: Answers) -> GateRun:
    """The main build failed (the factory raised, ran out of time, or its worker ended): no request was asked,
    so the run holds the build's own finding ('build errors', naming every case it left unasked) and what the
    build left running. Every other gate was not evaluated: a pytest item names it, and none passes."""
    main = plan.builds[0]
    line = f"build {main.name!r} ({main.what}, {len(main.chunks)} chunks), made for every gate: {answers.failed[main.name]}"
    probes = Probes(builds=answers.builds, restarts=answers.restarts, noninterference=plan.rebuilds,
                    leftovers=answers.leftovers, output=answers.output, containment=answers.containment,
                    failed_builds=((line, tuple(case.name for case in plan.cases)),))
    gates = (build_errors_gate(probes), leftovers_gate(probes))
    return GateRun(config=plan.config, on_date=plan.on_date, outcomes=(), gates=tuple(g for g in gates if g),
                   recall={lane: 0.0 for lane in LANES}, versions={}, dense_model={}, subject=plan.label,
                   probes=probes, unbuilt=answers.failed[main.name])


def judge(plan: GatePlan, answers: Answers) -> GateRun:
    """Every answer of the run judged (see the module docs), then every gate's verdict."""
    if plan.builds and plan.builds[0].name in answers.failed:
        return _unbuilt(plan, answers)
    config, stored = plan.config, {c.chunk_id: c for c in plan.stored}
    top = _main_answers(plan, answers)
    outcomes = [
        case_outcome(case, top[i], answers.got.get(f"case {i} deep", top[i]), plan.callers[case.caller],
                     case.on_date or plan.on_date, config.top_k, stored, answers.versions)
        for i, case in enumerate(plan.cases)
    ]
    dense_model = dict(answers.info.get("dense_model") or {}) or dict(getattr(plan.vectors, "model", None) or {})
    mode = probes = None
    probe_errors = _probe_search_errors(plan, answers)  # a search any probe asked that raised is its own finding
    if plan.rebuilds:
        repeat, canary = _repeat(plan, answers), _canary(plan, answers)
        if repeat is not None:
            mode = "ids" if repeat.scores_differ else config.noninterference  # noise is not a leak
        noisy = repeat.noisy_fields() if repeat is not None else frozenset()
        concurrency, together, violations = _concurrency(plan, answers, outcomes, stored, noisy)
        if repeat is not None and repeat.scores_differ:
            together = {i: replace(c, mode="ids") for i, c in together.items()}
        rebuild: dict[int, Comparison] = {}
        bait: dict[int, Comparison] = {}
        if canary is not None and canary.passed:
            rebuild, bait, returned = _comparisons(plan, answers, top, repeat, mode or "exact", stored)
            violations = returned + violations
        extra: dict[int, list[Violation]] = {}
        for i, v in violations:
            extra.setdefault(i, []).append(v)
        outcomes = [replace(o, rebuild=rebuild.get(i), bait=bait.get(i), concurrency=together.get(i),
                            violations=o.violations + tuple(extra.get(i, ()))) for i, o in enumerate(outcomes)]
        probes = Probes(canary=canary, repeat=repeat, concurrency=concurrency, builds=answers.builds,
                        restarts=answers.restarts, noninterference=config.noninterference != "off",
                        generated=_generated(plan, answers, stored, canary, repeat, mode),
                        leftovers=answers.leftovers, output=answers.output, containment=answers.containment,
                        failed_builds=_failed_builds(plan, answers),
                        search_errors=tuple(line for _, line in probe_errors))
    curve = recall_curve(plan.recall_at, outcomes, answers.got, config.top_k) if plan.recall_at else None
    raised = tuple((plan.cases[a.index].name, f"case {plan.cases[a.index].name!r} at k={a.request.top_k} "  # type: ignore[union-attr]
                    f"(Recall@k curve): {answers.got[a.key].error}")
                   for a in plan.asks("recall") if a.key in answers.got and answers.got[a.key].error)
    raised += probe_errors
    gates = evaluate_gates(outcomes, config, answers.latency, probes, timed=plan.measure, other_errors=raised)
    return GateRun(config=config, on_date=plan.on_date, outcomes=tuple(outcomes), gates=tuple(gates),
                   recall=lane_recall(outcomes, config.top_k), versions=answers.versions, dense_model=dense_model,
                   latency=answers.latency, subject=plan.label, noninterference=mode, probes=probes,
                   omitted=omitted_gates(outcomes, config), recall_curve=curve)
