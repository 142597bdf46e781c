"""Grading the coursework against the lesson's four-level rubric.

A submission is a folder::

    cases.jsonl          the learner's cases (required), the gate-harness format
    callers.json         optional; default: the course's callers (fixtures/policies)
    chunks.jsonl         optional; default: the course's corpus
    gate.json            optional; shown and checked, but never used to grade: the
                         course's thresholds (fixtures/policies/gate.json) always are
    vectors/             optional; a vector directory written by ``labsrc embed``
                         (vectors/MODEL.json, or one vectors/<model>/MODEL.json)
    report/              optional; the learner's ``labsrc gate --out report`` folder
    step5_traces.jsonl   optional; exercise 5's compact traces (the course's cases at top_k=1)
    step6_candidates.jsonl  optional; exercise 6's reranker candidates (the course's cases at top_k=4)

:func:`grade` replays the cases through the permission-safe retriever, runs the
gates with the course's config, and collects evidence for and against each
level (:mod:`labsrc.course.criteria`). Levels build on each other: the grade is
the highest level whose evidence, and that of every level below it, all holds.
A relaxed ``gate.json`` cannot raise a grade: its relaxations are listed and
block Production-ready. A report made from other cases than the submission's
(its recorded ``cases_sha256`` differs) is stale and counts for nothing.

===================  ==================================================================
level                evidence (lesson spec, "Rubric")
===================  ==================================================================
Foundational         ranks RPL-14 (an exact code) first with BM25; explains the term signal
Applied              recovers a paraphrase through the dense lane and fuses it with RRF, in the
                     learner's own cases (not the course's, nor near-copies of them:
                     :mod:`labsrc.course.provenance`)
Strong               BM25-only, dense-only and hybrid Recall@k on labelled positives,
                     plus negative safety gates
Production-ready     a versioned encoder and index, measured latency, proof that
                     restricted and superseded policies never enter the fused candidates, and
                     the learner's own traces and candidates (exercises 5 and 6) exact against
                     the runs they came from (:mod:`labsrc.course.replays`)
===================  ==================================================================
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from labsrc.course.criteria import applied, foundational, production, strong
from labsrc.course.grades import Evidence, Grade, LevelVerdict
from labsrc.course.provenance import Borrowed, course_files_in
from labsrc.course.replays import EXERCISE_ARTIFACTS, replay_exercise
from labsrc.course.submission import Submission, find_submission, shell_path
from labsrc.course.thresholds import describe_config, relaxed_settings
from labsrc.datasets.course_links import CourseLink
from labsrc.errors import LabError
from labsrc.gate.config import load_gate_config
from labsrc.gate.gates import release_gate
from labsrc.lanes.coverage import missing_query_vectors, no_vector_hint
from labsrc.lanes.dense import DenseSource
from labsrc.lanes.embed import StoredEmbeddings, load_embeddings
from labsrc.records.cases import CASE_KINDS, Case, cases_digest, load_cases
from labsrc.records.loading import load_callers, load_chunks, load_json
from labsrc.records.policy import PolicyChunk
from labsrc.retriever.policy import PolicyRetriever

__all__ = ["grade", "grade_json", "read_report"]


def read_report(sub: Submission, cases: list[Case]) -> tuple[dict[str, Any] | None, str]:
    """The submission's report.json and where it came from, or None and why it counts for nothing."""
    gate = sub.gate_command()
    if sub.report is None:
        before = "" if sub.vectors is not None else f"`{sub.embed_command()}`, then "
        return None, f"no report/ folder: run {before}`{gate}` and hand it in"
    path = sub.report / "report.json"
    if not path.is_file():
        return None, f"no {path.name} in report/"
    data = load_json(path)
    if not isinstance(data, dict) or data.get("schema") != "labsrc.release-report":
        return None, "report/report.json is not a labsrc release report"
    recorded = data.get("cases_sha256")
    if recorded is None:
        return None, f"stale: report/report.json records no cases hash (an older labsrc made it): re-run `{gate}`"
    if recorded != cases_digest(cases):
        return None, f"stale: report/report.json was made from other cases than cases.jsonl: re-run `{gate}`"
    return data, "report/report.json"


