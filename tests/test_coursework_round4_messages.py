"""Coursework round 4 (issue 31, items 3 and 4): messages that blamed the wrong thing, and save cells that wrote first.

Each test feeds one mistake a learner made to the check (or loader) that meets it and asserts the message
now names the actual mistake and its fix. The save cells of exercises 1 and 2 call
labsrc.course.save_my_cases, which checks before it writes and replaces the file atomically.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from labsrc import EVAL_DATE, Case, PolicyRetriever, load_callers, load_cases, load_chunks
from labsrc.course import CheckFailed, CheckResult, save_my_cases
from labsrc.course.checks import (
    check_adversarial_cases,
    check_dense_source,
    check_encoder_report,
    check_lane_comparison,
    check_positive_cases,
)
from labsrc.errors import InvalidArgument, InvalidRecord
from labsrc.evaluation.latency import LatencyReport
from labsrc.gate.config import GateConfig
from labsrc.gate.gates import release_gate
from labsrc.lanes.embed import load_embeddings

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ROOT / "fixtures" / "policies"
SOLUTION = ROOT / "fixtures" / "coursework" / "solution"
VECTORS = SOLUTION / "vectors" / "all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def corpus():
    chunks = load_chunks(POLICIES / "chunks.jsonl")
    callers = {c.actor_id: c for c in load_callers(POLICIES / "callers.json")}
    return chunks, callers


@pytest.fixture(scope="module")
def solution_cases():
    return load_cases(SOLUTION / "cases.jsonl")


def _submission(parent: Path) -> Path:
    """A learner's folder: the model answer's cases.jsonl and a copy of its vectors, in the course's layout."""
    folder = parent / "my-submission"
    folder.mkdir()
    shutil.copy2(SOLUTION / "cases.jsonl", folder / "cases.jsonl")
    shutil.copytree(VECTORS, folder / "vectors" / "all-MiniLM-L6-v2")
    return folder


# --- 1. a superseded case dated before its successor took effect -----------------------------------


def test_a_superseded_case_dated_before_the_successor_is_told_its_date_is_wrong(corpus, solution_cases):
    chunks, callers = corpus
    adversarial = [c for c in solution_cases if c.kind != "positive"]
    # eu-carrier-loss-v0 ends on 2026-02-09; its successor eu-carrier-loss-v1 takes effect on 2026-02-10.
    early = Case(name="superseded-clm7-early", query="CLM-7 refunded once the carrier closes its investigation",
                 caller="luna-48291", kind="superseded", forbidden=("eu-carrier-loss-v0",), on_date=dt.date(2026, 2, 1))
    problems = check_adversarial_cases([*adversarial, early], chunks, callers, EVAL_DATE).problems
    assert problems == (
        "case 'superseded-clm7-early', field 'on_date', value '2026-02-01': the forbidden chunk eu-carrier-loss-v0 is "
        "right, the date is not: its successor eu-carrier-loss-v1 takes effect on 2026-02-10, so on 2026-02-01 "
        "eu-carrier-loss-v0 is still the current version (in force until 2026-02-09) and the boundary rightly shows "
        'it; date the case on or after 2026-02-10 ("on_date": "2026-02-10"), or drop on_date (the run\'s date, '
        "2026-05-27, is after it)",
    )
    assert not any("forbid only chunks the boundary hides" in p for p in problems)
    # Dated on the successor's first day, the same case passes.
    fixed = dataclasses.replace(early, on_date=dt.date(2026, 2, 10))
    assert check_adversarial_cases([*adversarial, fixed], chunks, callers, EVAL_DATE).passed


def test_a_not_yet_effective_case_dated_after_the_chunk_started_is_told_its_date_is_wrong(corpus, solution_cases):
    chunks, callers = corpus
    adversarial = [c for c in solution_cases if c.kind != "positive"]
    # eu-refurb-v2-rule takes effect on 2026-04-01: on 2026-04-15 it is in force, not "not yet effective".
    late = Case(name="nye-rpl14-late", query="RPL-14 replacement within 14 days", caller="luna-48291",
                kind="not_yet_effective", forbidden=("eu-refurb-v2-rule",), on_date=dt.date(2026, 4, 15))
    problems = check_adversarial_cases([*adversarial, late], chunks, callers, EVAL_DATE).problems
    assert problems == (
        "case 'nye-rpl14-late', field 'on_date', value '2026-04-15': the forbidden chunk eu-refurb-v2-rule is right, "
        "the date is not: it takes effect on 2026-04-01, so on 2026-04-15 it is already in force and the boundary "
        'rightly shows it; date the case before 2026-04-01 ("on_date": "2026-03-31" at the latest)',
    )


