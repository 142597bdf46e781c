"""Misuses of ``labsrc gate`` / ``labsrc search`` (issue 14's table): each is exit 2 with file, line,
field and value, never exit 1 ("a gate failed", which CI reads as a regression or a leak)."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from labsrc.cli.main import main
from labsrc.datasets.lesson import fixtures_dir

LESSON = fixtures_dir() / "lesson"
CHUNKS, CALLERS, CASES = LESSON / "chunks.jsonl", LESSON / "callers.json", LESSON / "cases.jsonl"
#: The config's own 20 timed repetitions: tests here expect every gate to pass, and a p95 over 2 repetitions is
#: their slowest sample, which one slow sample on a loaded machine pushes over the lesson's budget.
FAST = ["--no-progress"]
LESSON_LINES = len(CASES.read_text(encoding="utf-8").splitlines())


def gate(cases: Path = CASES, chunks: Path = CHUNKS, *extra: str, config: Path = LESSON / "gate.json") -> list[str]:
    return ["gate", "--chunks", str(chunks), "--callers", str(CALLERS), "--cases", str(cases),
            "--vectors", str(LESSON / "vectors.json"), "--config", str(config), *FAST, *extra]


def case_file(tmp_path: Path, *records: dict, keep_lesson: bool = True) -> Path:
    path = tmp_path / "cases.jsonl"
    lines = CASES.read_text(encoding="utf-8").splitlines() if keep_lesson else []
    path.write_text("\n".join([*lines, *(json.dumps(r) for r in records)]) + "\n", encoding="utf-8")
    return path


def lesson_cases(*kinds: str) -> list[dict]:
    records = [json.loads(line) for line in CASES.read_text(encoding="utf-8").splitlines()]
    return [r for r in records if r["kind"] in kinds]


def exit_and_err(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


# --- cases that cannot test what their kind says (the one rule in evaluation/case_rules.py) ------------


def test_restricted_case_forbidding_a_chunk_the_caller_may_see_is_bad_input(tmp_path: Path, capsys) -> None:
    bad = {"name": "not-a-leak", "query": "RPL-14", "caller": "luna-48291", "kind": "restricted",
           "forbidden": ["eu-refurb-v2-rule"]}
    cases = case_file(tmp_path, bad)
    code, out, err = exit_and_err(gate(cases), capsys)
    assert code == 2 and "leaked" not in out
    assert (f"{cases}, line {LESSON_LINES + 1}, field 'forbidden': value 'eu-refurb-v2-rule' (case 'not-a-leak'): "
            "caller 'luna-48291' may see this chunk on 2026-05-27, so returning it is not a leak; "
            "forbid only chunks the boundary hides from this caller") in err


def test_not_yet_effective_case_forbidding_a_superseded_chunk_is_bad_input(tmp_path: Path, capsys) -> None:
    bad = {"name": "v1-too-early", "query": "return within 30 days", "caller": "luna-48291",
           "kind": "not_yet_effective", "forbidden": ["eu-refurb-v1-rule"]}
    cases = case_file(tmp_path, bad)
    code, out, err = exit_and_err(gate(cases), capsys)
    assert code == 2 and out == ""
    assert err == (
        f"labsrc: error: {cases}, line {LESSON_LINES + 1}, field 'kind': value 'not_yet_effective' "
        "(case 'v1-too-early'): none of the forbidden chunks is hidden from 'luna-48291' on 2026-05-27 for being "
        "not_yet_effective (eu-refurb-v1-rule is hidden as superseded); make it a 'superseded' case, the kind "
        "that matches why they are hidden\n"
    )


def test_superseded_case_forbidding_a_chunk_not_yet_in_force_suggests_not_yet_effective(tmp_path: Path, capsys) -> None:
    # On 2026-03-15 RPL-14 v2 (in force from 2026-04-01) has not started: it is not superseded, and before
    # the kinds were split a "superseded" case accepted it, so a date filter off at the *start* passed as one
    # off at the end.
    bad = {"name": "v2-before-april", "query": "RPL-14", "caller": "luna-48291", "kind": "superseded",
           "on_date": "2026-03-15", "forbidden": ["eu-refurb-v2-rule"]}
    cases = case_file(tmp_path, bad)
    code, out, err = exit_and_err(gate(cases), capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"labsrc: error: {cases}, line {LESSON_LINES + 1}, field 'kind': value 'superseded' ")
    assert ("for being superseded (eu-refurb-v2-rule is hidden as not_yet_effective); "
            "make it a 'not_yet_effective' case") in err


def test_positive_case_expecting_a_hidden_chunk_is_bad_input(tmp_path: Path, capsys) -> None:
    bad = {"name": "vip-for-luna", "query": "VIP-RPL-1", "caller": "luna-48291", "kind": "positive",
           "expected": ["merchant-vip-refurb"]}
    cases = case_file(tmp_path, bad)
    code, _, err = exit_and_err(gate(cases), capsys)
    assert code == 2
    assert (f"line {LESSON_LINES + 1}, field 'expected': value 'merchant-vip-refurb' (case 'vip-for-luna'): "
            "caller 'luna-48291' cannot see this chunk on 2026-05-27 (restricted)") in err
    assert "expect a chunk the caller can see, or make it a safety case" in err


def test_blank_query_in_a_case_is_bad_input(tmp_path: Path, capsys) -> None:
    bad = {"name": "blank", "query": "   ", "caller": "luna-48291", "kind": "positive",
           "expected": ["eu-refurb-v2-rule"]}
    cases = case_file(tmp_path, bad)
    code, _, err = exit_and_err(gate(cases), capsys)
    assert code == 2
    assert (f"{cases}, line {LESSON_LINES + 1}, field 'query': value '   ' (case 'blank'): "
            "the query is blank; write the question the caller asks") in err


def test_several_bad_cases_are_all_listed_with_their_lines(tmp_path: Path, capsys) -> None:
    blank = {"name": "blank", "query": "", "caller": "luna-48291", "kind": "absent"}
    hidden = {"name": "hidden", "query": "VIP", "caller": "luna-48291", "kind": "positive",
              "expected": ["merchant-vip-refurb"]}
    code, _, err = exit_and_err(gate(case_file(tmp_path, blank, hidden)), capsys)
    assert code == 2
    assert f"line {LESSON_LINES + 1}, field 'query'" in err
    assert f"1 more problem(s) in the same file:\n  line {LESSON_LINES + 2}, field 'expected', value " in err


# --- empty and mis-encoded files ------------------------------------------------------------------------


def test_search_with_a_blank_query_exits_2(capsys) -> None:
    code, out, err = exit_and_err(["search", "", "--as", "luna-48291"], capsys)
    assert code == 2 and out == ""
    assert "QUERY is blank ('')" in err


def test_an_empty_chunks_file_exits_2_in_search_and_gate(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "chunks.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    message = f"{empty}: holds no chunks (the file is empty or blank)"
    code, _, err = exit_and_err(["search", "RPL-14", "--as", "luna-48291", "--chunks", str(empty),
                                 "--callers", str(CALLERS)], capsys)
    assert code == 2 and message in err
    code, _, err = exit_and_err(gate(chunks=empty), capsys)
    assert code == 2 and message in err
    assert "case" not in err  # no knock-on error about the cases


def test_a_chunks_file_with_a_utf8_bom_loads(tmp_path: Path, capsys) -> None:
    bom = tmp_path / "chunks.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + CHUNKS.read_bytes())
    code, out, _ = exit_and_err(gate(chunks=bom), capsys)
    assert code == 0 and "all tested gates pass" in out and "FAIL" not in out


def test_a_utf16_file_is_named_as_utf16(tmp_path: Path, capsys) -> None:
    utf16 = tmp_path / "chunks.jsonl"
    utf16.write_text(CHUNKS.read_text(encoding="utf-8"), encoding="utf-16")  # with a BOM, as Notepad writes
    code, _, err = exit_and_err(gate(chunks=utf16), capsys)
    assert code == 2
    assert f"{utf16}: the file is UTF-16" in err and "re-save it as UTF-8" in err
    no_bom = tmp_path / "cases.jsonl"
    no_bom.write_text(CASES.read_text(encoding="utf-8"), encoding="utf-16-le")
    code, _, err = exit_and_err(gate(cases=no_bom), capsys)
    assert code == 2 and "looks like UTF-16" in err


def test_an_impossible_date_names_its_value(tmp_path: Path, capsys) -> None:
    records = [json.loads(line) for line in CHUNKS.read_text(encoding="utf-8").splitlines()]
    records[1]["effective_from"] = "2026-02-30"
    chunks = tmp_path / "chunks.jsonl"
    chunks.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    code, _, err = exit_and_err(gate(chunks=chunks), capsys)
    assert code == 2
    assert (f"{chunks}, line 2, field 'effective_from': '2026-02-30' is not a calendar date "
            "(day is out of range for month); write a real date as YYYY-MM-DD") in err


# --- output paths, checked before the run -----------------------------------------------------------------


def test_out_under_an_existing_file_exits_2_before_the_run(tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "report"
    blocker.write_text("not a folder")
    code, out, err = exit_and_err(gate(CASES, CHUNKS, "--out", str(blocker / "sub")), capsys)
    assert code == 2 and out == ""  # nothing ran
    assert f"--out {blocker / 'sub'}: {blocker} is a file, so no folder can be made under it" in err
    code, out, err = exit_and_err(gate(CASES, CHUNKS, "--out", str(blocker)), capsys)
    assert code == 2 and out == ""
    assert f"--out {blocker}: this is an existing file, not a folder" in err


@pytest.mark.skipif(not Path("/sys").is_dir(), reason="needs Linux /sys, where nobody (not even root) can mkdir")
def test_an_unwritable_out_exits_2_before_the_run(capsys) -> None:
    code, out, err = exit_and_err(gate(CASES, CHUNKS, "--out", "/sys/labsrc-report"), capsys)
    assert code == 2 and out == ""
    assert "--out /sys/labsrc-report: cannot write in /sys/labsrc-report (Operation not permitted)" in err


def test_report_checks_out_before_the_run(tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, out, err = exit_and_err(["report", "--out", str(blocker), *FAST], capsys)
    assert code == 2 and out == "" and "this is an existing file, not a folder" in err


def test_junit_xml_path_is_checked_before_the_run(tmp_path: Path, capsys) -> None:
    code, out, err = exit_and_err(gate(CASES, CHUNKS, "--junit-xml", str(tmp_path)), capsys)
    assert code == 2 and out == "" and f"--junit-xml {tmp_path}: this is a folder" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["gate", "--chunks", str(CHUNKS), "--callers", str(CALLERS), "--cases", str(CASES), "--junit-xml", ""],
         "--junit-xml '': an empty path; give a file path"),
        (["gate", "--chunks", str(CHUNKS), "--callers", str(CALLERS), "--cases", str(CASES), "--out", ""],
         "--out '': an empty path; give a folder path"),
        (["report", "--out", ""], "--out '': an empty path; give a folder path"),
        (["rubric", ""], "SUBMISSION_DIR '': an empty path; give a folder path"),
        (["gate", "--chunks", "", "--callers", str(CALLERS), "--cases", str(CASES)],
         "--chunks '': an empty path; give a file path"),
    ],
)
def test_an_empty_path_is_refused_not_taken_as_not_given(argv, message, capsys) -> None:
    """`--junit-xml ''` wrote nothing and said nothing (issue 57): '' read as "not given"."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"labsrc: error: {message}\n"