def grade(path: str | Path, *, course: str | Path | None = None, measure: bool = True,
          model_answer: bool = False) -> Grade:
    """Grade the submission folder at ``path`` (see the module docstring for its layout).

    Input problems are evidence against the submission, not exceptions: a case
    file that does not load stops the grading with that error alone; missing
    vectors or reports are criteria not met, each saying what to run.
    ``measure=False`` skips latency timing (Production-ready then cannot be reached).
    The course's own files in a submission (:mod:`labsrc.course.provenance`) are
    named, and keep it below Applied; ``model_answer=True`` says the submission
    is the course's model answer on purpose (an instructor checking it), so they
    are named but do not count against it.
    """
    sub = find_submission(path, course)
    chunks: list[PolicyChunk] = load_chunks(sub.chunks)
    callers = {c.actor_id: c for c in load_callers(sub.callers)}
    config = load_gate_config(sub.course / "gate.json")
    own = load_gate_config(sub.config) if sub.config != sub.course / "gate.json" else None
    relaxed = relaxed_settings(config, own) if own is not None else []
    on_date = config.eval_date()
    inputs = [f"chunks: {sub.describe(sub.chunks)} ({len(chunks)})", f"callers: {sub.describe(sub.callers)} ({len(callers)})",
              f"graded with the course's gate.json: {describe_config(config)}"]
    if own is not None:
        inputs.append(f"your {sub.describe(sub.config)}: {describe_config(own)}")
        inputs += [f"  relaxes {item}" for item in relaxed] or ["  it relaxes none of the course's thresholds"]

    cases: list[Case] = []
    if not sub.cases.is_file():
        return Grade(str(path), tuple(inputs), (), None, error="no cases.jsonl in the submission")
    try:
        cases = load_cases(sub.cases, chunk_ids={c.chunk_id for c in chunks}, caller_ids=set(callers))
    except LabError as exc:
        return Grade(str(path), tuple(inputs), (), None, error=f"the cases file does not load: {exc}")
    kinds = {kind: sum(c.kind == kind for c in cases) for kind in CASE_KINDS}
    counts = ", ".join(f"{n} {k}" for k, n in kinds.items() if n)
    inputs.insert(0, f"cases: {f'{len(cases)} cases ({counts})' if cases else 'cases.jsonl holds no cases'}")

    source: DenseSource | None = None
    source_error = None
    if sub.vectors is not None:
        try:
            source = load_embeddings(sub.vectors, chunks=chunks, allow_live=False)
        except LabError as exc:
            source_error = f"the vectors do not load: {exc}"
    if source is None:
        # The course's MiniLM vectors stand in, so the other levels can still be assessed.
        source = load_embeddings(sub.course / "vectors" / "all-MiniLM-L6-v2", chunks=None, allow_live=False)
        inputs.append(f"vectors: none handed in; the course's stored {source.version} vectors stand in")
        graded_source: DenseSource | None = None
    else:
        inputs.append(f"vectors: {sub.describe(sub.vectors)} ({source.version})")
        graded_source = source
    lacking = missing_query_vectors(source, cases) or []
    hint = no_vector_hint(len(lacking), command=sub.embed_command()) if lacking else ""
    if lacking:
        inputs.append(f"vectors: {hint}; their dense lane is empty until then")
    # Unknown query text maps to the zero vector here (and is reported above), so the gates still run.
    lane_source = source.vectors if isinstance(source, StoredEmbeddings) else source
    report, why = read_report(sub, cases)
    made_by = _made_by(report)
    inputs.append(f"report: {why}" + (f" ({made_by})" if made_by else ""))
    borrowed = course_files_in(sub, cases)
    inputs += [f"course files: {b.describe()}" for b in borrowed]
    inputs += [f"course files: {_link_line(sub, link)}" for link in sub.course_links()]

    run = None
    retriever = None
    own_run = None
    if cases:
        retriever = PolicyRetriever(chunks, lane_source, rrf_k=config.rrf_k)
        run = release_gate(retriever, cases, callers, config, measure=measure)
        if own is not None and own != config:
            # The submission's own gate, as `labsrc gate --config` would run it: a release it would block is not ready.
            own_retriever = PolicyRetriever(chunks, lane_source, rrf_k=own.rrf_k)
            own_run = release_gate(own_retriever, cases, callers, own, measure=measure)
    outcomes = run.outcomes if run is not None else ()
    replays = {key: (artifact, replay_exercise(sub.course, artifact)) for key, artifact in EXERCISE_ARTIFACTS.items()}
    levels = (
        LevelVerdict("Foundational", tuple(foundational(outcomes, retriever, callers, on_date))),
        LevelVerdict("Applied", (_own_work(borrowed, model_answer),
                                 *applied(outcomes, config.top_k, dict.fromkeys(lacking, hint)))),
        LevelVerdict("Strong", tuple(strong(cases, chunks, callers, on_date, run, report, why, source))),
        LevelVerdict("Production-ready", tuple(production(
            sub, cases, chunks, callers, graded_source, source_error, config, relaxed, run, report, why, own_run,
            replays,
        ))),
    )
    return Grade(str(path), tuple(inputs), levels, run)


def _link_line(sub: Submission, link: CourseLink) -> str:
    """What a link into the course means for the grade, and how the printed commands deal with it."""
    try:  # relative to the repository (or the installed package's parent), so it reads the same on every machine
        target = str(link.target.relative_to(link.root.parent))
    except ValueError:
        target = str(link.target)
    fix = ("the commands below remove the link first, never what it points to" if sub.replaceable(link) else
           "`labsrc embed` and `labsrc gate` refuse to write through it: grade a copy of your own folder")
    name = f"{sub.describe(link.link)}/" if sub.replaceable(link) else f"the submission folder {link.link}"
    return f"{name} is a symbolic link to {target}, the course's own files, not yours; {fix}"


def _made_by(report: dict[str, Any] | None) -> str:
    """'engine postgres, retriever postgres-retriever-v1': what report.json says made it."""
    versions = (report or {}).get("versions")
    if not isinstance(versions, dict):
        return ""
    return ", ".join(f"{key} {versions[key]}" for key in ("engine", "retriever") if isinstance(versions.get(key), str))


def _own_work(borrowed: list[Borrowed], model_answer: bool) -> Evidence:
    criterion = "the work is the learner's own, not the course's files"
    large = [b for b in borrowed if b.large]
    named = "; ".join(b.describe() for b in (large or borrowed))
    if not large:
        return Evidence(criterion, True, f"{named}: a small part, the rest is your own" if borrowed
                        else "no case, vector file or report of the course's own was recognised")
    if model_answer:
        return Evidence(criterion, True, f"{named}: graded as the course's model answer on purpose (--model-answer)")
    whose = "the course's model answer" if any(b.source.startswith("the model answer") for b in large) \
        else "the course's own files"
    return Evidence(criterion, False, f"{named}: this submission is {whose}, not your work, so it cannot reach Applied "
                    "or above; write your own cases (exercises 1 and 2), embed them and gate them")


def grade_json(grade_: Grade) -> str:
    """The grade as indented JSON (for collecting many submissions)."""
    return json.dumps(grade_.to_dict(), indent=2, ensure_ascii=False)
