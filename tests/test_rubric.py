"""labsrc.course.rubric and ``labsrc rubric``: the shipped solution is Production-ready, the empty hand-in is not
even Foundational, and each level in between is reachable and explained."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from labsrc import InvalidArgument
from labsrc.cli.main import main
from labsrc.course import LEVELS, find_submission, grade, parse_level
from labsrc.course.submission import shell_path

ROOT = Path(__file__).resolve().parent.parent
COURSEWORK = ROOT / "fixtures" / "coursework"
POLICIES = ROOT / "fixtures" / "policies"


def _cases(*names: str) -> str:
    records = {json.loads(line)["name"]: line for line in (POLICIES / "cases.jsonl").read_text(encoding="utf-8").splitlines()}
    return "".join(records[name] + "\n" for name in names)


def _submission(tmp_path: Path, *names: str) -> Path:
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "cases.jsonl").write_text(_cases(*names), encoding="utf-8")
    return sub


TRACES = ("compact traces of failed cases: ids, ranks, scores and timings as the run has them; no text, "
          "no restricted content")


def _evidence(result, level: str) -> dict[str, tuple[bool, str]]:
    verdict = next(v for v in result.levels if v.level == level)
    return {e.criterion: (e.met, e.detail) for e in verdict.evidence}


# --- the shipped submissions --------------------------------------------------------------------


def test_the_solution_is_production_ready():
    result = grade(COURSEWORK / "solution", model_answer=True)
    assert result.level == "Production-ready", result.to_text()
    assert all(v.met for v in result.levels)
    assert result.reaches("strong") and result.reaches("Production-ready")


def test_the_empty_student_submission_is_below_foundational():
    result = grade(COURSEWORK / "student", measure=False)
    assert result.level is None
    assert not result.reaches("Foundational")
    text = result.to_text()
    assert "cases.jsonl holds no cases" in text
    assert "no wrong_region case" in text
    assert text.endswith("Highest level reached: below Foundational")


def test_cli_exit_codes_follow_min_level(capsys):
    assert main(["rubric", str(COURSEWORK / "solution"), "--model-answer", "--min-level", "production-ready"]) == 0
    assert "Highest level reached: Production-ready" in capsys.readouterr().out
    assert main(["rubric", str(COURSEWORK / "student"), "--min-level", "Foundational", "--no-latency"]) == 1
    out = capsys.readouterr().out
    assert "Highest level reached: below Foundational" in out
    assert "below the required level Foundational" in out
    # Without --min-level the grade is only reported.
    assert main(["rubric", str(COURSEWORK / "student"), "--no-latency"]) == 0


def test_cli_json_output(capsys):
    assert main(["rubric", str(COURSEWORK / "student"), "--json", "--no-latency"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["level"] is None
    assert [level["level"] for level in data["levels"]] == list(LEVELS)


def test_cli_bad_input_exits_2(tmp_path, capsys):
    assert main(["rubric", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["rubric", str(COURSEWORK / "student"), "--min-level", "expert"]) == 2
    assert "valid levels are ['Foundational', 'Applied', 'Strong', 'Production-ready']" in capsys.readouterr().err


# --- each level, and the evidence against the next -------------------------------------------------


def test_an_exact_code_ranked_first_is_foundational_and_the_term_signal_is_explained(tmp_path):
    result = grade(_submission(tmp_path, "eu-exact-rpl14"), measure=False, model_answer=True)
    assert result.level == "Foundational"
    met, detail = _evidence(result, "Foundational")["BM25 ranks the code's chunk first, through the shared code term"]
    assert met
    assert "eu-exact-rpl14: BM25 ranks eu-refurb-v2-rule first" in detail and "'rpl-14' (idf" in detail
    assert _evidence(result, "Applied")["a paraphrase BM25 misses at k=2"] == (False, "no paraphrase case")


def test_a_recovered_paraphrase_is_applied(tmp_path):
    result = grade(_submission(tmp_path, "eu-exact-rpl14", "eu-paraphrase-rpl14"), measure=False, model_answer=True)
    assert result.level == "Applied"
    assert _evidence(result, "Applied")["the dense lane recovers it"] == (True, "eu-paraphrase-rpl14 (dense rank 1)")
    met, detail = _evidence(result, "Strong")["at least 8 permitted positives: exact codes, paraphrases, mixed"]
    assert not met and "only 2 positive case(s)" in detail and "no mixed positive case" in detail


def test_the_solution_without_vectors_is_strong_but_not_production_ready(tmp_path):
    sub = tmp_path / "sub"
    shutil.copytree(COURSEWORK / "solution", sub, ignore=shutil.ignore_patterns("vectors"))
    result = grade(sub, model_answer=True)
    assert result.level == "Strong", result.to_text()
    met, detail = _evidence(result, "Production-ready")["a versioned real encoder covering every case query"]
    assert not met and "no vectors/ folder" in detail


def test_a_case_expecting_a_hidden_chunk_is_named(tmp_path):
    sub = _submission(tmp_path, "eu-exact-rpl14")
    with (sub / "cases.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"name": "vip-refund", "query": "VIP-RPL-1", "caller": "luna-48291",
                                 "kind": "positive", "expected": ["merchant-vip-refurb"]}) + "\n")
    result = grade(sub, measure=False, model_answer=True)
    _, detail = _evidence(result, "Strong")["at least 8 permitted positives: exact codes, paraphrases, mixed"]
    assert ("case 'vip-refund', field 'expected', value 'merchant-vip-refurb': caller 'luna-48291' cannot see this "
            "chunk on 2026-05-27 (restricted)") in detail


def test_a_malformed_case_file_stops_grading_with_the_error_alone(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "cases.jsonl").write_text(_cases("eu-exact-rpl14") + '{"name": "broken", "query": "x"\n', encoding="utf-8")
    result = grade(sub, measure=False, model_answer=True)
    assert result.level is None and result.levels == ()
    assert "line 2" in result.error and "malformed JSON" in result.error


def test_a_typo_in_a_field_name_prints_the_error_and_no_knock_on_lines(tmp_path):
    sub = _submission(tmp_path, "eu-exact-rpl14")
    with (sub / "cases.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"name": "typo", "query": "CLM-7", "caller": "luna-48291", "kind": "positive",
                                 "expcted": ["eu-carrier-loss-v1"]}) + "\n")
    text = grade(sub, measure=False, model_answer=True).to_text()
    assert "Cannot grade: the cases file does not load:" in text and "line 2" in text and "expcted" in text
    assert "unknown field" in text
    for knock_on in ("add ", "Foundational:", "[ ]", "no wrong_region case"):
        assert knock_on not in text, knock_on
    assert text.endswith("Highest level reached: below Foundational")


def test_a_trace_with_chunk_text_blocks_production_ready(tmp_path):
    sub = tmp_path / "sub"
    shutil.copytree(COURSEWORK / "solution", sub)
    (sub / "report" / "failed_traces.jsonl").write_text(
        json.dumps({"case": "eu-exact-rpl14", "text": "Rule RPL-14. Damaged refurbished laptops qualify for replacement "
                    "within 14 days of delivery when damage is reported within 48 hours."}) + "\n",
        encoding="utf-8",
    )
    result = grade(sub, model_answer=True)
    assert result.level == "Strong"
    met, detail = _evidence(result, "Production-ready")[TRACES]
    assert not met
    assert "trace for case 'eu-exact-rpl14' contains chunk text (of ['eu-refurb-v2-rule'])" in detail
    assert "that case passed; keep traces for failed cases only" in detail


def test_stale_report_numbers_are_caught(tmp_path):
    sub = tmp_path / "sub"
    shutil.copytree(COURSEWORK / "solution", sub)
    report = json.loads((sub / "report" / "report.json").read_text(encoding="utf-8"))
    report["recall"]["lanes"]["dense"] = 1.0
    (sub / "report" / "report.json").write_text(json.dumps(report), encoding="utf-8")
    result = grade(sub, measure=False, model_answer=True)
    met, detail = _evidence(result, "Strong")["the submission reports Recall@k for bm25, dense and hybrid"]
    assert not met and "lanes ['dense'] are missing or differ from the re-run" in detail


# --- small parts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["production-ready", "Production ready", "PRODUCTION_READY", "productionready"])
def test_parse_level_ignores_case_and_separators(name):
    assert parse_level(name) == "Production-ready"


def test_parse_level_lists_the_valid_levels():
    with pytest.raises(InvalidArgument, match="valid levels are"):
        parse_level("expert")


def test_find_submission_falls_back_to_the_course_files():
    sub = find_submission(COURSEWORK / "student")
    assert sub.callers == ROOT / "fixtures" / "policies" / "callers.json"
    assert sub.vectors is None and sub.report is None
    solution = find_submission(COURSEWORK / "solution")
    assert solution.vectors == COURSEWORK / "solution" / "vectors" / "all-MiniLM-L6-v2"
    assert solution.config == COURSEWORK / "solution" / "gate.json"


def test_vectors_made_from_other_chunk_texts_block_production_ready(tmp_path):
    sub = tmp_path / "sub"
    shutil.copytree(COURSEWORK / "solution", sub)
    edited = (POLICIES / "chunks.jsonl").read_text(encoding="utf-8").replace(
        "qualify for replacement within 14 days", "qualify for replacement within 21 days"
    )
    (sub / "chunks.jsonl").write_text(edited, encoding="utf-8")
    result = grade(sub, measure=False, model_answer=True)
    met, detail = _evidence(result, "Production-ready")["a versioned real encoder covering every case query"]
    assert not met and "the vectors were made from other chunk texts" in detail


# --- the course's thresholds, evidence that exists, vectors, stale reports -----------------------------


RELAXED = {"min_recall": {"hybrid": 0.5}, "hybrid_rule": "at_least", "p95_budget_ms": {"dense": 80}}


def test_a_relaxed_gate_json_is_shown_flagged_and_blocks_production_ready(tmp_path):
    sub = tmp_path / "sub"
    shutil.copytree(COURSEWORK / "solution", sub)
    (sub / "gate.json").write_text(json.dumps({**json.loads((POLICIES / "gate.json").read_text()), **RELAXED}))
    result = grade(sub, measure=False, model_answer=True)
    assert result.run.config.min_recall["hybrid"] == 1.0 and result.run.config.hybrid_rule == "strict"
    assert "  relaxes min_recall[hybrid] 0.50 < the course's 1.00" in result.inputs
    assert "  relaxes hybrid_rule 'at_least' is weaker than the course's 'strict'" in result.inputs
    assert "  relaxes p95_budget_ms[dense] 80 ms > the course's 40 ms" in result.inputs
    assert any(line.startswith("your gate.json: top_k 2, rrf_k 60, min_recall hybrid 0.50, hybrid_rule 'at_least'")
               for line in result.inputs)
    met, detail = _evidence(result, "Production-ready")["the submission's gate.json keeps the course's thresholds"]
    assert not met and detail.startswith("it relaxes min_recall[hybrid] 0.50 < the course's 1.00")


def test_a_relaxed_gate_json_cannot_raise_the_grade(tmp_path):
    """A hybrid that misses one positive fails the course's Recall@2 = 1.0: relaxing it to 0.5 changes nothing."""
    plain = _submission(tmp_path, "eu-exact-rpl14", "eu-paraphrase-rpl14", "eu-exact-clm7")
    with (plain / "cases.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"name": "vague", "query": "qwerty zxcv", "caller": "luna-48291",
                                 "kind": "positive", "expected": ["eu-battery-safety"]}) + "\n")
    relaxed = tmp_path / "relaxed"
    shutil.copytree(plain, relaxed)
    (relaxed / "gate.json").write_text(json.dumps(RELAXED))
    before, after = grade(plain, measure=False, model_answer=True), grade(relaxed, measure=False, model_answer=True)
    assert before.run.recall["hybrid"] == 0.75  # 3 of 4 positives
    assert after.level == before.level == "Applied"
    assert [v.met for v in after.levels] == [v.met for v in before.levels]


