"""The cases the gate hands back never break a sound retriever (issue 56, part 4).

A generated request that broke the invariant is handed back as the case to add to
``cases.jsonl`` (labsrc/gate/generated.py). That advice used to pin one retriever's
ranking: against a post-filtering retriever the gate handed back positive cases
expecting whatever the permitted-only rebuild ranked, and a team that added them saw
its sound retriever fail recall. Now a request that returned hidden ids hands back a
safety case forbidding them, and one that returned none but differs from the rebuild
a ``permitted_only`` case (the answer must equal the permitted-only build's).

The unit tests judge made-up answers. The proof gates ten leaking retrievers
(tests/outside) on the starter folder (labsrc/testing/starter/data), appends every
case handed back for them to the starter's cases, and gates the starter's own
retriever and the lab's ``PolicyRetriever`` on that file: both pass every gate. Each
leaking retriever, gated on the cases handed back for it with no generated probe,
fails every one of them: the advice keeps the leak in the team's suite.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import io
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import labsrc
from labsrc.cli.main import main
from labsrc.errors import InvalidRecord
from labsrc.evaluation.subject import Observation
from labsrc.gate.case_rules import case_problems, check_cases
from labsrc.gate.config import GateConfig, load_gate_config
from labsrc.gate.gates import gate_retriever
from labsrc.gate.generate import GeneratedRequest, ProbePlan
from labsrc.gate.generated import _rebuild_case, judge_generated
from labsrc.records.cases import NEGATIVE_KINDS, PERMITTED_ONLY, Case, case_format_problems, iter_cases
from labsrc.records.loading import load_callers, load_chunks
from labsrc.records.policy import Caller, PolicyChunk

OUTSIDE = Path(__file__).parent / "outside"
sys.path.insert(0, str(OUTSIDE))
import field_retrievers  # noqa: E402
import leak_retrievers  # noqa: E402
import retrievers  # noqa: E402

STARTER = Path(labsrc.__file__).parent / "testing" / "starter"
DATA = STARTER / "data"
DAY = dt.date(2026, 6, 15)  # the starter's gate.json on_date
SAFETY_KINDS = (*NEGATIVE_KINDS, "absent")

#: Every retriever of tests/outside whose generated probes find something on the starter folder.
LEAKS: dict[str, Callable[..., Any]] = {
    "post_filter": retrievers.post_filter,  # ranks every chunk, then drops the hidden ones
    "global_idf": retrievers.global_idf,  # filters first, scores with statistics of every chunk
    "module_cache": field_retrievers.module_cache,  # statistics cached from the first build in the process
    "ignores_dates": retrievers.ignores_dates,
    "off_by_one_date": field_retrievers.off_by_one_date,
    "rewrites_chunks": field_retrievers.rewrites_chunks,
    "query_cache": leak_retrievers.query_cache,
    "fail_open_no_tags": leak_retrievers.fail_open_no_tags,
    "code_lookup_first": leak_retrievers.code_lookup_first,
    "code_lookup_last": leak_retrievers.code_lookup_last,
}
#: The ones whose answers hold no hidden id, only a ranking moved by hidden chunks: permitted_only cases alone.
POST_FILTERING = ("post_filter", "global_idf", "module_cache")


def observation(*ids: str) -> Observation:
    """A pairs-only answer: ``ids`` best first, scored len(ids), ..., 2, 1."""
    return Observation({"hybrid": [(chunk_id, float(len(ids) - n)) for n, chunk_id in enumerate(ids)]})


def plan_of(*requests: GeneratedRequest) -> ProbePlan:
    return ProbePlan(requests, budget=len(requests), seed=0, planned={"cross-caller": len(requests)},
                     callers=tuple(sorted({r.caller for r in requests})), callers_without_case=())


def ask(caller: str, query: str = "reset a forgotten password", on_date: dt.date = DAY) -> GeneratedRequest:
    return GeneratedRequest("cross-caller", caller, on_date, query)


@pytest.fixture(scope="module")
def records() -> tuple[dict[str, PolicyChunk], dict[str, Caller]]:
    stored = {c.chunk_id: c for c in load_chunks(DATA / "chunks.jsonl")}
    return stored, {c.actor_id: c for c in load_callers(DATA / "callers.json")}


def valid(case: dict[str, Any], records) -> bool:
    """``case`` (a handed-back line) obeys the case format and the case rules."""
    stored, callers = records
    loaded = Case(case["name"], case["query"], case["caller"], case["kind"], tuple(case.get("expected", ())),
                  tuple(case.get("forbidden", ())), dt.date.fromisoformat(case["on_date"]))
    return not case_format_problems(loaded, chunk_ids=stored, caller_ids=callers) and not case_problems(
        loaded, callers, stored, DAY)


# -- the new kind in the case format ---------------------------------------------------------------------------------


def write_cases(tmp_path: Path, *records: dict[str, Any]) -> Path:
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_a_permitted_only_case_names_no_chunk_and_loads(tmp_path, records) -> None:
    stored, callers = records
    line = {"name": "g", "query": "reset a forgotten password", "caller": "kim", "kind": "permitted_only",
            "on_date": "2026-06-15"}
    [(number, case)] = list(iter_cases(write_cases(tmp_path, line), chunk_ids=stored, caller_ids=callers))
    assert number == 1 and case.kind == PERMITTED_ONLY and case.expected == case.forbidden == ()
    check_cases([case], callers, stored, DAY)  # raises on a problem


@pytest.mark.parametrize("field", ["expected", "forbidden"])
def test_a_permitted_only_case_refuses_chunk_ids_naming_file_line_field_and_value(tmp_path, field) -> None:
    good = {"name": "a", "query": "reset a forgotten password", "caller": "kim", "kind": "positive",
            "expected": ["apac-password"]}
    bad = {"name": "b", "query": "reset a forgotten password", "caller": "kim", "kind": "permitted_only",
           field: ["apac-password"]}
    path = write_cases(tmp_path, good, bad)
    with pytest.raises(InvalidRecord) as info:
        list(iter_cases(path))
    assert info.value.line == 2 and info.value.field == field
    message = str(info.value)
    assert str(path) in message and "['apac-password']" in message and "permitted_only case names no chunk" in message


# -- unit: what one answer hands back --------------------------------------------------------------------------------


def test_an_answer_that_differs_from_the_rebuild_hands_back_a_permitted_only_case(records) -> None:
    stored, callers = records
    probe = ask("kim")
    answer, rebuilt = observation("apac-laptop", "apac-password"), observation("apac-password", "apac-vpn")
    check = judge_generated(plan_of(probe), [answer], stored, callers, rebuilt={0: rebuilt})
    [finding] = check.findings
    assert finding.kind == "rebuild"
    assert check.cases_to_add() == [{"name": "generated-001", "query": "reset a forgotten password", "caller": "kim",
                                     "kind": "permitted_only", "on_date": "2026-06-15"}]
    assert "add to cases.jsonl" in finding.describe() and '"kind": "permitted_only"' in finding.describe()
    direct = _rebuild_case("n", probe, answer, callers, stored)
    assert direct is not None and direct.kind == PERMITTED_ONLY and direct.expected == direct.forbidden == ()


def test_hidden_ids_that_came_back_hand_back_one_safety_case_forbidding_them_all(records) -> None:
    stored, callers = records
    probe = ask("dana", "administrator rights and root passwords")
    # emea-admin-rights and emea-break-glass are it:admins (restricted for dana); emea-vpn-v1 ended in 2025.
    answer = observation("emea-admin-rights", "emea-vpn-v1", "emea-break-glass")
    check = judge_generated(plan_of(probe), [answer], stored, callers, rebuilt={0: observation("emea-laptop")})
    assert [f.kind for f in check.findings] == ["boundary", "boundary", "boundary", "rebuild"]
    assert [f.case is not None for f in check.findings] == [True, False, False, False]  # one case, on the first
    [case] = check.cases_to_add()
    assert case["kind"] == "restricted" and case["forbidden"] == ["emea-admin-rights", "emea-vpn-v1", "emea-break-glass"]
    assert "expected" not in case and valid(case, records)
    direct = _rebuild_case("n", probe, answer, callers, stored)  # the rebuild's own case is that safety case too
    assert direct is not None and direct.kind == "restricted"


def test_duplicates_are_merged_and_no_case_is_ever_positive(records) -> None:
    stored, callers = records
    same = ask("dana", "administrator rights")
    requests = (same, same, same, ask("kim"), ask("kim"))
    answers = [observation("emea-admin-rights"), observation("emea-break-glass", "emea-laptop"),
               observation("emea-laptop"), observation("apac-laptop"), observation("apac-vpn")]
    rebuilt = {i: observation("emea-password") for i in range(3)} | {3: observation("apac-password"),
                                                                     4: observation("apac-password")}
    check = judge_generated(plan_of(*requests), answers, stored, callers, rebuilt=rebuilt)
    handed = check.cases_to_add()
    # One restricted case for dana's two leaking answers (their hidden ids joined), one permitted_only case for
    # dana's answer that leaked nothing, one for kim's two answers: same query, caller, date and kind, one case.
    # Each is named after the finding that carries it: findings 1-2 and 3-4 are dana's leaking answers (a boundary
    # finding, then the rebuild's), 5 dana's third answer, 6 and 7 kim's.
    assert [(c["name"], c["caller"], c["kind"], c.get("forbidden")) for c in handed] == [
        ("generated-001", "dana", "restricted", ["emea-admin-rights", "emea-break-glass"]),
        ("generated-005", "dana", "permitted_only", None),
        ("generated-006", "kim", "permitted_only", None),
    ]
    assert all(valid(c, records) and "expected" not in c for c in handed)
    assert len(check.of_kind("rebuild")) == 5 and sum(f.case is not None for f in check.findings) == 3


# -- the proof: every case handed back, added to the starter's cases -------------------------------------------------


def starter_config(**changes: Any) -> GateConfig:
    """The starter's gate.json with one timed round and few threads: the probes and thresholds are its own."""
    return dataclasses.replace(load_gate_config(DATA / "gate.json"), warmup=0, repetitions=1, concurrency=2,
                               **changes)


