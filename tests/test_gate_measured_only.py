"""Reports say only what was measured: lane gates and significance tests exist only for lanes a retriever reports,
every failing gate names its cases, each NOT TESTED gate gives its own reason, and a caller who can see nothing
is named (issue 59, part 4).

The gate rules run on hand-made outcomes (the arithmetic is in each test); the last test runs the starter's
gate end to end on a retriever that returns only its fused list, with ``require_cases`` on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from labsrc.boundary import unmatched_callers
from labsrc.cli.main import main
from labsrc.gate.config import GateConfig
from labsrc.gate.gates import CaseOutcome, GateRun, evaluate_gates, lane_recall
from labsrc.gate.lane_rules import FUSED_ONLY, omitted_gates
from labsrc.records.cases import Case
from labsrc.records.loading import load_callers, load_chunks
from labsrc.reports.frames import gates_frame, omitted_lines, untested_reasons
from labsrc.reports.html_report import report_html
from labsrc.reports.junit import junit_xml
from labsrc.reports.report import recall_frame, recall_significance, report_dict, significance_lines
from labsrc.testing.gate_items import SKIPPED, expected_gates, gate_outcome
from labsrc.trace import RetrievalTrace

KINDS = ("restricted", "superseded", "not_yet_effective", "wrong_region", "absent")


def outcome(name: str, kind: str, bm25=(), dense=(), hybrid=(), expected=(), forbidden=(), *,
            lanes: bool = True) -> CaseOutcome:
    trace = RetrievalTrace({}, kind, bm25, dense, hybrid)
    case = Case(name, "q", "someone", kind, expected=expected, forbidden=forbidden)
    return CaseOutcome(case, {"bm25": bm25, "dense": dense, "hybrid": hybrid}, trace, top_k=2, lanes_reported=lanes)


def fused_only_run(config: GateConfig) -> list[CaseOutcome]:
    """Twelve positive cases, all found by the fused list, and one case of every other kind: no lane reported."""
    positives = [outcome(f"p{i}", "positive", hybrid=(f"c{i}",), expected=(f"c{i}",), lanes=False) for i in range(12)]
    others = [outcome(kind, kind, forbidden=("x",), lanes=False) for kind in KINDS]
    return positives + others


def run_of(outcomes: list[CaseOutcome], config: GateConfig) -> GateRun:
    gates = evaluate_gates(outcomes, config)
    return GateRun(config, __import__("datetime").date(2026, 6, 15), tuple(outcomes), tuple(gates),
                   lane_recall(outcomes, config.top_k), {}, {}, omitted=omitted_gates(outcomes, config))


def names(gates) -> list[str]:
    return [g.name for g in gates]


# --- lane gates only for lanes the retriever reported --------------------------------------------------


def test_a_fused_list_retriever_makes_no_lane_gate_and_passes_under_require_cases() -> None:
    config = GateConfig(min_recall={"hybrid": 1.0}, require_cases=True)
    outcomes = fused_only_run(config)
    gates = evaluate_gates(outcomes, config)
    assert "recall@2 hybrid" in names(gates)
    assert not [n for n in names(gates) if "bm25" in n or "dense" in n or "each lane" in n]
    assert all(g.passed and g.tested for g in gates), [g for g in gates if not g.passed]
    assert omitted_gates(outcomes, config) == (("recall@2 bm25", FUSED_ONLY), ("recall@2 dense", FUSED_ONLY),
                                               ("hybrid >= each lane", FUSED_ONLY))
    run = run_of(outcomes, config)
    assert run.passed and not run.untested_gates
    assert omitted_lines(run) == [f"not made: recall@2 bm25, recall@2 dense, hybrid >= each lane ({FUSED_ONLY})"]


def test_a_lane_the_config_requires_but_the_retriever_does_not_report_fails() -> None:
    config = GateConfig(min_recall={"hybrid": 1.0, "bm25": 0.5})
    gates = {g.name: g for g in evaluate_gates(fused_only_run(config), config)}
    assert gates["recall@2 bm25"].status == "NOT TESTED" and not gates["recall@2 bm25"].passed
    assert gates["recall@2 bm25"].detail == f"{FUSED_ONLY}, but the config sets min_recall['bm25']"
    assert "recall@2 dense" not in gates  # not required: not made
    assert omitted_gates(fused_only_run(config), config) == (("recall@2 dense", FUSED_ONLY),
                                                             ("hybrid >= each lane", FUSED_ONLY))


def test_strict_fusion_cannot_be_shown_without_lanes_and_fails() -> None:
    config = GateConfig(hybrid_rule="strict")
    gates = {g.name: g for g in evaluate_gates(fused_only_run(config), config)}
    strict = gates["hybrid > each lane"]
    assert strict.status == "NOT TESTED" and not strict.passed
    assert strict.detail == f"{FUSED_ONLY}, so hybrid_rule 'strict' cannot be shown"


def test_lanes_that_were_reported_keep_every_lane_gate() -> None:
    outcomes = [outcome("p", "positive", ("a",), ("a",), ("a",), expected=("a",))]
    config = GateConfig()
    assert names(evaluate_gates(outcomes, config))[:4] == ["recall@2 bm25", "recall@2 dense", "recall@2 hybrid",
                                                            "hybrid >= each lane"]
    assert omitted_gates(outcomes, config) == ()


def test_an_omitted_gate_is_a_skipped_item_and_a_skipped_junit_testcase() -> None:
    config = GateConfig(min_recall={"hybrid": 1.0}, require_cases=True)
    run = run_of(fused_only_run(config), config)
    expected = dict(expected_gates(config))
    item = gate_outcome(run, "recall@2 dense", expected["recall@2 dense"])
    assert item.outcome == SKIPPED and item.message == f"recall@2 dense: not made, {FUSED_ONLY}"
    xml = junit_xml(run)
    assert '<testcase classname="labsrc.gate" name="hybrid &gt;= each lane" time="0">' in xml
    assert f'<skipped message="not made: {FUSED_ONLY}" />' in xml


# --- significance only for lanes that were measured -----------------------------------------------------


def test_no_significance_line_compares_a_lane_that_was_not_reported() -> None:
    config = GateConfig(min_recall={"hybrid": 1.0})
    run = run_of(fused_only_run(config), config)
    # Twelve paired cases would be enough for a test; the note is about the missing lanes, not their number.
    assert significance_lines(recall_significance(run)) == [
        "no significance test: the retriever returns only its fused list, so there is no lane to compare it with."]
    assert list(recall_frame(run).columns) == ["hybrid"]
    doc = report_dict(run)
    assert doc["recall"]["lanes"] == {"bm25": None, "dense": None, "hybrid": 1.0}
    assert doc["cases"][0]["recall"] == {"bm25": None, "dense": None, "hybrid": 1.0}
    assert doc["significance"]["comparisons"] == [] and doc["omitted_gates"][0]["name"] == "recall@2 bm25"


# --- every failing gate names its cases ----------------------------------------------------------------


def test_hybrid_at_least_names_each_case_where_fusion_lost_what_a_lane_found() -> None:
    # Case "lost": bm25 ranks the expected "a" first, the fused top 2 is ("b", "c"): hybrid 0.5 vs bm25 1.0 on average.
    outcomes = [outcome("lost", "positive", ("a",), (), ("b", "c"), expected=("a",)),
                outcome("kept", "positive", ("d",), ("d",), ("d",), expected=("d",))]
    (hybrid,) = [g for g in evaluate_gates(outcomes, GateConfig()) if g.family == "hybrid"]
    assert not hybrid.passed and hybrid.failing_cases == ("lost",)
    assert hybrid.detail == "hybrid 0.50 vs bm25 1.00, dense 0.50"
    assert hybrid.findings == ("case 'lost': bm25 found ['a'] in its top 2; the fused list lost it "
                               "(it returned ['b', 'c'])",)


def test_a_strict_tie_says_which_lane_fusion_added_nothing_over() -> None:
    tie = [outcome("both", "positive", ("a",), ("a",), ("a",), expected=("a",))]
    config = GateConfig(hybrid_rule="strict")
    (strict,) = [g for g in evaluate_gates(tie, config) if g.family == "hybrid"]
    assert not strict.passed and strict.failing_cases == ()
    assert strict.findings[0].startswith("no positive case where the fused list finds an expected id that bm25 misses")
    run = run_of(tie, config)
    failing = dict(zip(gates_frame(run)["gate"], gates_frame(run)["failing"]))
    assert failing["hybrid > each lane"] == "2 findings (listed below)"
    page = report_html(run, recall=recall_frame(run), latency=gates_frame(run).iloc[0:0], traces=[])
    assert "<td>2 findings (listed below)</td>" in page and "fusion adds nothing over dense" in page


def test_each_not_tested_gate_gives_its_own_reason_in_the_banner() -> None:
    config = GateConfig()
    outcomes = [outcome("p", "positive", ("a",), ("a",), ("a",), expected=("a",))]
    run = run_of(outcomes, config)
    reasons = untested_reasons(run)
    assert reasons[0] == ("restricted exclusion: no restricted cases to replay; add a restricted case whose query "
                          "matches a chunk the caller's ACL tags exclude")
    assert len(reasons) == 5
    page = report_html(run, recall=recall_frame(run), latency=gates_frame(run).iloc[0:0], traces=[])
    assert "(no cases)" not in page and "5 gates NOT TESTED and do not fail the run" in page
    assert all(f"<li>{reason.replace(chr(39), '&#x27;')}</li>" in page for reason in reasons)


# --- a caller who can see nothing ----------------------------------------------------------------------


def test_a_caller_whose_region_or_tags_match_no_chunk_is_named(tmp_path: Path) -> None:
    from labsrc.testing.starter import write_starter

    write_starter(tmp_path / "s")
    chunks = load_chunks(tmp_path / "s" / "data" / "chunks.jsonl")
    callers = load_callers(tmp_path / "s" / "data" / "callers.json")
    assert unmatched_callers(callers, chunks) == []  # vic holds no tag at all: a visitor by intent, no note
    from labsrc.records.policy import Caller

    typo = [Caller("dana", "EMEA", frozenset({"it:staff"})), Caller("ola", "emea", frozenset({"it:staf"}))]
    notes = unmatched_callers(typo, chunks)
    assert notes[0] == ("caller 'dana' is in region 'EMEA', which no stored chunk is in (stored regions: "
                        "['apac', 'emea']): every request of theirs can only answer nothing")
    assert notes[1].startswith("caller 'ola' holds no ACL tag that a stored chunk of region 'emea' carries "
                               "(they hold ['it:staf']; the region's chunks carry ['it:admins', 'it:security', "
                               "'it:staff'])")


# --- end to end: the starter, a fused-list retriever, require_cases on ---------------------------------

FUSED = '''
from my_retriever import build as build_lanes


def build(chunks, vectors):
    return FusedOnly(build_lanes(chunks, vectors))


class FusedOnly:
    """The starter's retriever, handing on only its fused list as (chunk_id, score) pairs."""

    def __init__(self, inner):
        self.inner = inner

    def search(self, query, caller, on_date, top_k):
        return [(chunk.chunk_id, score) for chunk, score in self.inner.search(query, caller, on_date, top_k).fused]