# --- 2. MODEL.json without 'normalized' -------------------------------------------------------------


GOOD_REPORT = {
    "model": "sentence-transformers/all-MiniLM-L6-v2",
    "dim": 384,
    "normalized": True,
    "dense_wins": "eu-paraphrase-rpl14",
    "shared_terms": set(),
    "bm25_wins": "eu-exact-clm7",
}


def test_a_model_record_without_normalized_blames_the_record_not_the_report(tmp_path, corpus, solution_cases):
    chunks, callers = corpus
    folder = _submission(tmp_path) / "vectors" / "all-MiniLM-L6-v2"
    record = json.loads((folder / "MODEL.json").read_text(encoding="utf-8"))
    del record["normalized"]
    (folder / "MODEL.json").write_text(json.dumps(record), encoding="utf-8")
    (folder / "checksums.json").unlink()  # as a folder written before the lab recorded checksums
    source = load_embeddings(folder, chunks=chunks, allow_live=False)
    command = (f"labsrc embed --chunks fixtures/policies/chunks.jsonl --queries my-submission/cases.jsonl "
               f"--out {folder}")
    problems = check_encoder_report(GOOD_REPORT, source, solution_cases, chunks, callers, EVAL_DATE).problems
    assert problems[0] == (
        f"{folder / 'MODEL.json'} lacks ['normalized'] (labsrc embed records them in every folder it writes); your "
        f"report['normalized'] = True is not the problem, MODEL.json is: re-run `{command}` (the 'embed' extra) "
        "to rewrite MODEL.json"
    )
    assert not any(p.startswith("report['normalized']") for p in problems), problems
    assert not any("does not say normalized" in p for p in problems), problems
    # The check of the source alone says the same, without a report to absolve.
    alone = check_dense_source(source, solution_cases).problems
    assert alone == (
        f"{folder / 'MODEL.json'} lacks ['normalized'] (labsrc embed records them in every folder it writes): "
        f"re-run `{command}` (the 'embed' extra) to rewrite MODEL.json",
    )


# --- 3. NaN in a vector matrix ----------------------------------------------------------------------


@pytest.mark.parametrize("checksums", [True, False], ids=["with-checksums", "without-checksums"])
@pytest.mark.parametrize(("matrix", "ids_file", "what"), [("queries.npy", "query_ids.txt", "query"),
                                                          ("corpus.npy", "corpus_ids.txt", "chunk")])
def test_nan_in_a_vector_matrix_names_the_file_the_ids_and_the_embed_command(
        tmp_path, corpus, matrix, ids_file, what, checksums):
    chunks, _ = corpus
    submission = _submission(tmp_path)
    folder = submission / "vectors" / "all-MiniLM-L6-v2"
    if not checksums:
        (folder / "checksums.json").unlink()
    rows = np.load(folder / matrix)
    rows[3, 5] = np.nan
    rows[7, 0] = np.inf
    np.save(folder / matrix, rows)
    ids = (folder / ids_file).read_text(encoding="utf-8").split()
    with pytest.raises(InvalidRecord) as info:
        load_embeddings(folder, chunks=chunks)
    command = (f"labsrc embed --chunks fixtures/policies/chunks.jsonl --queries {submission / 'cases.jsonl'} "
               f"--out {folder}")
    assert str(info.value) == (
        f"{folder / matrix}, field 'values': 2 row(s) hold NaN or infinite values: row 4 ({what} id {ids[3]!r}), "
        f"row 8 ({what} id {ids[7]!r}) (row i is line i of {ids_file}); such a vector ranks nothing: the vector "
        f"folder is broken, not your cases. Re-run `{command}` (the 'embed' extra) to write it again"
    )


# --- 4. percentiles by numpy's 'nearest' method ----------------------------------------------------