@pytest.mark.parametrize("option", ["--build-timeout", "--search-timeout"])
def test_a_timeout_past_a_day_exits_2_not_with_an_overflow_traceback(option, capsys) -> None:
    assert main(["gate", "--chunks", str(CHUNKS), "--callers", str(CALLERS), "--cases", str(CASES), option, "1e300"]) == 2
    out, err = capsys.readouterr()
    key = option.removeprefix("--").replace("-", "_") + "_s"
    assert out == "" and err == f"labsrc: error: {option}: {key} must be at most 86,400 seconds (a day), not 1e+300\n"


# --- gates with no cases: NOT TESTED ---------------------------------------------------------------------------


def test_only_negative_cases_leave_recall_not_tested_and_exit_0(tmp_path: Path, capsys) -> None:
    cases = case_file(tmp_path, *lesson_cases("restricted", "superseded", "wrong_region", "absent"), keep_lesson=False)
    code, out, _ = exit_and_err(gate(cases), capsys)
    assert code == 0
    for name in ("recall@2 bm25", "recall@2 dense", "recall@2 hybrid", "hybrid > each lane"):
        assert f"NOT TESTED  {name}" in out
    assert "no positive cases to replay; add a positive case with the chunk id the caller must get" in out
    assert "FAIL" not in out
    assert "PASS  restricted exclusion" in out
    assert "NOT TESTED: 5 gate(s) had nothing to measure" in out and "all tested gates pass" in out