@pytest.fixture(scope="module")
def starter_cases() -> list[Case]:
    return [case for _, case in iter_cases(DATA / "cases.jsonl")]


@pytest.fixture(scope="module")
def handed(records, starter_cases) -> dict[str, list[dict[str, Any]]]:
    """Every case the gate hands back for each leaking retriever, on the starter folder as it ships.

    Slow (about 30 s in the full suite): a whole gate run for each of the ten retrievers, made once for the module.
    """
    stored, callers = records
    out = {}
    for name, factory in LEAKS.items():
        run = gate_retriever(factory, tuple(stored.values()), callers, starter_cases, None, starter_config(),
                             measure=False)
        assert not run.passed and run.probes is not None and run.probes.generated is not None
        out[name] = run.probes.generated.cases_to_add()
    return out


@pytest.mark.parametrize("name", LEAKS)
def test_every_case_handed_back_is_a_valid_safety_or_permitted_only_case(handed, records, name) -> None:
    cases = handed[name]
    assert cases, f"{name}: the generated probes found nothing on the starter folder"
    kinds = {c["kind"] for c in cases}
    assert kinds <= {*SAFETY_KINDS, PERMITTED_ONLY} and not any("expected" in c for c in cases)
    if name in POST_FILTERING:
        assert kinds == {PERMITTED_ONLY}  # nothing hidden came back: no id to forbid, no ranking to pin
    assert all(valid(c, records) for c in cases)
    assert len({c["name"] for c in cases}) == len(cases)
    assert len({(c["query"], c["caller"], c["on_date"], c["kind"]) for c in cases}) == len(cases)


