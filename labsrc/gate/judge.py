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
* **generated**: :func:`~labsrc.gate.generated.judge_generated`.

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
from labsrc.gate.config import GateConfig
from labsrc.gate.gate_rules import evaluate_gates
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
        return Repeatability(0, error=answers.failed[step.name])
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
        return replace(base, error=answers.failed[step.name])
    answer = answers.got[CANARY_CODE]
    if answer.error:
        return replace(base, error=f"the search for the canary raised {answer.error}")
    rank = None
    if withheld is not None:
        deep = answers.got[CANARY_WITHHELD]
        if deep.error:
            return replace(base, error=f"case {base.withheld_case!r} raised {deep.error} on the canary build")
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
                target[i] = Comparison(kind, mode, error=answers.failed[step.name])
            elif top[i].error:
                target[i] = Comparison(kind, mode, error=f"the full build raised {top[i].error}")
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


def judge(plan: GatePlan, answers: Answers) -> GateRun:
    """Every answer of the run judged (see the module docs), then every gate's verdict."""
    config, stored = plan.config, {c.chunk_id: c for c in plan.stored}
    top = _main_answers(plan, answers)
    outcomes = [
        case_outcome(case, top[i], answers.got.get(f"case {i} deep", top[i]), plan.callers[case.caller],
                     case.on_date or plan.on_date, config.top_k, stored, answers.versions)
        for i, case in enumerate(plan.cases)
    ]
    dense_model = dict(answers.info.get("dense_model") or {}) or dict(getattr(plan.vectors, "model", None) or {})
    mode = probes = None
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
                        leftovers=answers.leftovers, output=answers.output, containment=answers.containment)
    gates = evaluate_gates(outcomes, config, answers.latency, probes, timed=plan.measure)
    return GateRun(config=config, on_date=plan.on_date, outcomes=tuple(outcomes), gates=tuple(gates),
                   recall=lane_recall(outcomes, config.top_k), versions=answers.versions, dense_model=dense_model,
                   latency=answers.latency, subject=plan.label, noninterference=mode, probes=probes)
