"""The gate reads as plan → run → judge: the plan is plain data, the runner asks exactly what it says, the judge reads it.

Most tests run the plan in this process (:class:`InProcess`, a builder that calls the
factory here and logs every request), so they show the runner's order and rules
without worker processes; one test holds that run against ``gate_retriever``'s own.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from labsrc.boundary import block_reasons, permitted_chunks
from labsrc.errors import InvalidArgument
from labsrc.evaluation.subject import observe_request, subject_versions
from labsrc.gate.config import GateConfig
from labsrc.gate.gates import gate_retriever, release_gate
from labsrc.gate.judge import judge, rules_now
from labsrc.gate.plan import CANARY_CODE, RULES, case_groups, plan_gate
from labsrc.gate.probes import CONCURRENCY_ROUNDS
from labsrc.gate.run import run_plan
from labsrc.retriever.policy import PolicyRetriever

PROBES = {"cases", "latency", "concurrency", "generated", "repeat", "canary", "rebuild", "bait"}


class _Build:
    def __init__(self, retriever, what: str, log: list) -> None:
        self.retriever, self.what, self.log = retriever, what, log
        self.info = {"rrf_k": getattr(retriever, "rrf_k", None), "dense_model": {}}
        self.restarts = 0

    def search(self, request):
        self.log.append((self.what, request.query, request.caller.actor_id, request.on_date, request.top_k))
        return observe_request(self.retriever, request)

    def concurrently(self, requests, threads, tick):
        answers = []
        for request in requests:
            answers.append(self.search(request))
            tick()
        return answers, None

    def versions(self, on_date, fallback):
        return subject_versions(self.retriever, on_date, fallback)

    def close(self) -> None:
        pass


class InProcess:
    """A builder that calls the factory in this process and logs every request as (build, query, caller, date, k)."""

    def __init__(self, factory) -> None:
        self.factory, self.log, self.built = factory, [], []

    def build(self, chunks, what, vectors):
        self.built.append((what, tuple(c.chunk_id for c in chunks)))
        return _Build(self.factory(chunks, vectors), what, self.log)

    def aftermath(self):
        return (), ()

    def containment(self):
        return None  # built in this process: nothing of its own holds it


def _plan(data, **config):
    config = GateConfig(**{"repetitions": 1, "warmup": 0, "probe_budget": 40, **config})
    return plan_gate(tuple(data.chunks), data.callers_by_id, data.cases, config, data.eval_date, data.vectors,
                     label="PolicyRetriever", measure=False)


def test_the_plan_holds_every_probe_and_every_build_in_the_order_they_run(data) -> None:
    plan = _plan(data)
    groups = case_groups(data.cases, data.eval_date)
    assert [b.probe for b in plan.builds[:3]] == ["cases", "repeat", "canary"]
    assert [b.name for b in plan.builds[3:]] == [f"{kind} {actor} {day}" for actor, day in groups
                                                 for kind in ("rebuild", "bait")]
    counts = plan.count()
    assert set(counts) == PROBES - {"latency"}  # measure=False: nothing is timed
    n = len(data.cases)
    assert counts["cases"] == 2 * n  # at top_k, and as deep as the corpus
    assert counts["concurrency"] == n + CONCURRENCY_ROUNDS * n  # each case alone, then every case in rounds at once
    assert counts["repeat"] == n and counts["canary"] == 2
    assert counts["rebuild"] == counts["bait"] == n  # each case on its own (caller, date)'s builds
    assert plan.generated is not None and len(plan.asks("generated")) >= len(plan.generated.requests)


def test_each_comparison_build_holds_what_its_probe_says(data) -> None:
    plan = _plan(data)
    stored = tuple(data.chunks)
    for build in plan.builds:
        requests = [a.request for a in build.asks() if a.request is not None]
        if build.probe == "rebuild":
            caller, day = requests[0].caller, requests[0].on_date
            assert build.chunks == tuple(permitted_chunks(caller, stored, day)) and not build.added
        elif build.probe == "bait":
            caller, day = requests[0].caller, requests[0].on_date
            assert build.chunks == stored and build.added
            assert all(block_reasons(caller, chunk, day) for chunk in build.added)  # bait is hidden, every one
        elif build.probe == "canary":
            code = next(a.request for a in build.asks() if a.key == CANARY_CODE)
            assert [c.text for c in build.added] == [code.query]
            assert not block_reasons(code.caller, build.added[0], code.on_date)  # the caller may see the canary
            first = build.withhold.candidates[0][1]
            assert data.cases[first].kind == "positive"  # a positive case's chunk is withheld first


def test_the_plan_is_plain_data_the_same_for_the_same_inputs(data) -> None:
    first, second = _plan(data), _plan(data)
    assert json.dumps(first.to_dict()) == json.dumps(second.to_dict())
    assert first.to_dict()["requests"] == first.count()
    lines = first.describe()
    assert len(lines) == len(first.builds) + sum(len(b.phases) for b in first.builds)
    assert any(RULES["canary passed"] in line for line in lines)


@pytest.mark.parametrize(
    ("config", "missing"),
    [
        ({"noninterference": "off"}, {"repeat", "canary", "rebuild", "bait"}),
        ({"concurrency": 0}, {"concurrency"}),
        ({"probe_budget": 0}, {"generated"}),
    ],
)
def test_what_the_config_turns_off_is_not_in_the_plan(data, config, missing) -> None:
    assert set(_plan(data, **config).count()) == PROBES - {"latency"} - missing


def test_a_built_retriever_is_planned_one_build_of_cases_and_timing(data) -> None:
    plan = plan_gate(tuple(data.chunks), data.callers_by_id, data.cases, GateConfig(), data.eval_date,
                     label="built", rebuilds=False)
    assert [b.name for b in plan.builds] == ["main"]
    assert set(plan.count()) == {"cases", "latency"}


def _expected_log(plan, answers) -> list:
    """What the plan says each build is asked, in order (the withheld chunk's case as the run picked it)."""
    out = []
    for build in plan.builds:
        if build.name in answers.skipped:
            continue
        what = build.what
        if build.name in answers.withheld:
            what += f" and {answers.withheld[build.name][1]!r} withheld"
        for ask in build.asks():
            if ask.key not in answers.got:
                continue
            request = ask.request
            if request is None:
                request = next(r for _, i, r in build.withhold.candidates if i == answers.withheld[build.name][0])
            out.append((what, request.query, request.caller.actor_id, request.on_date, request.top_k))
    return out


def test_the_runner_asks_exactly_what_the_plan_says_in_plan_order(data) -> None:
    plan = _plan(data)
    builder = InProcess(PolicyRetriever)
    answers = run_plan(plan, builder, rules_now)
    assert answers.made == [b.name for b in plan.builds] and not answers.skipped and not answers.failed
    assert builder.log == _expected_log(plan, answers)
    assert len(builder.log) == sum(plan.count().values())  # every request asked once (nothing timed)
    run = judge(plan, answers)
    assert run.passed, [g.name for g in run.failed_gates]


def test_a_run_in_this_process_is_judged_as_the_gate_judges_its_workers(data) -> None:
    plan = _plan(data)
    local = judge(plan, run_plan(plan, InProcess(PolicyRetriever), rules_now))
    isolated = gate_retriever(PolicyRetriever, data.chunks, data.callers, data.cases, data.vectors, plan.config,
                              on_date=data.eval_date, measure=False)
    # The one detail that differs says what held the workers' processes (a PID namespace); in-process, nothing.
    same = [(g.name, g.status, g.detail if g.family != "cleanup" else "") for g in local.gates]
    assert same == [(g.name, g.status, g.detail if g.family != "cleanup" else "") for g in isolated.gates]
    assert local.probes.builds == isolated.probes.builds == len(plan.builds)


def test_a_factory_that_ignores_its_chunks_gets_no_comparison_build_and_the_rule_is_named(data) -> None:
    plan = _plan(data)
    builder = InProcess(lambda chunks, vectors: PolicyRetriever(data.chunks, data.vectors))
    answers = run_plan(plan, builder, rules_now)
    compare = [b.name for b in plan.builds if b.probe in ("rebuild", "bait")]
    assert set(answers.skipped) == set(compare)
    assert all(RULES["canary passed"] in why for why in answers.skipped.values())
    assert not [entry for entry in builder.log if "permitted chunks" in entry[0] or "bait" in entry[0]]
    run = judge(plan, answers)
    statuses = {g.name: g.status for g in run.gates}
    assert statuses["factory indexes what it is handed"] == "FAIL"
    assert statuses["noninterference by rebuild"] == statuses["noninterference by bait"] == "NOT TESTED"


def test_a_case_that_raised_is_not_asked_again_and_its_comparisons_say_why(data) -> None:
    first = data.cases[0]
    who = (first.query, first.caller)

    class RaisesOnce(PolicyRetriever):
        def search(self, query, caller, on_date, top_k=2, **kwargs):
            if (query, caller.actor_id) == who:
                raise RuntimeError("index shard offline")
            return super().search(query, caller, on_date, top_k, **kwargs)

    plan = _plan(data, probe_budget=0)
    builder = InProcess(RaisesOnce)
    answers = run_plan(plan, builder, rules_now)
    asked = [entry for entry in builder.log if (entry[1], entry[2]) == who]
    assert len(asked) == 1 and asked[0][0] == "every stored chunk"  # once, on the main build, at top_k
    run = judge(plan, answers)
    outcome = run.outcomes[0]
    assert "index shard offline" in outcome.error
    # The raise is filed once, as a search error; the comparisons it kept from being made say so and point there.
    assert outcome.rebuild.skipped == outcome.bait.skipped == "its search raised on the main build (see 'search errors')"
    assert not outcome.rebuild.differs and not outcome.bait.differs
    assert run.probes.concurrency.requests == CONCURRENCY_ROUNDS * (len(data.cases) - 1)


def test_the_judge_reads_a_phase_that_gave_no_answers_as_its_failure(data) -> None:
    plan = _plan(data, probe_budget=0)
    answers = run_plan(plan, InProcess(PolicyRetriever), rules_now)
    broken = replace(answers, got={k: v for k, v in answers.got.items() if not k.startswith("together")},
                     failed={"main: concurrency at once": "the worker process ended while 16 threads searched"})
    run = judge(plan, broken)
    assert run.probes.concurrency.error == "the worker process ended while 16 threads searched"
    assert {g.name: g.status for g in run.gates}["same answers under concurrent requests"] != "PASS"
    assert judge(plan, answers).probes.concurrency.error is None


def test_a_retriever_that_fuses_with_another_rrf_k_is_refused_before_any_case_is_asked(data) -> None:
    def other_fusion(chunks, vectors):
        return PolicyRetriever(chunks, vectors, rrf_k=30)

    plan = _plan(data)
    builder = InProcess(other_fusion)
    with pytest.raises(InvalidArgument, match=r"rrf_k=30(\.0)? but the config says rrf_k=60"):
        run_plan(plan, builder, rules_now)
    assert builder.log == []  # refused at the main build, before its first search
    with pytest.raises(InvalidArgument, match=r"rrf_k=30(\.0)? but the config says rrf_k=60"):
        gate_retriever(other_fusion, data.chunks, data.callers, data.cases, data.vectors, plan.config,
                       on_date=data.eval_date, measure=False)
    with pytest.raises(InvalidArgument, match=r"rrf_k=30(\.0)? but the config says rrf_k=60"):
        release_gate(other_fusion(data.chunks, data.vectors), data.cases, data.callers, plan.config)