def as_case(line: dict[str, Any]) -> Case:
    return Case(line["name"], line["query"], line["caller"], line["kind"], forbidden=tuple(line.get("forbidden", ())),
                on_date=dt.date.fromisoformat(line["on_date"]))


@pytest.mark.parametrize("name", LEAKS)
def test_each_leaking_retriever_fails_every_case_handed_back_for_it(handed, records, starter_cases, name) -> None:
    stored, callers = records
    added = [as_case(c) for c in handed[name]]
    run = gate_retriever(LEAKS[name], tuple(stored.values()), callers, [*starter_cases, *added], None,
                         starter_config(probe_budget=0), measure=False)
    outcomes = {o.case.name: o for o in run.outcomes}
    passing = [c.name for c in added if outcomes[c.name].passed]
    assert not passing, f"{name} passes cases handed back for it: {passing}"


@pytest.fixture(scope="module")
def grown(handed, tmp_path_factory) -> Path:
    """The starter's cases.jsonl with every case handed back appended (a case two retrievers got is written once)."""
    lines, seen = [(DATA / "cases.jsonl").read_text(encoding="utf-8")], set()
    for name, cases in handed.items():
        for case in cases:
            key = json.dumps({k: v for k, v in case.items() if k != "name"}, sort_keys=True)
            if key not in seen:
                seen.add(key)
                lines.append(json.dumps({**case, "name": f"{name}-{case['name']}"}) + "\n")
    path = tmp_path_factory.mktemp("grown") / "cases.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    return path


