"""Checks for steps 3 to 6: the real encoder, the lane comparison, failed traces and the reranker artifact."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from labsrc.course.checks.evidence import (
    chunk_text_in,
    hidden_ids_in,
)
from labsrc.course.checks.result import CheckResult, Collector
from labsrc.evaluation.budgets import STAGES
from labsrc.evaluation.config import LANES
from labsrc.evaluation.gates import CaseOutcome, GateRun, as_caller_map
from labsrc.records.cases import Case
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["TRACE_VERSION_KEYS", "check_candidates_artifact", "check_dense_source", "check_failed_traces", "check_lane_comparison"]

#: What a trace's ``versions`` must name (lesson spec, "Trace").
TRACE_VERSION_KEYS = ("retriever", "index", "sparse", "dense", "fusion")

# --- step 3: the real encoder ----------------------------------------------------------------


def check_dense_source(source: Any, cases: Sequence[Case] = ()) -> CheckResult:
    """Step 3: the dense lane uses a real, versioned bi-encoder whose vectors cover every case query.

    ``source`` is the dense source handed to the retriever, for example
    :func:`labsrc.lanes.embed.load_embeddings`'s result.
    """
    from labsrc.lanes.embed import (
        missing_model_fields,  # embed imports vectordir; keep checks importable on its own
    )

    out = Collector("step 3, real encoder")
    version = str(getattr(source, "version", ""))
    model = dict(getattr(source, "model", None) or {})
    frozen = version.startswith("fixture-") or version.startswith("hashing-")
    out.check(
        bool(version) and not frozen,
        f"dense version {version!r}",
        f"the dense lane still uses {version or 'an unversioned source'!r}, not a real bi-encoder: "
        "load the MiniLM vectors with labsrc.lanes.embed.load_embeddings",
    )
    if not model:
        out.problems.append("the dense source carries no model record (MODEL.json): its version cannot be audited")
    else:
        missing = missing_model_fields(model)
        out.check(
            not missing,
            f"MODEL.json records {model.get('model')} ({model.get('packaged_by')}, "
            f"sentence-transformers {model.get('sentence_transformers')}, torch {model.get('torch')})",
            f"MODEL.json lacks {missing}",
        )
        dimension = getattr(source, "dimension", None)
        out.check(
            model.get("dim") == dimension,
            f"dimension {dimension} as recorded",
            f"MODEL.json says dim {model.get('dim')} but the vectors have {dimension}",
        )
        out.check(model.get("normalized") is True, "vectors are L2-normalised", "MODEL.json does not say normalized: true")
    lookup = getattr(source, "has_query", None) or (
        (lambda text: source.query_id_for(text) is not None) if hasattr(source, "query_id_for") else None
    )
    if lookup is None and hasattr(source, "queries"):
        lookup = lambda text: text in source.queries  # noqa: E731 - FixtureVectors
    if cases and lookup is not None:
        lacking = [c.name for c in cases if c.query.strip() and not lookup(c.query)]
        out.check(
            not lacking,
            f"all {len(cases)} case queries have a stored vector",
            f"case(s) {lacking} have no stored query vector: re-run 'labsrc embed --queries' on your cases",
        )
    return out.result()


# --- step 4: lanes by Recall@k with p50/p95 --------------------------------------------------


def check_lane_comparison(
    recall: Mapping[str, float],
    latency_ms: Mapping[str, Mapping[str, float]],
    run: GateRun,
    *,
    tolerance: float = 1e-9,
) -> CheckResult:
    """Step 4: Recall@k for BM25, dense and hybrid, and p50/p95 per stage, matching ``run``.

    ``recall`` maps lane → permitted Recall@k over the positive cases;
    ``latency_ms`` maps stage → ``{"p50": ms, "p95": ms}``.
    """
    out = Collector("step 4, lane comparison")
    k = run.config.top_k
    missing = [lane for lane in LANES if lane not in recall]
    out.check(not missing, f"Recall@{k} for {', '.join(LANES)}", f"no Recall@{k} for {missing}: report all three lanes")
    for lane in LANES:
        if lane in recall:
            value, truth = float(recall[lane]), float(run.recall[lane])
            out.check(
                math.isclose(value, truth, abs_tol=tolerance),
                f"{lane} Recall@{k} = {truth:.2f}",
                f"{lane} Recall@{k} is {value:.2f} but the run gives {truth:.2f}: "
                f"average recall_at_k over the positive cases at k={k}",
            )
    if run.latency is None:
        out.problems.append("the run measured no latency: call release_gate with measure=True")
        return out.result()
    p50, p95 = run.latency.p50_ms, run.latency.p95_ms
    lacking = [s for s in STAGES if s not in latency_ms]
    out.check(not lacking, f"latency for {', '.join(STAGES)}", f"no latency for stage(s) {lacking}")
    for stage in STAGES:
        entry = latency_ms.get(stage)
        if entry is None:
            continue
        for stat, truth in (("p50", p50.get(stage)), ("p95", p95.get(stage))):
            if stat not in entry:
                out.problems.append(f"stage {stage} has no {stat}: record both p50 and p95")
            elif truth is not None and not math.isclose(float(entry[stat]), truth, rel_tol=1e-6, abs_tol=1e-9):
                out.problems.append(f"stage {stage} {stat} is {entry[stat]} ms but the run measured {truth:.6f} ms")
        if "p50" in entry and "p95" in entry and float(entry["p50"]) > float(entry["p95"]):
            out.problems.append(f"stage {stage}: p50 {entry['p50']} > p95 {entry['p95']}, which cannot be")
    if not out.problems:
        out.passes.append("p50 and p95 match the run's measured stage timings")
    return out.result()


# --- steps 5 and 6: traces and the reranker artifact -----------------------------------------


def _outcomes_by_name(run: GateRun) -> dict[str, CaseOutcome]:
    return {o.case.name: o for o in run.outcomes}


def check_failed_traces(
    traces: Sequence[Mapping[str, Any]],
    run: GateRun,
    chunks: Sequence[PolicyChunk],
    callers: Mapping[str, Caller] | Sequence[Caller],
) -> CheckResult:
    """Step 5: one compact trace per failed case: candidate ids, lane ranks, versions, timings; no text.

    Each trace is a dict with ``case``, ``sparse_ids``, ``dense_ids``,
    ``fused_ids``, ``candidates`` (each ``{"chunk_id", "bm25_rank",
    "dense_rank", "hybrid_rank"}``), ``versions`` and ``timings_ms`` -- the shape
    of :func:`labsrc.evaluation.report.compact_trace`. No trace may contain chunk text, and
    none may mention a chunk its case's caller cannot see.
    """
    out = Collector("step 5, compact traces")
    outcomes = _outcomes_by_name(run)
    who, on_date = as_caller_map(callers), run.on_date
    failed = [o.case.name for o in run.failed_outcomes]
    named = [t.get("case") for t in traces if isinstance(t, Mapping)]
    lacking = [name for name in failed if name not in named]
    out.check(
        not lacking,
        f"a trace for each of the {len(failed)} failed case(s)",
        f"no trace for failed case(s) {lacking}",
    )
    for index, trace in enumerate(traces, start=1):
        if not isinstance(trace, Mapping):
            out.problems.append(f"trace #{index} is a {type(trace).__name__}, not a dict")
            continue
        name = trace.get("case")
        outcome = outcomes.get(name) if isinstance(name, str) else None
        label = f"trace for case {name!r}" if outcome else f"trace #{index}"
        if outcome is None:
            out.problems.append(f"trace #{index} names no case of the run (its 'case' is {name!r})")
            continue
        if outcome.passed:
            out.problems.append(f"{label}: that case passed; keep traces for failed cases only")
        lacking_keys = [k for k in ("sparse_ids", "dense_ids", "fused_ids", "candidates", "versions", "timings_ms")
                        if k not in trace]
        if lacking_keys:
            out.problems.append(f"{label} lacks {lacking_keys}: a compact trace keeps candidate ids, lane ranks, "
                                "versions and timings")
        lanes = {"sparse_ids": outcome.trace.sparse_ids, "dense_ids": outcome.trace.dense_ids,
                 "fused_ids": outcome.trace.fused_ids}
        for key, truth in lanes.items():
            if key in trace and list(trace[key]) != list(truth):
                out.problems.append(f"{label}: {key} {list(trace[key])} differ from the run's {list(truth)}")
        for entry in trace.get("candidates") or ():
            if not isinstance(entry, Mapping) or "chunk_id" not in entry:
                out.problems.append(f"{label}: every candidate needs a chunk_id")
                break
            missing = [f"{lane}_rank" for lane in LANES if f"{lane}_rank" not in entry]
            if missing:
                out.problems.append(f"{label}: candidate {entry['chunk_id']} has no {missing}")
                break
        versions = trace.get("versions")
        if isinstance(versions, Mapping):
            absent = [k for k in TRACE_VERSION_KEYS if not versions.get(k)]
            if absent:
                out.problems.append(f"{label}: versions lack {absent}")
        timings = trace.get("timings_ms")
        if isinstance(timings, Mapping):
            absent = [s for s in STAGES if s not in timings]
            if absent:
                out.problems.append(f"{label}: timings_ms lack {absent}")
        leaked_text = chunk_text_in(trace, chunks)
        if leaked_text:
            out.problems.append(f"{label} contains chunk text (of {leaked_text}): keep ids, ranks, versions and timings only")
        caller = who.get(outcome.case.caller)
        if caller is not None:
            hidden = hidden_ids_in(trace, chunks, caller, outcome.case.on_date or on_date)
            if hidden:
                out.problems.append(
                    f"{label} mentions {hidden}, which caller {caller.actor_id} cannot see: no restricted content"
                )
    if traces and not out.problems:
        out.passes.append("no trace holds chunk text or a chunk its caller cannot see")
    return out.result()


def check_candidates_artifact(
    records: Sequence[Mapping[str, Any]],
    run: GateRun,
    chunks: Sequence[PolicyChunk],
    callers: Mapping[str, Caller] | Sequence[Caller],
) -> CheckResult:
    """Step 6: per case, the fused top candidates as a reranker's input.

    One record per case of the run: ``{"case", "candidates": [{"rank",
    "chunk_id", "rrf_score", "bm25_rank", "dense_rank"}, ...]}`` (the shape of
    the report's ``candidates.jsonl``). Candidates are the fused list in order,
    with 1-based ranks and the lane ranks of the run; no chunk text, nothing the
    caller cannot see. A reranker fetches permitted text by id when it runs.
    """
    out = Collector("step 6, reranker candidates")
    outcomes = _outcomes_by_name(run)
    who, on_date = as_caller_map(callers), run.on_date
    named = [r.get("case") for r in records if isinstance(r, Mapping)]
    lacking = [name for name in outcomes if name not in named]
    out.check(not lacking, f"a record for each of the {len(outcomes)} cases", f"no candidate record for case(s) {lacking}")
    for index, record in enumerate(records, start=1):
        if not isinstance(record, Mapping):
            out.problems.append(f"record #{index} is a {type(record).__name__}, not a dict")
            continue
        name = record.get("case")
        outcome = outcomes.get(name) if isinstance(name, str) else None
        if outcome is None:
            out.problems.append(f"record #{index} names no case of the run (its 'case' is {name!r})")
            continue
        label = f"case {name!r}"
        candidates = record.get("candidates")
        if not isinstance(candidates, list):
            out.problems.append(f"{label}: 'candidates' must be a list")
            continue
        ids = [c.get("chunk_id") if isinstance(c, Mapping) else None for c in candidates]
        truth = list(outcome.ids["hybrid"])
        if ids != truth:
            out.problems.append(
                f"{label}: candidates are not the fused list (expected {truth}, got {ids}): keep the RRF output"
            )
        ranks = [c.get("rank") if isinstance(c, Mapping) else None for c in candidates]
        if ranks != list(range(1, len(candidates) + 1)):
            out.problems.append(f"{label}: ranks are {ranks}; they must be 1, 2, ... in order (1-based)")
        scores = [c.get("rrf_score") if isinstance(c, Mapping) else None for c in candidates]
        if any(not isinstance(s, (int, float)) for s in scores):
            out.problems.append(f"{label}: every candidate needs its rrf_score")
        elif any(a < b for a, b in zip(scores, scores[1:])):
            out.problems.append(f"{label}: rrf_score must not increase down the list")
        for entry in candidates:
            if not isinstance(entry, Mapping) or entry.get("chunk_id") not in truth:
                continue
            for lane in ("bm25", "dense"):
                expected = outcome.lane_rank(entry["chunk_id"], lane)
                if entry.get(f"{lane}_rank", "missing") != expected:
                    out.problems.append(
                        f"{label}: {entry['chunk_id']} {lane}_rank is {entry.get(f'{lane}_rank', 'missing')}, "
                        f"the run has {expected}"
                    )
        leaked_text = chunk_text_in(record, chunks)
        if leaked_text:
            out.problems.append(f"{label}: the record contains chunk text (of {leaked_text}); store ids, not text")
        caller = who.get(outcome.case.caller)
        if caller is not None:
            hidden = hidden_ids_in(record, chunks, caller, outcome.case.on_date or on_date)
            if hidden:
                out.problems.append(f"{label}: {hidden} cannot be seen by {caller.actor_id} and must not be a candidate")
    if records and not out.problems:
        out.passes.append("every record is the fused list with lane ranks, without text or hidden chunks")
    return out.result()
