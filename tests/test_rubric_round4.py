"""Coursework round 4 (issue 31): the rubric knows whose work it grades, and step 5 looks at full precision.

- The course's own files (the model answer, the reference cases, their vectors and report) are recognised in a
  submission, whole or in large part, named, and keep it below Applied unless ``--model-answer`` says so on purpose.
- The rubric names the engine and retriever report.json records, not its own replay's.
- Step 5 compares every score and timing with the run to the last digit, names a trace filed under another case,
  and lists what each passing trace was checked for; Production-ready judges the learner's own traces
  (exercise 5's, against the course's cases at top_k=1, where four fail) and candidates (exercise 6's).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from labsrc import InvalidArgument
from labsrc.course import CheckResult, check_candidates_artifact, check_failed_traces, grade
from labsrc.course.checks.precision import rounded_decimals
from labsrc.course.provenance import LARGE_PART, question_key
from labsrc.course.replays import EXERCISE_ARTIFACTS, ExerciseArtifact, replay_exercise

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "fixtures" / "coursework" / "solution"
POLICIES = ROOT / "fixtures" / "policies"
OWN_WORK = "the work is the learner's own, not the course's files"
TRACES = ("compact traces of failed cases: ids, ranks, scores and timings as the run has them; no text, "
          "no restricted content")
CANDIDATES = "the reranker artifact holds only the fused, permitted candidates"


def _evidence(result, level: str) -> dict[str, tuple[bool, str]]:
    verdict = next(v for v in result.levels if v.level == level)
    return {e.criterion: (e.met, e.detail) for e in verdict.evidence}


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _write(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records), encoding="utf-8")


# --- whose work it is --------------------------------------------------------------------------------------


def test_a_verbatim_copy_of_the_model_answer_is_named_and_graded_below_applied(tmp_path):
    """The issue's done-when, as a learner runs it: the CLI in a fresh process, on a copy of the model answer."""
    copy = tmp_path / "my-submission"
    shutil.copytree(SOLUTION, copy)
    done = subprocess.run([sys.executable, "-m", "labsrc.cli", "rubric", str(copy), "--no-latency"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert ("course files: cases.jsonl: all 16 cases are the course's own (the model answer, "
            "fixtures/coursework/solution/cases.jsonl)") in out
    assert "course files: vectors/ is the course's own (the model answer" in out
    assert "course files: report/ is the course's own (the model answer" in out
    assert ("this submission is the course's model answer, not your work, so it cannot reach Applied or above; "
            "write your own cases (exercises 1 and 2), embed them and gate them") in out
    assert "Applied: not reached" in out
    assert out.rstrip().endswith("Highest level reached: Foundational")
    below = subprocess.run([sys.executable, "-m", "labsrc.cli", "rubric", str(copy), "--no-latency",
                            "--min-level", "applied"], capture_output=True, text=True, timeout=300, check=False)
    assert below.returncode == 1 and "below the required level Applied" in below.stdout


def test_the_instructor_flag_grades_the_model_answer_production_ready_and_still_names_it():
    result = grade(SOLUTION, model_answer=True)
    assert result.level == "Production-ready", result.to_text()
    met, detail = _evidence(result, "Applied")[OWN_WORK]
    assert met and detail.endswith("graded as the course's model answer on purpose (--model-answer)")
    assert any(line.startswith("course files: cases.jsonl: all 16 cases") for line in result.inputs)


def test_the_reference_cases_with_the_course_vectors_are_recognised(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    shutil.copy(POLICIES / "cases.jsonl", sub / "cases.jsonl")
    shutil.copytree(POLICIES / "vectors", sub / "vectors")
    result = grade(sub, measure=False)
    met, detail = _evidence(result, "Applied")[OWN_WORK]
    assert not met
    # Round 6: each recognised case is named, the first three by name and then how many more.
    assert detail.startswith("cases.jsonl: all 30 cases are the course's own (the course's reference cases, "
                             "fixtures/policies/cases.jsonl): 'absent-crypto-payment' is course case "
                             "'absent-crypto-payment' (the same question), 'absent-gift-card-eu' is course case "
                             "'absent-gift-card-eu' (the same question), 'apac-exact-gft5' is course case "
                             "'apac-exact-gft5' (the same question) and 27 more; vectors/ is the course's own (the "
                             "course's reference cases, fixtures/policies/vectors/all-MiniLM-L6-v2)")
    assert "this submission is the course's own files, not your work" in detail
    assert result.level == "Foundational"


def test_renamed_reworded_copies_are_still_the_course_cases_and_a_small_part_counts_as_own(tmp_path):
    cases = _lines(SOLUTION / "cases.jsonl")
    # Renamed, notes dropped, case and punctuation changed: the same question by the same caller.
    disguised = [{**c, "name": f"mine-{i}", "query": c["query"].upper() + " ?", "notes": "my own"}
                 for i, c in enumerate(cases)]
    sub = tmp_path / "copied"
    sub.mkdir()
    _write(sub / "cases.jsonl", disguised)
    met, detail = _evidence(grade(sub, measure=False), "Applied")[OWN_WORK]
    assert not met and detail.startswith("cases.jsonl: all 16 cases are the course's own (the model answer")
    assert question_key("luna-48291", "Can I swap; my laptop?") == ("luna-48291", ("can", "i", "swap", "my", "laptop"))
    # Every query reworded but a few: below LARGE_PART, so the work counts as the learner's, and says what it saw.
    # (Reworded by more than a near-copy's two edits: since round 5, "... please" is the course's case.)
    own = [{**c, "query": f"asked in my own words: {c['query']}"} for c in cases]
    kept = int(len(cases) * LARGE_PART) - 1
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    _write(mixed / "cases.jsonl", cases[:kept] + own[kept:])
    met, detail = _evidence(grade(mixed, measure=False), "Applied")[OWN_WORK]
    assert met and detail.startswith(f"cases.jsonl: {kept} of 16 cases are the course's own")
    assert detail.endswith("a small part, the rest is your own")


def test_own_cases_say_nothing_of_the_course_was_recognised(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    _write(sub / "cases.jsonl",
           [{**c, "query": f"asked in my own words: {c['query']}"} for c in _lines(SOLUTION / "cases.jsonl")])
    result = grade(sub, measure=False)
    assert _evidence(result, "Applied")[OWN_WORK] == (
        True, "no case, vector file or report of the course's own was recognised")
    assert not any(line.startswith("course files:") for line in result.inputs)


def test_the_rubric_reports_the_engine_and_retriever_report_json_records(tmp_path):
    sub = tmp_path / "sub"
    shutil.copytree(SOLUTION, sub)
    path = sub / "report" / "report.json"
    report = json.loads(path.read_text(encoding="utf-8"))
    # What `labsrc gate --engine postgres` records (labsrc.engines.postgres.PostgresRetriever.versions).
    report["versions"] = {"retriever": "postgres-retriever-v1", "engine": "postgres", "postgresql": "18.1",
                          "pgvector": "0.8.2", **{k: v for k, v in report["versions"].items() if k != "retriever"}}
    path.write_text(json.dumps(report), encoding="utf-8")
    result = grade(sub, measure=False, model_answer=True)
    assert "report: report/report.json (engine postgres, retriever postgres-retriever-v1)" in result.inputs
    met, detail = _evidence(result, "Production-ready")["a versioned index and a pinned evaluation date"]
    assert met
    assert detail.startswith("report.json records retriever postgres-retriever-v1, engine postgres, "
                             "postgresql 18.1, pgvector 0.8.2, index policy-index/2026-05-27")
    assert detail.endswith("; the rubric replayed your cases in memory with policy-retriever-v2")
    assert "policy-retriever-v2" not in detail.split(";")[0]


# --- step 5 at full precision ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def replay():
    return replay_exercise(POLICIES, EXERCISE_ARTIFACTS["traces"])


def _traces(run) -> list[dict]:
    """Exercise 5's solution: every failed case's trace, with each lane's rank and score per candidate."""
    traces = []
    for o in run.failed_outcomes:
        seen = sorted(set(o.ids["bm25"]) | set(o.ids["dense"]) | set(o.ids["hybrid"]))
        scores = {lane: dict(zip(o.ids[lane], o.scores[lane])) for lane in ("bm25", "dense", "hybrid")}
        traces.append({"case": o.case.name, **o.trace.to_dict(), "candidates": [
            {"chunk_id": cid, **{f"{lane}_rank": o.lane_rank(cid, lane) for lane in ("bm25", "dense", "hybrid")},
             **{f"{lane}_score": scores[lane].get(cid) for lane in ("bm25", "dense", "hybrid")}} for cid in seen]})
    return traces


def test_a_passing_trace_check_lists_what_it_verified(replay):
    result = check_failed_traces(_traces(replay.run), replay.run, replay.chunks, replay.callers)
    assert result.passed, str(result)
    text = str(result)
    assert ("ok trace for case 'eu-paraphrase-rpl14': sparse_ids, dense_ids, fused_ids equal the run's; 2 candidates' "
            "lane ranks equal the run's, and 3 scores to the last digit; versions name retriever, index, sparse, dense, "
            "fusion as the run does; timings_ms for authorize, bm25, dense, fusion equal the run's to the last digit") in text
    assert "ok no trace holds chunk text, a chunk title or a chunk its caller cannot see" in text
    assert "all 6 checks pass" in text


def test_scores_rounded_to_two_decimals_are_named_with_the_tie_they_hide(replay):
    traces = _traces(replay.run)
    for trace in traces:
        for candidate in trace["candidates"]:
            for key in ("bm25_score", "dense_score", "hybrid_score"):
                if candidate[key] is not None:
                    candidate[key] = round(candidate[key], 2)
    result = check_failed_traces(traces, replay.run, replay.chunks, replay.callers)
    assert ("trace for case 'eu-paraphrase-rpl14': candidate eu-laptop-accessories hybrid_score is 0.02, the run's "
            "0.01639344262295082 rounded to 2 decimals: store the full float; rounding to 2 decimals turns 1/61 and "
            "1/62 into the same 0.02 and hides the tie the notebook teaches") in result.problems
    assert set(result.kinds) == {"rounded scores"}
    assert "rounded scores, for example:" in str(result)


def test_rounding_that_makes_a_tie_is_named(replay):
    deep = replay_exercise(POLICIES, ExerciseArtifact(5, "deep", top_k=4)).run
    o = next(o for o in deep.outcomes if o.case.name == "eu-exact-rpl14")
    trace = {"case": o.case.name, **o.trace.to_dict(), "candidates": [
        {"chunk_id": cid, **{f"{lane}_rank": o.lane_rank(cid, lane) for lane in ("bm25", "dense", "hybrid")},
         "hybrid_score": round(score, 2)} for cid, score in sorted(zip(o.ids["hybrid"], o.scores["hybrid"]))]}
    problems = check_failed_traces([trace], deep, replay.chunks, replay.callers).problems
    # 1/64, 1/63 and 1/62: three chunks each lane ranked once, apart in the run, all 0.02 when rounded.
    assert ("trace for case 'eu-exact-rpl14': rounding made ['eu-refurb-monitor-rule', 'eu-refurb-phone-rule', "
            "'eu-refurb-tablet-rule'] tie at hybrid_score 0.02, where the run has 0.015625, 0.015873015873015872, "
            "0.016129032258064516") in problems


def test_timings_rounded_or_from_another_search_are_named(replay):
    traces = _traces(replay.run)
    truth = traces[0]["timings_ms"]["bm25"]
    traces[0]["timings_ms"] = {**traces[0]["timings_ms"], "bm25": round(truth, 3)}
    places = rounded_decimals(round(truth, 3), truth)  # the fewest decimals that give the value: 3, or fewer
    assert places is not None and places <= 3
    traces[1]["timings_ms"] = {**traces[1]["timings_ms"], "dense": traces[1]["timings_ms"]["dense"] * 1.37}
    problems = check_failed_traces(traces, replay.run, replay.chunks, replay.callers).problems
    assert (f"trace for case 'us-exact-rtn30': timings_ms['bm25'] is {round(truth, 3)!r}, the run's {truth!r} rounded "
            f"to {places} decimals: copy o.trace.timings_ms as it is") in problems
    assert any(p.startswith("trace for case 'eu-paraphrase-rpl14': timings_ms['dense'] is ") and p.endswith(
        "take the timings of the failed run's trace (o.trace.timings_ms), not of a new search") for p in problems)
    # A saved file judged against a replay cannot match its timings; only rounding shows.
    saved = _traces(replay.run)
    saved[2]["timings_ms"] = {stage: round(ms, 2) for stage, ms in saved[2]["timings_ms"].items()}
    replayed = check_failed_traces(saved, replay.run, replay.chunks, replay.callers, same_run=False).problems
    assert len(replayed) == 1 and replayed[0].startswith("trace for case 'eu-paraphrase-clm7': timings_ms {")
    assert replayed[0].endswith("are rounded to 2 decimals: store the measured milliseconds at full precision")
    assert check_failed_traces(_traces(replay.run), replay.run, replay.chunks, replay.callers, same_run=False).passed


def test_another_cases_trace_is_named_as_that_case(replay):
    traces = _traces(replay.run)
    traces[1] = {**traces[2], "case": traces[1]["case"]}  # eu-paraphrase-clm7's trace filed as eu-paraphrase-rpl14
    problems = check_failed_traces(traces, replay.run, replay.chunks, replay.callers).problems
    assert problems == ("trace #2, filed under case 'eu-paraphrase-rpl14', is case 'eu-paraphrase-clm7''s trace: its "
                        "sparse_ids, dense_ids and fused_ids are that case's run, not 'eu-paraphrase-rpl14''s; set "
                        "'case' to the case you traced",)


def test_step_6_rejects_rounded_rrf_scores(replay):
    deep = replay_exercise(POLICIES, EXERCISE_ARTIFACTS["candidates"])
    records = _lines(SOLUTION / "step6_candidates.jsonl")
    assert check_candidates_artifact(records, deep.run, deep.chunks, deep.callers).passed
    records[0]["candidates"][0]["rrf_score"] = round(records[0]["candidates"][0]["rrf_score"], 6)
    problems = check_candidates_artifact(records, deep.run, deep.chunks, deep.callers).problems
    assert len(problems) == 1 and "rounded to 6 decimals: store the full float (o.scores['hybrid'])" in problems[0]


# --- Production-ready judges the learner's own traces and candidates ----------------------------------------


def test_production_ready_judges_the_learners_own_traces_and_candidates(tmp_path):
    sub = tmp_path / "sub"
    shutil.copytree(SOLUTION, sub)
    traces = _lines(sub / "step5_traces.jsonl")
    traces[0]["candidates"][0]["dense_score"] = round(traces[0]["candidates"][0]["dense_score"], 2)
    _write(sub / "step5_traces.jsonl", traces)
    (sub / "step6_candidates.jsonl").unlink()
    result = grade(sub, measure=False, model_answer=True)
    met, detail = _evidence(result, "Production-ready")[TRACES]
    assert not met
    assert detail.startswith("step5_traces.jsonl, against the course's cases replayed at top_k=1 (failing "
                             "us-exact-rtn30, eu-paraphrase-rpl14, eu-paraphrase-clm7, eu-paraphrase-footwear): "
                             "trace for case 'us-exact-rtn30': candidate us-restocking-fee dense_score is 0.47")
    met, detail = _evidence(result, "Production-ready")[CANDIDATES]
    assert not met and detail.startswith("no step6_candidates.jsonl: run exercise 6 to the end; its last cell saves it "
                                         "to your submission | report/candidates.jsonl: a record for each of the 16 cases")
    assert result.level == "Strong"


def test_rounded_decimals_finds_the_fewest_places_that_give_the_value():
    assert rounded_decimals(0.02, 1 / 61) == 2  # 0.016393... → 0.02
    assert rounded_decimals(0.02, 1 / 62) == 2  # 0.016129... → 0.02: the tie rounding makes
    assert rounded_decimals(0.0164, 1 / 61) == 4
    assert rounded_decimals(1 / 61, 1 / 61) is None  # the full float is not "rounded"
    assert rounded_decimals(0.017, 1 / 61) is None  # wrong, not rounded
    assert rounded_decimals("0.02", 1 / 61) is None and rounded_decimals(True, 1.0) is None


# --- exercises 5 and 6 save only what passes ---------------------------------------------------------------


def test_save_my_records_checks_before_it_writes_and_leaves_the_old_file(tmp_path, replay):
    from labsrc.course import CheckFailed, save_my_records

    def check(records):
        return check_failed_traces(records, replay.run, replay.chunks, replay.callers)

    good = _traces(replay.run)
    path = save_my_records(tmp_path, "step5_traces.jsonl", good, check)
    assert path == tmp_path / "step5_traces.jsonl" and _lines(path) == good
    before = path.read_bytes()
    bad = [{**good[0], "snippet": "Rule RTN-30. Most unopened items may be returned within 30 days"}, *good[1:]]
    with pytest.raises(CheckFailed, match="contains chunk text"):
        save_my_records(tmp_path, "step5_traces.jsonl", bad, check)
    assert path.read_bytes() == before  # the previous, passing file is untouched
    with pytest.raises(CheckFailed):
        save_my_records(tmp_path, "fresh.jsonl", bad, check)
    assert not (tmp_path / "fresh.jsonl").exists()
    nan = [{**good[0], "timings_ms": {**good[0]["timings_ms"], "extra": float("nan")}}]
    with pytest.raises(Exception, match="timings_ms\\['extra'\\] is nan"):
        save_my_records(tmp_path, "nan.jsonl", nan, check)
    with pytest.raises(InvalidArgument, match=r"record #1 cannot be written as JSON .*nothing was saved"):
        save_my_records(tmp_path, "nan.jsonl", [{"x": float("nan")}], lambda records: CheckResult("any"))
    with pytest.raises(InvalidArgument, match="check must return a CheckResult"):
        save_my_records(tmp_path, "x.jsonl", good, lambda records: True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step5_traces.jsonl"]  # no temporary file behind


def test_the_exercises_save_where_the_rubric_replays(replay):
    """Exercise 5 and 6's runs are the ones the rubric rebuilds: the same top_k and the same file names."""
    spec = (ROOT / "notebooks" / "exercises" / "make_exercises.py").read_text(encoding="utf-8")
    for artifact in EXERCISE_ARTIFACTS.values():
        assert f'save_my_records(SUBMISSION, "{artifact.file}"' in spec
        assert f"GateConfig(top_k={artifact.top_k}," in spec
    assert [o.case.name for o in replay.run.failed_outcomes] == [t["case"] for t in _lines(SOLUTION / "step5_traces.jsonl")]