'''


def test_a_correct_fused_list_retriever_exits_0_with_require_cases_on(tmp_path: Path) -> None:
    folder = tmp_path / "starter"
    assert main(["init", str(folder)]) == 0
    (folder / "fused_only.py").write_text(FUSED, encoding="utf-8")
    config = json.loads((folder / "data" / "gate.json").read_text(encoding="utf-8"))
    config.update(min_recall={"hybrid": 1.0}, probe_budget=40)
    assert config["require_cases"] is True and config["hybrid_rule"] == "at_least"
    (folder / "data" / "fused.json").write_text(json.dumps(config), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "labsrc.cli", "gate", "--chunks", "data/chunks.jsonl", "--callers", "data/callers.json",
         "--cases", "data/cases.jsonl", "--retriever", "fused_only.py:build", "--config", "data/fused.json",
         "--no-progress", "--junit-xml", "gate.xml"],
        cwd=folder, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "PASS  recall@2 hybrid" in out and "NOT TESTED" not in out and "all gates pass" in out
    assert "hybrid vs bm25" not in out and "p = " not in out
    assert f"not made: recall@2 bm25, recall@2 dense, hybrid >= each lane ({FUSED_ONLY})" in out
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("value, message", [
    ("0", "each k must be a whole number from 1 to 10,000, not 0"),
    ("1,two", "expected whole numbers joined by commas (1,2,5,10); 'two' in '1,two' is not one"),
])
def test_a_bad_recall_at_is_one_line_and_exit_2(tmp_path: Path, capsys, value: str, message: str) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["gate", "--chunks", "c", "--callers", "c", "--cases", "c", "--retriever", "m:f", "--recall-at", value])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