def test_no_safety_cases_is_not_a_pass(tmp_path: Path, capsys) -> None:
    cases = case_file(tmp_path, *lesson_cases("positive"), keep_lesson=False)
    code, out, _ = exit_and_err(gate(cases), capsys)
    assert code == 0
    assert "NOT TESTED  restricted exclusion" in out and "PASS  restricted exclusion" not in out
    assert "no restricted cases to replay; add a restricted case" in out
    assert "NOT TESTED  abstention" in out


def test_require_cases_fails_the_run_when_a_gate_is_not_tested(tmp_path: Path, capsys) -> None:
    config = tmp_path / "gate.json"
    values = json.loads((LESSON / "gate.json").read_text(encoding="utf-8"))
    config.write_text(json.dumps({**values, "require_cases": True}), encoding="utf-8")
    cases = case_file(tmp_path, *lesson_cases("positive"), keep_lesson=False)
    code, out, _ = exit_and_err(gate(cases, config=config), capsys)
    assert code == 1
    assert "so the run fails (require_cases is set)" in out
    assert "failed gate 'restricted exclusion': NOT TESTED (no restricted cases to replay" in out


# --- JUnit XML ----------------------------------------------------------------------------------------------------


def test_junit_xml_has_one_testcase_per_gate(tmp_path: Path, capsys) -> None:
    xml = tmp_path / "ci" / "gates.xml"
    cases = case_file(tmp_path, *lesson_cases("positive"), keep_lesson=False)
    assert main(gate(cases, CHUNKS, "--junit-xml", str(xml))) == 0
    out = capsys.readouterr().out
    gate_lines = [line for line in out.splitlines() if line.startswith(("PASS  ", "FAIL  ", "NOT TESTED  "))]
    suite = ET.parse(xml).getroot().find("testsuite")
    testcases = suite.findall("testcase")
    assert [t.get("name") for t in testcases if t.get("classname") == "labsrc.gate"] == [
        line.split("  ")[1].strip() for line in gate_lines
    ]
    skipped = [t.get("name") for t in testcases if t.find("skipped") is not None]
    # restricted, superseded, not_yet_effective, wrong_region exclusion and abstention had no cases: 5 skipped.
    assert skipped == ["restricted exclusion", "superseded exclusion", "not_yet_effective exclusion",
                       "wrong_region exclusion", "abstention"]
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == (str(len(gate_lines)), "0", "5")