def test_p50_and_p95_by_the_nearest_method_are_named_nearest(corpus):
    chunks, callers = corpus
    source = load_embeddings(POLICIES / "vectors" / "all-MiniLM-L6-v2", chunks=chunks, allow_live=False)
    cases = load_cases(POLICIES / "cases.jsonl")
    config = GateConfig(top_k=2, warmup=0, repetitions=1, on_date=EVAL_DATE)
    run = release_gate(PolicyRetriever(chunks, source), cases, callers, config, measure=False)
    # 60 distinct samples: 'nearest' takes x[30] for p50 (h = 29.5 rounds to even) as 'higher' does, and x[56]
    # for p95 (h = 56.05) as 'inverted_cdf' does; only 'nearest' gives both.
    samples = tuple(float(i) ** 1.5 for i in range(1, 61))
    stages = ("authorize", "bm25", "dense", "fusion")
    run = dataclasses.replace(run, latency=LatencyReport({s: samples for s in stages}, 0, 1, len(samples)))
    latency = {s: {"p50": run.latency.p50_ms[s], "p95": run.latency.p95_ms[s]} for s in stages}
    latency["dense"] = {q: float(np.percentile(samples, n, method="nearest")) for q, n in (("p50", 50), ("p95", 95))}
    assert latency["dense"]["p50"] == float(np.percentile(samples, 50, method="higher"))
    assert latency["dense"]["p95"] == float(np.percentile(samples, 95, method="inverted_cdf"))
    problems = check_lane_comparison(dict(run.recall), latency, run).problems
    assert len(problems) == 2, problems
    for stat, q, other, other_q in (("p50", 50, "p95", 95), ("p95", 95, "p50", 50)):
        problem = next(p for p in problems if p.startswith(f"stage dense {stat} is "))
        assert (f"your p50 and p95 are both the nearest percentile (numpy method='nearest'): "
                f"numpy.percentile(samples, {q}, method='nearest') gives your {stat} and "
                f"numpy.percentile(samples, {other_q}, method='nearest') your {other}") in problem
        assert "'higher'" not in problem and "'inverted_cdf'" not in problem
    # With no one method for both (p50 right, p95 by nearest rank), each number is diagnosed on its own.
    latency["dense"] = {"p50": run.latency.p50_ms["dense"],
                        "p95": float(np.percentile(samples, 95, method="inverted_cdf"))}
    (problem,) = check_lane_comparison(dict(run.recall), latency, run).problems
    assert ("your p95 is the nearest-rank percentile (numpy method='inverted_cdf'), or methods 'lower' and 'nearest', "
            "which give the same p95 on these samples; the run uses linear interpolation") in problem


# --- 5. a chunk id with a trailing space ------------------------------------------------------------


def test_a_chunk_id_with_a_trailing_space_is_named_with_repr_and_stripped(corpus, tmp_path):
    chunks, callers = corpus
    padded = Case(name="us-exact-rtn30", query="RTN-30", caller="dana-us-17", kind="positive",
                  expected=("us-return-window-v2 ",))
    problems = check_positive_cases([padded], chunks, callers, EVAL_DATE, minimum=1).problems
    assert (
        "case 'us-exact-rtn30', field 'expected', value 'us-return-window-v2 ': no stored chunk has this id; check the "
        "spelling against chunks.jsonl; 'us-return-window-v2 ' has a trailing space: stripped, it is "
        "'us-return-window-v2', a stored chunk's id; remove the space"
    ) in problems
    assert not any("did you mean" in p for p in problems), problems
    # load_cases, which the save cells and exercise 3 use, says the same.
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps(padded.to_dict()) + "\n", encoding="utf-8")
    with pytest.raises(InvalidRecord) as info:
        load_cases(path, chunk_ids={c.chunk_id for c in chunks})
    assert str(info.value) == (
        f"{path}, line 1, field 'expected': unknown chunk id(s) ['us-return-window-v2 ']; 'us-return-window-v2 ' has "
        "a trailing space: stripped, it is 'us-return-window-v2', a stored chunk's id; remove the space"
    )


def test_a_padded_id_that_is_unknown_even_stripped_still_gets_the_nearest_ids(corpus):
    chunks, callers = corpus
    case = Case(name="typo", query="RTN-30", caller="dana-us-17", kind="positive", expected=(" us-return-window-v3",))
    problems = check_positive_cases([case], chunks, callers, EVAL_DATE, minimum=1).problems
    assert any(p.endswith("' us-return-window-v3' has a leading space, and no stored chunk has the stripped id "
                          "'us-return-window-v3' either; did you mean 'us-return-window-v2' or 'us-return-window-v1'?")
               for p in problems), problems


# --- save cells: check first, write atomically -----------------------------------------------------


def _ids(corpus):
    chunks, callers = corpus
    return {"chunk_ids": {c.chunk_id for c in chunks}, "caller_ids": set(callers)}