def test_criteria_with_zero_evidence_do_not_tick(tmp_path):
    sub = tmp_path / "sub"
    shutil.copytree(COURSEWORK / "solution", sub)
    positives = [line for line in (sub / "cases.jsonl").read_text().splitlines() if '"positive"' in line]
    (sub / "cases.jsonl").write_text("\n".join(positives) + "\n")
    result = grade(sub, measure=False, model_answer=True)
    strong_ = _evidence(result, "Strong")
    met, detail = next(v for k, v in strong_.items() if k.startswith("negative safety gates pass"))
    assert not met and "restricted exclusion: no restricted cases" in detail
    assert "a gate with no cases proves nothing: add restricted, superseded, wrong_region, absent case(s)" in detail
    # No case of the solution's own run failed: its report's traces are judged empty, and its exercise 5 traces
    # (the course's cases at top_k=1, where four fail) are judged in full. The criterion always counts.
    solution = grade(COURSEWORK / "solution", measure=False, model_answer=True)
    trace = next(e for v in solution.levels for e in v.evidence if e.criterion == TRACES)
    assert (trace.met, trace.applicable, trace.mark) == (True, True, "x")
    assert "report/failed_traces.jsonl: empty, as it should be: none of your cases failed" in trace.detail
    assert ("step5_traces.jsonl, against the course's cases replayed at top_k=1 (failing us-exact-rtn30, "
            "eu-paraphrase-rpl14, eu-paraphrase-clm7, eu-paraphrase-footwear): a trace for each of the 4 failed "
            "case(s)") in trace.detail
    assert "not counted" not in solution.to_text()