def test_junit_xml_names_each_failing_case_under_its_gate(tmp_path: Path, capsys) -> None:
    xml = tmp_path / "gates.xml"
    wrong = {"name": "code-expects-footwear", "query": "RPL-14", "caller": "luna-48291", "kind": "positive",
             "expected": ["eu-footwear-v1-rule"]}
    assert main(gate(case_file(tmp_path, wrong), CHUNKS, "--junit-xml", str(xml))) == 1
    capsys.readouterr()
    suite = ET.parse(xml).getroot().find("testsuite")
    failed = {(t.get("classname"), t.get("name")) for t in suite.findall("testcase") if t.find("failure") is not None}
    # recall@2 hybrid fails (3 of 4 positives found = 0.75 < 1.00); hybrid > each lane still holds
    # (0.75 > 0.50 for both lanes), so exactly one gate and its one case fail.
    assert failed == {("labsrc.gate", "recall@2 hybrid"), ("labsrc.gate.recall@2 hybrid", "code-expects-footwear")}
    trace = json.loads(suite.find("testcase[@name='code-expects-footwear']/failure").text)
    assert trace["case"] == "code-expects-footwear" and trace["expected"] == ["eu-footwear-v1-rule"]


# --- no traceback, in a real process ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["utf16", "bad-out"])
def test_no_traceback_in_a_real_process(tmp_path: Path, kind: str) -> None:
    if kind == "utf16":
        chunks = tmp_path / "chunks.jsonl"
        chunks.write_text(CHUNKS.read_text(encoding="utf-8"), encoding="utf-16")
        args = gate(chunks=chunks)
    else:
        (tmp_path / "f").write_text("x")
        args = gate(CASES, CHUNKS, "--out", str(tmp_path / "f" / "out"))
    proc = subprocess.run([sys.executable, "-m", "labsrc.cli", *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("labsrc: error: ") and "Traceback" not in proc.stderr