def _positive_check(corpus):
    chunks, callers = corpus
    return lambda cases: check_positive_cases(cases, chunks, callers, EVAL_DATE)


def test_a_failing_check_saves_nothing_and_leaves_the_previous_file(tmp_path, corpus, solution_cases):
    submission = _submission(tmp_path)
    before = (submission / "cases.jsonl").read_bytes()
    bad = [Case(name="vip-refund", query="VIP-RPL-1 refund", caller="luna-48291", kind="positive",
                expected=("merchant-vip-refurb",))]
    with pytest.raises(CheckFailed) as info:
        save_my_cases(submission, bad, _positive_check(corpus), part="positive", **_ids(corpus))
    assert "case 'vip-refund', field 'expected', value 'merchant-vip-refurb': caller 'luna-48291' cannot see" in str(info.value)
    assert (submission / "cases.jsonl").read_bytes() == before
    assert sorted(p.name for p in submission.iterdir()) == ["cases.jsonl", "vectors"]  # no temporary file


def test_a_failing_adversarial_check_saves_nothing(tmp_path, corpus, solution_cases):
    chunks, callers = corpus
    submission = _submission(tmp_path)
    before = (submission / "cases.jsonl").read_bytes()
    # A restricted case forbidding a chunk Luna may see: load_cases accepts it, the exercise's check does not.
    bad = [Case(name="restricted-visible", query="RPL-14", caller="luna-48291", kind="restricted",
                forbidden=("eu-refurb-v2-rule",))]
    with pytest.raises(CheckFailed):
        save_my_cases(submission, bad, lambda cs: check_adversarial_cases(cs, chunks, callers, EVAL_DATE),
                      part="adversarial", **_ids(corpus))
    assert (submission / "cases.jsonl").read_bytes() == before
    assert sorted(p.name for p in submission.iterdir()) == ["cases.jsonl", "vectors"]


def test_a_passing_check_replaces_its_part_and_keeps_the_other(tmp_path, corpus, solution_cases):
    chunks, callers = corpus
    submission = _submission(tmp_path)
    positives = [c for c in solution_cases if c.kind == "positive"]
    adversarial = [c for c in solution_cases if c.kind != "positive"]
    saved = save_my_cases(submission, positives, _positive_check(corpus), part="positive", **_ids(corpus))
    assert saved == [*positives, *adversarial] == load_cases(submission / "cases.jsonl")
    # Exercise 2 with one adversarial case fewer: the positives are kept, the adversarial part replaced.
    fewer = adversarial[1:]
    saved = save_my_cases(submission, fewer, lambda cs: CheckResult("ok", passes=("stub",)), part="adversarial",
                          **_ids(corpus))
    assert saved == [*positives, *fewer] == load_cases(submission / "cases.jsonl")
    assert sorted(p.name for p in submission.iterdir()) == ["cases.jsonl", "vectors"]
    # A first save into an empty folder writes the file.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert save_my_cases(empty, positives, _positive_check(corpus), part="positive", **_ids(corpus)) == positives


def test_a_save_load_cases_would_refuse_writes_nothing(tmp_path, corpus, solution_cases):
    submission = _submission(tmp_path)
    before = (submission / "cases.jsonl").read_bytes()
    unknown = Case(name="unknown-chunk", query="RPL-14", caller="luna-48291", kind="positive",
                   expected=("eu-refurb-v9-rule",))
    with pytest.raises(InvalidRecord) as info:  # a check that lets it through does not make the file valid
        save_my_cases(submission, [unknown], lambda cs: CheckResult("ok"), part="positive", **_ids(corpus))
    assert str(info.value) == (
        f"{submission / 'cases.jsonl'}, line 1, field 'expected': case 'unknown-chunk': unknown chunk id(s) "
        "['eu-refurb-v9-rule']; nothing was saved"
    )
    assert (submission / "cases.jsonl").read_bytes() == before
    with pytest.raises(InvalidArgument, match=r"part 'negative' is not a part of cases.jsonl; parts are \['positive', 'adversarial'\]"):
        save_my_cases(submission, [], lambda cs: CheckResult("ok"), part="negative")
    first = tmp_path / "no-exercise-1"
    first.mkdir()
    with pytest.raises(InvalidArgument, match="run exercise 1"):  # exercise 2 before exercise 1
        save_my_cases(first, [], lambda cs: CheckResult("ok"), part="adversarial")
    assert list(first.iterdir()) == []