def test_queries_without_vectors_are_named_with_the_embed_command(tmp_path):
    sub = _submission(tmp_path, "eu-exact-rpl14")
    with (sub / "cases.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"name": "my-paraphrase", "query": "exchange my faulty secondhand computer",
                                 "caller": "luna-48291", "kind": "positive", "expected": ["eu-refurb-v2-rule"]}) + "\n")
    result = grade(sub, measure=False, model_answer=True)
    hint = (f"1 of your case queries has no vector: run `labsrc embed --chunks {shell_path(POLICIES / 'chunks.jsonl')} "
            f"--queries {shell_path(sub / 'cases.jsonl')} --out {shell_path(sub / 'vectors' / 'all-MiniLM-L6-v2')}`")
    assert any(line.startswith(f"vectors: {hint}") for line in result.inputs)
    met, detail = _evidence(result, "Applied")["the dense lane recovers it"]
    assert not met and detail.startswith(hint) and detail.endswith("without one the dense lane is empty for my-paraphrase")
    assert "are the vectors a real encoder's" not in result.to_text()


def test_a_report_of_other_cases_is_stale(tmp_path):
    sub = tmp_path / "sub"
    shutil.copytree(COURSEWORK / "solution", sub)
    lines = (sub / "cases.jsonl").read_text().splitlines()
    (sub / "cases.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    result = grade(sub, measure=False, model_answer=True)
    assert any(line.startswith("report: stale: report/report.json was made from other cases than cases.jsonl: "
                               "re-run `labsrc gate") for line in result.inputs), result.inputs
    met, detail = _evidence(result, "Strong")["the submission reports Recall@k for bm25, dense and hybrid"]
    assert not met and detail.startswith("stale:")
    # A report without the hash (an older labsrc) is stale too: the hash is recorded, never inferred.
    shutil.copytree(COURSEWORK / "solution", tmp_path / "old")
    report = json.loads((tmp_path / "old" / "report" / "report.json").read_text())
    del report["cases_sha256"]
    (tmp_path / "old" / "report" / "report.json").write_text(json.dumps(report))
    assert any("records no cases hash" in line for line in grade(tmp_path / "old", measure=False, model_answer=True).inputs)


# --- issue 23: the rubric's own words -------------------------------------------------------------


def _commands(text: str) -> list[str]:
    """Every ``labsrc ...`` command the rubric prints between backticks, in order, without repeats."""
    import re

    return list(dict.fromkeys(re.findall(r"`(labsrc [^`]+)`", text)))


def test_every_command_the_rubric_prints_runs_as_printed(tmp_path, monkeypatch):
    import shlex

    from labsrc.cli.main import build_parser

    sub = tmp_path / "my-submission"
    shutil.copytree(COURSEWORK / "solution", sub, ignore=shutil.ignore_patterns("report"))
    monkeypatch.chdir(tmp_path)  # as a learner runs it, from the folder that holds the submission
    before = grade(Path("my-submission"), measure=False, model_answer=True)
    commands = _commands(before.to_text())
    gate = [c for c in commands if c.startswith("labsrc gate ")]
    assert gate == [
        f"labsrc gate --chunks {POLICIES / 'chunks.jsonl'} --callers {POLICIES / 'callers.json'} "
        "--cases my-submission/cases.jsonl --vectors my-submission/vectors/all-MiniLM-L6-v2 "
        f"--config {POLICIES / 'gate.json'} --out my-submission/report"
    ]
    for command in commands:  # each one parses as the CLI reads it: no "...", no "course default (...)"
        argv = shlex.split(command)[1:]
        build_parser().parse_args(argv)
        assert "..." not in command and "course default" not in command
    assert main(shlex.split(gate[0])[1:]) == 0
    after = grade(Path("my-submission"), measure=False, model_answer=True)
    assert "report: report/report.json (retriever policy-retriever-v2)" in after.inputs


def test_the_embed_command_for_a_submission_without_vectors_names_real_paths(tmp_path, monkeypatch):
    import shlex

    from labsrc.cli.main import build_parser

    sub = tmp_path / "my-submission"
    sub.mkdir()
    shutil.copy(COURSEWORK / "solution" / "cases.jsonl", sub / "cases.jsonl")
    monkeypatch.chdir(tmp_path)
    text = grade(Path("my-submission"), measure=False, model_answer=True).to_text()
    embed = [c for c in _commands(text) if c.startswith("labsrc embed ")]
    assert embed == [f"labsrc embed --chunks {POLICIES / 'chunks.jsonl'} --queries my-submission/cases.jsonl "
                     "--out my-submission/vectors/all-MiniLM-L6-v2"]
    args = build_parser().parse_args(shlex.split(embed[0])[1:])
    assert Path(args.chunks).is_file() and Path(args.queries).is_file()


def test_a_submission_that_fails_its_own_tighter_gate_is_told_so(tmp_path):
    sub = tmp_path / "sub"
    shutil.copytree(COURSEWORK / "solution", sub)
    tighter = {**json.loads((POLICIES / "gate.json").read_text()), "min_recall": {"hybrid": 1.0, "bm25": 1.0}}
    (sub / "gate.json").write_text(json.dumps(tighter))
    result = grade(sub, measure=False, model_answer=True)
    assert "  it relaxes none of the course's thresholds" in result.inputs
    met, detail = _evidence(result, "Production-ready")["the submission passes its own gate.json"]
    assert not met
    assert detail.startswith("recall@2 bm25: ")
    assert detail.endswith("your gate.json would block this release; fix the cases or the retrieval, or loosen "
                           "your own gate back towards the course's")
    assert result.level != "Production-ready"


def test_a_submission_that_passes_its_own_tighter_gate_says_so(tmp_path):
    sub = tmp_path / "sub"
    shutil.copytree(COURSEWORK / "solution", sub)
    tighter = {**json.loads((POLICIES / "gate.json").read_text()), "min_recall": {"hybrid": 1.0, "dense": 0.5}}
    (sub / "gate.json").write_text(json.dumps(tighter))
    met, detail = _evidence(grade(sub, measure=False, model_answer=True), "Production-ready")["the submission passes its own gate.json"]
    assert met and detail.startswith("all ") and detail.endswith("gates of your gate.json pass")
