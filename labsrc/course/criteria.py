"""The rubric's criteria, level by level: each returns the evidence for and against it.

A criterion ticks only on evidence: a gate with no cases, a trace check with no
failed case, or a report made from other cases proves nothing, and says so.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping, Sequence
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
from labsrc.course.checks.model_rows import check_rows
from labsrc.course.checks.result import CheckResult
from labsrc.course.grades import Evidence
from labsrc.course.replays import ExerciseArtifact, Replay
from labsrc.course.submission import Submission, shell_path
from labsrc.evaluation.budgets import STAGES
from labsrc.gate.config import LANES, GateConfig
from labsrc.gate.gates import CaseOutcome, GateRun
from labsrc.evaluation.metrics import recall_at_k
from labsrc.lanes.dense import DenseSource
from labsrc.lanes.embed import StoredEmbeddings, vectors_match_texts
from labsrc.lanes.sparse import explain
from labsrc.records.cases import NEGATIVE_KINDS, Case
from labsrc.records.loading import iter_jsonl
from labsrc.records.policy import Caller
from labsrc.retriever.policy import PolicyRetriever

__all__ = ["TRACES_CRITERION", "applied", "foundational", "production", "strong"]

#: Production-ready's criterion for step 5, judged on the learner's own traces and on the report's.
TRACES_CRITERION = ("compact traces of failed cases: ids, ranks, scores and timings as the run has them; no text, "
                    "no restricted content")


def _term_signal(outcome: CaseOutcome, retriever: PolicyRetriever, callers: Mapping[str, Caller], on_date: dt.date) -> str:
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


def foundational(outcomes: Sequence[CaseOutcome], retriever: PolicyRetriever | None, callers, on_date) -> list[Evidence]:
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


def applied(outcomes: Sequence[CaseOutcome], k: int, no_vector: Mapping[str, str]) -> list[Evidence]:
    """``no_vector`` maps a case name to the hint for its missing query vector (empty when all have one)."""
    paraphrases = [o for o in outcomes if o.case.kind == "positive" and query_style(o.case.query) == "paraphrase"]
    missed = [o for o in paraphrases if recall_at_k(o.ids["bm25"], o.case.expected, k) < 1.0]
    dense = [o for o in missed if recall_at_k(o.ids["dense"], o.case.expected, k) == 1.0]
    fused = [o for o in dense if recall_at_k(o.ids["hybrid"], o.case.expected, k) == 1.0]
    blind = [o.case.name for o in missed if o.case.name in no_vector]
    if dense:
        dense_detail = _names([f"{o.case.name} (dense rank {o.lane_rank(o.case.expected[0], 'dense')})" for o in dense])
    elif blind:
        dense_detail = f"{next(iter(no_vector.values()))}; without one the dense lane is empty for {_names(blind)}"
    else:
        dense_detail = "the dense lane misses every paraphrase BM25 misses: reword them, or check the vectors' model"
    return [
        Evidence(
            f"a paraphrase BM25 misses at k={k}",
            bool(missed),
            _names([o.case.name for o in missed]) if missed else
            (f"BM25 finds all {len(paraphrases)} paraphrases: add one that shares no words with its rule"
             if paraphrases else "no paraphrase case"),
        ),
        Evidence("the dense lane recovers it", bool(dense), dense_detail),
        Evidence(
            "RRF fuses it into the top k",
            bool(fused),
            _names([f"{o.case.name} (hybrid rank {o.lane_rank(o.case.expected[0], 'hybrid')})" for o in fused]) if fused
            else "no recovered paraphrase survives fusion",
        ),
    ]


def _safety(run: GateRun) -> Evidence:
    # The course asks for one case of each ADVERSARIAL_KINDS kind; a not_yet_effective case is welcome but optional,
    # so its gate counts when it has cases and is not "missing" when it has none.
    required = {"abstention" if kind == "absent" else kind for kind in ADVERSARIAL_KINDS}
    safety = [g for g in run.gates if g.family in (*NEGATIVE_KINDS, "abstention") and (g.tested or g.family in required)]
    counts = {g.family: sum(o.case.kind == (g.family if g.family != "abstention" else "absent") for o in run.outcomes)
              for g in safety}
    empty = [family for family, n in counts.items() if n == 0]
    failing = [g for g in safety if not g.passed]
    detail = "; ".join(f"{g.name}: {g.detail}" + (f" (failing: {', '.join(g.failing_cases)})" if g.failing_cases else "")
                       for g in safety)
    if empty:
        detail += f"; a gate with no cases proves nothing: add {', '.join(empty)} case(s)".replace("abstention", "absent")
    return Evidence("negative safety gates pass (restricted, superseded, wrong_region, abstention), each on its cases",
                    bool(safety) and not failing and not empty, detail)


def strong(cases, chunks, callers, on_date, run: GateRun | None, report: dict[str, Any] | None, why: str,
           dense: Any = None) -> list[Evidence]:
    """``dense`` lets the adversarial check accept a meaning-only attack the dense lane would aim at its chunk."""
    positives = check_positive_cases(cases, chunks, callers, on_date, minimum=8)
    adversarial = check_adversarial_cases(cases, chunks, callers, on_date, minimum=4, dense=dense)
    evidence = [
        Evidence("at least 8 permitted positives: exact codes, paraphrases, mixed", positives.passed,
                 "; ".join(positives.problems) or "; ".join(positives.passes[:1] + positives.passes[-1:])),
        Evidence("at least 4 adversarial cases: " + ", ".join(ADVERSARIAL_KINDS), adversarial.passed,
                 "; ".join(adversarial.problems)
                 or "; ".join((*adversarial.passes[:1], *(p for p in adversarial.passes if " by kind: " in p)))),
    ]
    if run is None:
        evidence.append(Evidence("Recall@k per lane on the positives", False, "no gate run (no cases)"))
        evidence.append(Evidence("negative safety gates pass", False, "no gate run (no cases)"))
    else:
        k = run.config.top_k
        recall = run.recall
        hybrid_gate = next((g for g in run.gates if g.family == "hybrid"), None)
        recall_gate = next((g for g in run.gates if g.name == f"recall@{k} hybrid"), None)
        hybrid_ok = (hybrid_gate is None or hybrid_gate.passed) and recall_gate is not None and recall_gate.passed
        evidence.append(Evidence(
            f"Recall@{k} per lane on the positives, hybrid meeting the course's rule against each lane",
            hybrid_ok,
            ", ".join(f"{lane} {recall[lane]:.2f}" for lane in LANES)
            + "".join(f"; gate '{g.name}': {g.detail}" for g in (recall_gate, hybrid_gate) if g is not None),
        ))
        evidence.append(_safety(run))
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


def _encoder(sub: Submission, cases: Sequence[Case], chunks, source: DenseSource | None, source_error: str | None) -> Evidence:
    criterion = "a versioned real encoder covering every case query"
    if sub.vectors is None or source is None:
        detail = source_error or f"no vectors/ folder: run `{sub.embed_command()}` (the 'embed' extra) and hand it in"
        return Evidence(criterion, False, detail)
    check = check_dense_source(source, cases, cases_path=shell_path(sub.cases), chunks=chunks, embed=sub.embed_command())
    stored = source.queries if isinstance(source, StoredEmbeddings) else {}
    renamed = [c.name for c in cases if c.name in stored and stored[c.name] != c.query]
    problems = list(check.problems)
    if isinstance(source, StoredEmbeddings) and not vectors_match_texts(source, chunks):
        problems.append("the vectors were made from other chunk texts (MODEL.json texts_sha256 differs): "
                        "re-run 'labsrc embed' after changing the chunks")
    if renamed:
        problems.append(f"case(s) {renamed} have a stored query id whose text differs from the case's query: re-embed")
    if not problems:  # MODEL.json is text anyone can write: the criterion ticks only for rows verified as that model
        rows = check_rows(source, cases, chunks) if isinstance(source, StoredEmbeddings) else None
        if rows is None or not rows.verified:
            why = "; ".join(rows.problems + rows.unverified) if rows is not None else "no stored rows to check"
            problems.append(f"the vectors are not verified as the model MODEL.json names: {why}")
        else:
            return Evidence(criterion, True, f"{sub.describe(sub.vectors)}: {rows.summary}; " + "; ".join(check.passes[:2]))
    return Evidence(criterion, not problems, "; ".join(problems) or f"{sub.describe(sub.vectors)}: " + "; ".join(check.passes[:2]))


def production(
    sub: Submission, cases: Sequence[Case], chunks, callers, source: DenseSource | None, source_error: str | None,
    config: GateConfig, relaxed: Sequence[str], run: GateRun | None, report: dict[str, Any] | None, why: str,
    own_run: GateRun | None = None, replays: Mapping[str, tuple[ExerciseArtifact, Replay]] | None = None,
) -> list[Evidence]:
    """``replays`` maps ``"traces"`` and ``"candidates"`` to the exercise run each artifact is judged against."""
    replays = replays or {}
    evidence = [_encoder(sub, cases, chunks, source, source_error)]
    evidence.append(Evidence(
        "the submission's gate.json keeps the course's thresholds",
        not relaxed,
        ("it relaxes " + "; ".join(relaxed) + " (graded against the course's gate.json anyway)") if relaxed
        else ("no gate.json of its own: the course's" if sub.config == sub.course / "gate.json" else "nothing relaxed"),
    ))
    if own_run is not None:
        failing = [g for g in own_run.gates if not g.passed]
        detail = ("; ".join(f"{g.name}: {g.detail}" + (f" (failing: {', '.join(g.failing_cases)})" if g.failing_cases else "")
                            for g in failing)
                  + f": your {sub.describe(sub.config)} would block this release; fix the cases or the retrieval, "
                  "or loosen your own gate back towards the course's") if failing else \
            f"all {len(own_run.gates)} gates of your {sub.describe(sub.config)} pass"
        evidence.append(Evidence("the submission passes its own gate.json", not failing, detail))
    if run is None:
        for criterion in ("a versioned index and a pinned evaluation date", "latency measured: p50 and p95 per stage",
                          "restricted and superseded policies never enter any lane or the fused candidates",
                          "the reranker artifact holds only the fused, permitted candidates",
                          TRACES_CRITERION):
            evidence.append(Evidence(criterion, False, "no gate run (no cases)"))
        return evidence
    evidence.append(_versions(config, run, report))
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
    empty = [kind for kind, n in counts.items() if n == 0]
    evidence.append(Evidence(
        "restricted and superseded policies never enter any lane or the fused candidates",
        not empty and all(g.passed for g in exclusion),
        "; ".join(f"{g.name}: {g.detail}" for g in exclusion) + " (probed at the depth of the whole corpus)"
        + (f"; no {' or '.join(empty)} case, so nothing was probed" if empty else ""),
    ))
    evidence.append(_artifact(
        "the reranker artifact holds only the fused, permitted candidates", "candidates.jsonl",
        check_candidates_artifact, sub, run, chunks, callers, report, why, replays.get("candidates")))
    evidence.append(_artifact(TRACES_CRITERION, "failed_traces.jsonl", check_failed_traces, sub, run, chunks, callers,
                              report, why, replays.get("traces")))
    return evidence


def _versions(config: GateConfig, run: GateRun, report: Mapping[str, Any] | None) -> Evidence:
    """The versions the learner's report records (the engine and retriever that made it), else the replay's."""
    pinned = config.on_date is not None
    recorded = (report or {}).get("versions")
    if isinstance(recorded, Mapping) and recorded:
        versions = {k: v for k, v in recorded.items() if isinstance(v, (str, int, float)) and not isinstance(v, bool)}
        detail = "report.json records " + ", ".join(f"{k} {v}" for k, v in versions.items())
        replayed = run.versions.get("retriever")
        if versions.get("retriever") != replayed or versions.get("engine", "memory") != "memory":
            detail += f"; the rubric replayed your cases in memory with {replayed}"
    else:
        versions = dict(run.versions)
        detail = ", ".join(f"{k} {v}" for k, v in versions.items()) + " (the rubric's replay: no report)"
    return Evidence(
        "a versioned index and a pinned evaluation date",
        pinned and bool(versions.get("index")) and bool(versions.get("dense")),
        detail + ("" if pinned else "; gate.json has no on_date, so replays change with the calendar"),
    )


def _artifact(criterion: str, name: str, checker: Callable[..., CheckResult], sub: Submission, run: GateRun,
              chunks, callers, report: Mapping[str, Any] | None, why: str, replay: tuple[ExerciseArtifact, Replay] | None,
              ) -> Evidence:
    """The learner's own artifact (the exercise's file against the rubric's replay) and the report's, both judged."""
    traces = name == "failed_traces.jsonl"
    options = {"same_run": False} if traces else {}
    parts: list[str] = []
    met = True
    if replay is not None:
        artifact, again = replay
        own = sub.root / artifact.file
        if not own.is_file():
            met = False
            parts.append(artifact.missing())
        else:
            result = checker(_read_jsonl(own), again.run, again.chunks, again.callers, **options)
            met = met and result.passed
            head = f"{artifact.file}, against the course's cases replayed at top_k={artifact.top_k}"
            if traces:
                failed = [o.case.name for o in again.run.failed_outcomes]
                head += f" (failing {', '.join(failed) or 'none'})"
            parts.append(f"{head}: " + ("; ".join(result.problems) or "; ".join(result.passes)))
    path = None if sub.report is None else sub.report / name
    if report is None or path is None or not path.is_file():
        met = False
        parts.append(why if report is None else f"no report/{name}")
    else:
        records = _read_jsonl(path)
        if traces and not run.failed_outcomes and not records:
            parts.append(f"report/{name}: empty, as it should be: none of your cases failed")
        else:
            result = checker(records, run, chunks, callers, **options)
            met = met and result.passed
            parts.append(f"report/{name}: " + ("; ".join(result.problems) or "; ".join(result.passes)))
    return Evidence(criterion, met, " | ".join(parts))
