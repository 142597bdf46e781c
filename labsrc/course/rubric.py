"""Grading the coursework against the lesson's four-level rubric.

A submission is a folder::

    cases.jsonl          the learner's cases (required), the gate-harness format
    callers.json         optional; default: the course's callers (fixtures/policies)
    chunks.jsonl         optional; default: the course's corpus
    gate.json            optional; default: the course's gate config
    vectors/             optional; a vector directory written by ``labsrc embed``
                         (vectors/MODEL.json, or one vectors/<model>/MODEL.json)
    report/              optional; the learner's ``labsrc gate --out report`` folder

:func:`grade` replays the cases through the permission-safe retriever, runs the
gates, and collects evidence for and against each level. Levels build on each
other: the grade is the highest level whose evidence, and that of every level
below it, all holds.

===================  ==================================================================
level                evidence (lesson spec, "Rubric")
===================  ==================================================================
Foundational         ranks RPL-14 (an exact code) first with BM25; explains the term signal
Applied              recovers a paraphrase through the dense lane and fuses it with RRF
Strong               BM25-only, dense-only and hybrid Recall@k on labelled positives,
                     plus negative safety gates
Production-ready     a versioned encoder and index, measured latency, and proof that
                     restricted and superseded policies never enter the fused candidates
===================  ==================================================================
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from labsrc.course.checks import (
    ADVERSARIAL_KINDS,
    check_adversarial_cases,
    check_candidates_artifact,
    check_dense_source,
    check_failed_traces,
    check_positive_cases,
    query_style,
)
from labsrc.course.grades import Evidence, Grade, LevelVerdict
from labsrc.course.submission import Submission, find_submission
from labsrc.errors import LabError
from labsrc.evaluation.budgets import STAGES
from labsrc.evaluation.config import LANES, GateConfig, load_gate_config
from labsrc.evaluation.gates import CaseOutcome, GateRun, release_gate
from labsrc.evaluation.metrics import recall_at_k
from labsrc.lanes.dense import DenseSource
from labsrc.lanes.embed import StoredEmbeddings, load_embeddings, vectors_match_texts
from labsrc.lanes.sparse import explain
from labsrc.records.cases import NEGATIVE_KINDS, Case, load_cases
from labsrc.records.loading import iter_jsonl, load_callers, load_chunks, load_json
from labsrc.records.policy import Caller, PolicyChunk
from labsrc.retriever.policy import PolicyRetriever

__all__ = ["grade", "grade_json"]

# --- grading ------------------------------------------------------------------------------------


def _term_signal(outcome: CaseOutcome, retriever: PolicyRetriever, callers: dict[str, Caller], on_date: dt.date) -> str:
    """'score 0.843 = rpl-14 (idf 0.98, tf 1)': the terms that put the chunk first."""
    chunk_id = outcome.ids["bm25"][0]
    universe = retriever.universe(callers[outcome.case.caller], outcome.case.on_date or on_date)
    terms = [t for t in explain(outcome.case.query, chunk_id, universe) if t.contribution > 0]
    total = sum(t.contribution for t in terms)
    parts = ", ".join(f"'{t.term}' (idf {t.idf:.2f}, tf {t.tf}) {t.contribution:.3f}" for t in terms)
    return f"score {total:.3f} = {parts}"


def _names(items: Sequence[str], limit: int = 6) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "") if items else "none"


def _foundational(outcomes: Sequence[CaseOutcome], retriever: PolicyRetriever | None, callers, on_date) -> list[Evidence]:
    exact = [o for o in outcomes if o.case.kind == "positive" and query_style(o.case.query) == "exact_code"]
    first = [o for o in exact if o.ids["bm25"] and o.ids["bm25"][0] in o.case.expected]
    evidence = [
        Evidence(
            "a positive case that is an exact policy code",
            bool(exact),
            _names([f"{o.case.name} ({o.case.query})" for o in exact]) if exact else "no positive case is only a code such as 'RPL-14'",
        )
    ]
    if first and retriever is not None:
        o = first[0]
        detail = f"{o.case.name}: BM25 ranks {o.ids['bm25'][0]} first, {_term_signal(o, retriever, callers, on_date)}"
        if len(first) > 1:
            detail += f" (also {_names([x.case.name for x in first[1:]])})"
    elif exact:
        detail = "; ".join(f"{o.case.name}: BM25 ranks {list(o.ids['bm25']) or 'nothing'}, expected {list(o.case.expected)}" for o in exact)
    else:
        detail = "no exact-code case to rank"
    evidence.append(Evidence("BM25 ranks the code's chunk first, through the shared code term", bool(first), detail))
    return evidence


def _applied(outcomes: Sequence[CaseOutcome], k: int) -> list[Evidence]:
    paraphrases = [o for o in outcomes if o.case.kind == "positive" and query_style(o.case.query) == "paraphrase"]
    missed = [o for o in paraphrases if recall_at_k(o.ids["bm25"], o.case.expected, k) < 1.0]
    dense = [o for o in missed if recall_at_k(o.ids["dense"], o.case.expected, k) == 1.0]
    fused = [o for o in dense if recall_at_k(o.ids["hybrid"], o.case.expected, k) == 1.0]
    return [
        Evidence(
            f"a paraphrase BM25 misses at k={k}",
            bool(missed),
            _names([o.case.name for o in missed]) if missed else
            (f"BM25 finds all {len(paraphrases)} paraphrases: add one that shares no words with its rule"
             if paraphrases else "no paraphrase case"),
        ),
        Evidence(
            "the dense lane recovers it",
            bool(dense),
            _names([f"{o.case.name} (dense rank {o.lane_rank(o.case.expected[0], 'dense')})" for o in dense]) if dense
            else "the dense lane misses every paraphrase BM25 misses (are the vectors a real encoder's?)",
        ),
        Evidence(
            "RRF fuses it into the top k",
            bool(fused),
            _names([f"{o.case.name} (hybrid rank {o.lane_rank(o.case.expected[0], 'hybrid')})" for o in fused]) if fused
            else "no recovered paraphrase survives fusion",
        ),
    ]


def _read_report(report: Path | None) -> tuple[dict[str, Any] | None, str]:
    if report is None:
        return None, "no report/ folder: run 'labsrc gate ... --out report' and hand it in"
    path = report / "report.json"
    if not path.is_file():
        return None, f"no {path.name} in report/"
    data = load_json(path)
    if not isinstance(data, dict) or data.get("schema") != "labsrc.release-report":
        return None, "report/report.json is not a labsrc release report"
    return data, "report/report.json"


def _strong(cases, chunks, callers, on_date, run: GateRun | None, report: dict[str, Any] | None, why: str) -> list[Evidence]:
    positives = check_positive_cases(cases, chunks, callers, on_date, minimum=8)
    adversarial = check_adversarial_cases(cases, chunks, callers, on_date, minimum=4)
    evidence = [
        Evidence("at least 8 permitted positives: exact codes, paraphrases, mixed", positives.passed,
                 "; ".join(positives.problems) or "; ".join(positives.passes[:1] + positives.passes[-1:])),
        Evidence("at least 4 adversarial cases: " + ", ".join(ADVERSARIAL_KINDS), adversarial.passed,
                 "; ".join(adversarial.problems) or adversarial.passes[0]),
    ]
    if run is None:
        evidence.append(Evidence("Recall@k per lane on the positives", False, "no gate run (no cases)"))
        evidence.append(Evidence("negative safety gates pass", False, "no gate run (no cases)"))
    else:
        k = run.config.top_k
        recall = run.recall
        by_name = {g.name: g for g in run.gates}
        hybrid_gate = by_name.get(f"recall@{k} hybrid")
        hybrid_ok = hybrid_gate is not None and hybrid_gate.passed and all(
            recall["hybrid"] >= recall[lane] for lane in LANES if lane != "hybrid"
        )
        evidence.append(Evidence(
            f"Recall@{k} per lane on the positives, hybrid at least as good as each lane",
            hybrid_ok,
            ", ".join(f"{lane} {recall[lane]:.2f}" for lane in LANES)
            + ("" if hybrid_gate is None else f"; gate '{hybrid_gate.name}': {hybrid_gate.detail}"),
        ))
        safety = [g for g in run.gates if g.family in (*NEGATIVE_KINDS, "abstention")]
        failing = [g for g in safety if not g.passed]
        evidence.append(Evidence(
            "negative safety gates pass (restricted, superseded, wrong_region, abstention)",
            bool(safety) and not failing,
            "; ".join(f"{g.name}: {g.detail}" + (f" (failing: {', '.join(g.failing_cases)})" if g.failing_cases else "")
                      for g in safety),
        ))
    if report is None or run is None:
        evidence.append(Evidence("the submission reports Recall@k for bm25, dense and hybrid", False, why))
    else:
        lanes = (report.get("recall") or {}).get("lanes") or {}
        mismatched = [
            lane for lane in LANES
            if not isinstance(lanes.get(lane), (int, float)) or not math.isclose(lanes[lane], run.recall[lane], abs_tol=1e-9)
        ]
        evidence.append(Evidence(
            "the submission reports Recall@k for bm25, dense and hybrid",
            not mismatched,
            f"{why}: " + (", ".join(f"{lane} {lanes[lane]:.2f}" for lane in LANES) if not mismatched else
                          f"lanes {mismatched} are missing or differ from the re-run "
                          f"({', '.join(f'{lane} {run.recall[lane]:.2f}' for lane in LANES)}): regenerate the report"),
        ))
    return evidence


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [record for _, record in iter_jsonl(path)]


def _production(
    sub: Submission, cases: Sequence[Case], chunks, callers, source: DenseSource | None, source_error: str | None,
    config: GateConfig, run: GateRun | None, report: dict[str, Any] | None, why: str,
) -> list[Evidence]:
    evidence = []
    if sub.vectors is None or source is None:
        detail = source_error or "no vectors/ folder: embed your chunks and case queries with 'labsrc embed' and hand them in"
        evidence.append(Evidence("a versioned real encoder covering every case query", False, detail))
    else:
        check = check_dense_source(source, cases)
        stored = source.queries if isinstance(source, StoredEmbeddings) else {}
        renamed = [c.name for c in cases if c.name in stored and stored[c.name] != c.query]
        problems = list(check.problems)
        if isinstance(source, StoredEmbeddings) and not vectors_match_texts(source, chunks):
            problems.append("the vectors were made from other chunk texts (MODEL.json texts_sha256 differs): "
                            "re-run 'labsrc embed' after changing the chunks")
        if renamed:
            problems.append(f"case(s) {renamed} have a stored query id whose text differs from the case's query: re-embed")
        evidence.append(Evidence(
            "a versioned real encoder covering every case query",
            not problems,
            "; ".join(problems) or f"{sub.describe(sub.vectors)}: " + "; ".join(check.passes[:2]),
        ))
    if run is None:
        for criterion in ("a versioned index and a pinned evaluation date", "latency measured: p50 and p95 per stage",
                          "restricted and superseded policies never enter any lane or the fused candidates",
                          "the reranker artifact holds only the fused, permitted candidates",
                          "compact traces of failed cases hold no text and no restricted content"):
            evidence.append(Evidence(criterion, False, "no gate run (no cases)"))
        return evidence
    versions = dict(run.versions)
    pinned = config.on_date is not None
    evidence.append(Evidence(
        "a versioned index and a pinned evaluation date",
        pinned and bool(versions.get("index")) and bool(versions.get("dense")),
        ", ".join(f"{k} {v}" for k, v in versions.items())
        + ("" if pinned else "; gate.json has no on_date, so replays change with the calendar"),
    ))
    latency_gate = next((g for g in run.gates if g.family == "latency"), None)
    reported = ((report or {}).get("latency") or {}).get("stages") or {}
    unreported = [s for s in STAGES if not {"p50_ms", "p95_ms"} <= set(reported.get(s) or {})]
    latency_ok = latency_gate is not None and latency_gate.passed and report is not None and not unreported
    detail = latency_gate.detail if latency_gate is not None else "not measured"
    if report is None:
        detail += f"; {why}"
    elif unreported:
        detail += f"; report.json has no p50/p95 for {unreported}"
    evidence.append(Evidence("latency measured: p50 and p95 per stage within budget", latency_ok, detail))
    exclusion = [g for g in run.gates if g.family in ("restricted", "superseded")]
    counts = {kind: sum(o.case.kind == kind for o in run.outcomes) for kind in ("restricted", "superseded")}
    evidence.append(Evidence(
        "restricted and superseded policies never enter any lane or the fused candidates",
        all(counts.values()) and all(g.passed for g in exclusion),
        "; ".join(f"{g.name}: {g.detail}" for g in exclusion) + " (probed at the depth of the whole corpus)",
    ))
    for criterion, name, checker in (
        ("the reranker artifact holds only the fused, permitted candidates", "candidates.jsonl", check_candidates_artifact),
        ("compact traces of failed cases hold no text and no restricted content", "failed_traces.jsonl", check_failed_traces),
    ):
        path = None if sub.report is None else sub.report / name
        if path is None or not path.is_file():
            evidence.append(Evidence(criterion, False, f"no report/{name}"))
            continue
        result = checker(_read_jsonl(path), run, chunks, callers)
        evidence.append(Evidence(criterion, result.passed, "; ".join(result.problems) or f"report/{name}: " + "; ".join(result.passes)))
    return evidence


def grade(path: str | Path, *, course: str | Path | None = None, measure: bool = True) -> Grade:
    """Grade the submission folder at ``path`` (see the module docstring for its layout).

    Input problems (a malformed case file, an unknown chunk id) are evidence
    against the submission, not exceptions: the grade says what to fix.
    ``measure=False`` skips latency timing (Production-ready then cannot be reached).
    """
    sub = find_submission(path, course)
    chunks: list[PolicyChunk] = load_chunks(sub.chunks)
    callers = {c.actor_id: c for c in load_callers(sub.callers)}
    config = load_gate_config(sub.config)
    on_date = config.eval_date()
    inputs = [f"chunks: {sub.describe(sub.chunks)} ({len(chunks)})", f"callers: {sub.describe(sub.callers)} ({len(callers)})",
              f"config: {sub.describe(sub.config)} (top_k {config.top_k}, rrf_k {config.to_dict()['rrf_k']}, on_date {on_date})"]

    cases: list[Case] = []
    case_error = None
    if not sub.cases.is_file():
        case_error = "no cases.jsonl in the submission"
    else:
        try:
            cases = load_cases(sub.cases, chunk_ids={c.chunk_id for c in chunks}, caller_ids=set(callers))
        except LabError as exc:
            case_error = f"the cases file does not load: {exc}"
        if case_error is None and not cases:
            case_error = "cases.jsonl holds no cases"
    kinds = {kind: sum(c.kind == kind for c in cases) for kind in ("positive", *ADVERSARIAL_KINDS)}
    counts = ", ".join(f"{n} {k}" for k, n in kinds.items() if n)
    inputs.insert(0, f"cases: {case_error or f'{len(cases)} cases ({counts})'}")

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
    # Unknown query text maps to the zero vector here (and is reported above), so the gates still run.
    lane_source = source.vectors if isinstance(source, StoredEmbeddings) else source
    report, why = _read_report(sub.report)
    inputs.append(f"report: {why}")

    run = None
    retriever = None
    if cases:
        retriever = PolicyRetriever(chunks, lane_source, rrf_k=config.rrf_k)
        run = release_gate(retriever, cases, callers, config, measure=measure)
    outcomes = run.outcomes if run is not None else ()
    if case_error:
        missing = Evidence("a cases file with at least one case", False, case_error)
        foundational = [missing, *_foundational(outcomes, retriever, callers, on_date)]
    else:
        foundational = _foundational(outcomes, retriever, callers, on_date)
    levels = (
        LevelVerdict("Foundational", tuple(foundational)),
        LevelVerdict("Applied", tuple(_applied(outcomes, config.top_k))),
        LevelVerdict("Strong", tuple(_strong(cases, chunks, callers, on_date, run, report, why))),
        LevelVerdict("Production-ready", tuple(_production(
            sub, cases, chunks, callers, graded_source, source_error, config, run, report, why
        ))),
    )
    return Grade(str(path), tuple(inputs), levels, run)


def grade_json(grade_: Grade) -> str:
    """The grade as indented JSON (for collecting many submissions)."""
    return json.dumps(grade_.to_dict(), indent=2, ensure_ascii=False)