def test_the_grown_case_file_loads_and_obeys_the_case_rules(grown, handed, records) -> None:
    stored, callers = records
    cases = [case for _, case in iter_cases(grown, chunk_ids=stored, caller_ids=callers)]
    check_cases(cases, callers, stored, DAY)  # what labsrc gate checks before it runs
    kinds = {c.kind for c in cases}
    assert PERMITTED_ONLY in kinds and "positive" in kinds  # the starter's own positives, and none added
    distinct = {json.dumps({k: v for k, v in c.items() if k != "name"}, sort_keys=True)
                for cases in handed.values() for c in cases}
    assert len(cases) == 18 + len(distinct)


def gate_cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["gate", *argv, "--no-progress"])
    return code, out.getvalue() + err.getvalue()


#: One line per gate in ``labsrc gate``'s table: its verdict, two spaces, the gate's name.
GATE_LINE = re.compile(r"^(PASS|FAIL|NOT TESTED)  (\S.*?)  ")


def lab_config(folder: Path) -> Path:
    """The starter's gate.json without a ``request`` budget: the lab's retriever times its own stages, not that one."""
    config = json.loads((DATA / "gate.json").read_text(encoding="utf-8"))
    for budgets in ("p50_budget_ms", "p95_budget_ms"):
        config[budgets]["request"] = None
    path = folder / "gate.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


@pytest.mark.parametrize("retriever", ["starter", "lab"])
def test_a_sound_retriever_passes_every_gate_with_every_case_handed_back(grown, tmp_path, monkeypatch,
                                                                         retriever) -> None:
    # `labsrc gate` as a team runs it, on the starter's gate.json (one timed round, two threads). Slow (about 20 s
    # each in the full suite): the whole gate over the starter's cases and every case handed back, as the issue asks.
    if retriever == "starter":
        spec, config = f"{STARTER / 'my_retriever.py'}:build", DATA / "gate.json"
    else:
        spec, config = "labsrc:PolicyRetriever", lab_config(tmp_path)
    monkeypatch.delitem(sys.modules, "labsrc_plugin_my_retriever", raising=False)  # a path import's module
    code, out = gate_cli("--chunks", str(DATA / "chunks.jsonl"), "--callers", str(DATA / "callers.json"),
                         "--cases", str(grown), "--config", str(config), "--retriever", spec,
                         "--repetitions", "1", "--concurrency", "2", "--out", str(tmp_path / "report"))
    assert code == 0, out
    verdicts = {m.group(2): m.group(1) for m in map(GATE_LINE.match, out.splitlines()) if m}
    assert "latency p50/p95" in verdicts and "noninterference by rebuild" in verdicts
    assert set(verdicts.values()) == {"PASS"} and "all gates pass" in out, out
    # The recall and abstention gates count the starter's own cases only: no permitted_only case is counted in them.
    assert "(>= 1.00; 11 positive cases)" in out and "1 case, 0 returned a forbidden id" in out
    assert not (tmp_path / "report" / "generated_cases.jsonl").exists()  # nothing more to add
    report = json.loads((tmp_path / "report" / "report.json").read_text(encoding="utf-8"))
    added = [c for c in report["cases"] if c["kind"] == PERMITTED_ONLY]
    assert added and all(c["passed"] for c in report["cases"])
    # Each permitted_only case was judged, not passed for want of a check: compared with its rebuild and bait build.
    assert all(c[k] is not None and c[k]["skipped"] is None and not c[k]["differs"]
               for c in added for k in ("rebuild", "bait"))
