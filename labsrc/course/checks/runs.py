"""Checks for steps 5 and 6: compact traces of failed cases and the reranker's candidate artifact.

Both hold ids, 1-based integer ranks, scores, versions and timings, never
chunk text (not even a snippet) and never an id the case's caller cannot see.
Problems of one kind are grouped, so a mistake repeated on every candidate
reads as one line with a few examples.
"""

from __future__ import annotations

import math
from itertools import pairwise
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from labsrc.course.checks.evidence import chunk_text_by_field, chunk_titles_by_field, hidden_ids_in
from labsrc.course.checks.precision import (
    TIE_NOTE,
    check_trace_scores,
    check_trace_timings,
    lane_score,
    rounded_decimals,
)
from labsrc.course.checks.result import CheckResult, Collector
from labsrc.gate.config import LANES
from labsrc.gate.gates import CaseOutcome, GateRun, as_caller_map
from labsrc.fusion.rrf import rrf_contribution
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["TRACE_VERSION_KEYS", "check_candidates_artifact", "check_failed_traces", "rank_problem", "rrf_of_ranks"]

#: What a trace's ``versions`` must name (lesson spec, "Trace").
TRACE_VERSION_KEYS = ("retriever", "index", "sparse", "dense", "fusion")


def rank_problem(value: Any, truth: int | None) -> tuple[str, str] | None:
    """``(kind, what is wrong)`` with a stored rank, or None when it equals the run's ``truth`` (1-based or None)."""
    if isinstance(value, str):
        return "ranks stored as strings", f"is the string {value!r}: store ranks as integers (1, 2, ...) or None"
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        return "ranks that are not integers", f"is {value!r}: store ranks as integers (1, 2, ...) or None"
    if isinstance(value, int) and value < 1:
        return "0-based ranks", f"is {value}: ranks are 1-based, the first is 1 (the run has {truth})"
    if value != truth:
        if isinstance(value, int) and truth is not None and value == truth - 1:
            return "0-based ranks", f"is {value}, the run has {truth}: ranks are 1-based, count from 1"
        return "ranks that differ from the run", f"is {value}, the run has {truth}"
    return None


def rrf_of_ranks(ranks: Sequence[int | None], rrf_k: float) -> float:
    """RRF (Cormack et al. 2009): the sum of ``1 / (rrf_k + rank)`` over the lanes that returned the chunk."""
    return sum(rrf_contribution(rank, rrf_k) for rank in ranks if rank is not None)


def _outcomes_by_name(run: GateRun) -> dict[str, CaseOutcome]:
    return {o.case.name: o for o in run.outcomes}


def _entries(
    items: Sequence[Any], outcomes: Mapping[str, CaseOutcome], out: Collector, noun: str
) -> Iterator[tuple[str, CaseOutcome, Mapping[str, Any]]]:
    """``(case name, its outcome, the entry)`` for each dict naming a case of the run; a problem for the rest."""
    for index, item in enumerate(items, start=1):
        if not isinstance(item, Mapping):
            out.problem(f"{noun} #{index} is a {type(item).__name__}, not a dict")
            continue
        name = item.get("case")
        outcome = outcomes.get(name) if isinstance(name, str) else None
        if outcome is None:
            out.problem(f"{noun} #{index} names no case of the run (its 'case' is {name!r})")
            continue
        yield name, outcome, item


def _text_and_hidden(out: Collector, label: str, value: Any, outcome: CaseOutcome, chunks, who, run: GateRun,
                     what: str) -> None:
    by_field = chunk_text_by_field(value, chunks)
    for field, leaked_text in by_field.items():
        out.problem(f"{label}{what} chunk text (of {leaked_text}), whole or in part, in field {field!r}: keep ids, "
                    "ranks, versions and timings only; a snippet is text too", kind="chunk text")
    for field, titled in chunk_titles_by_field(value, chunks).items():
        if field in by_field:
            continue
        out.problem(f"{label}{what} the title of {titled} in field {field!r}: a title is chunk text too; "
                    "keep the chunk id, and look the title up through the boundary when you need it",
                    kind="chunk titles")
    caller = who.get(outcome.case.caller)
    if caller is not None:
        hidden = hidden_ids_in(value, chunks, caller, outcome.case.on_date or run.on_date)
        if hidden:
            out.problem(f"{label} mentions {hidden}, which caller {caller.actor_id} cannot see: no restricted content",
                        kind="hidden ids")


# --- step 5: compact traces ------------------------------------------------------------------


def _trace_candidates(out: Collector, label: str, trace: Mapping[str, Any], outcome: CaseOutcome) -> None:
    candidates = trace.get("candidates")
    if candidates is None:
        return
    if not isinstance(candidates, list) or not candidates:
        out.problem(f"{label} has no candidates: list every chunk id the lanes returned, each with its "
                    "bm25_rank, dense_rank and hybrid_rank", kind="empty candidates")
        return
    listed = []
    for entry in candidates:
        if not isinstance(entry, Mapping) or "chunk_id" not in entry:
            out.problem(f"{label}: every candidate needs a chunk_id", kind="candidates without chunk_id")
            return
        listed.append(entry["chunk_id"])
        missing = [f"{lane}_rank" for lane in LANES if f"{lane}_rank" not in entry]
        if missing:
            out.problem(f"{label}: candidate {entry['chunk_id']} has no {missing}", kind="candidates without lane ranks")
            continue
        for lane in LANES:
            wrong = rank_problem(entry[f"{lane}_rank"], outcome.lane_rank(entry["chunk_id"], lane))
            if wrong is not None:
                out.problem(f"{label}: candidate {entry['chunk_id']} {lane}_rank {wrong[1]}", kind=wrong[0])
    returned = [cid for lane in LANES for cid in outcome.ids[lane]]
    for chunk_id in outcome.case.expected:
        where = ", ".join(f"{lane} rank {outcome.lane_rank(chunk_id, lane)}" for lane in LANES
                          if outcome.lane_rank(chunk_id, lane) is not None)
        # When no lane returned it, the id lists already show where it went (nowhere), as labsrc gate writes it.
        if chunk_id not in listed and where:
            out.problem(f"{label}: candidates leave out the expected chunk {chunk_id} ({where}): a trace of a failed "
                        "case must show where the expected chunk went", kind="expected chunk left out")
    ids = [cid for cid in listed if isinstance(cid, str)]
    if len(ids) == len(listed) and ids != sorted(ids):
        order = "in reversed order" if ids == sorted(ids, reverse=True) else "out of order"
        out.problem(f"{label}: candidates are {order} ({ids}): list them by chunk_id ascending, as labsrc gate's "
                    "compact traces do, so two traces of one case compare line by line", kind="candidates out of order")
    left_out = sorted(set(returned) - set(listed) - set(outcome.case.expected))
    if left_out:
        out.problem(f"{label}: candidates leave out {left_out}, which the lanes returned: list every returned id",
                    kind="returned ids left out")


_ID_KEYS = ("sparse_ids", "dense_ids", "fused_ids")


def _owner(trace: Mapping[str, Any], outcomes: Mapping[str, CaseOutcome]) -> list[str]:
    """The cases whose run has exactly this trace's three id lists."""
    if not all(isinstance(trace.get(k), list) for k in _ID_KEYS):
        return []
    lists = [list(trace[k]) for k in _ID_KEYS]
    return [name for name, o in outcomes.items()
            if lists == [list(o.trace.sparse_ids), list(o.trace.dense_ids), list(o.trace.fused_ids)]]


def _cut_at_other_k(given: Sequence[Any], truth: Sequence[Any], top_k: int) -> bool:
    """True when ``given`` is a ranked list kept at another k than the run's ``top_k``: longer than any list
    the run keeps, or a shorter head of the run's list ``truth``."""
    return len(given) > top_k or (len(given) < len(truth) and list(given) == list(truth)[:len(given)])


def _id_lists(out: Collector, label: str, trace: Mapping[str, Any], outcome: CaseOutcome, top_k: int) -> None:
    """The trace's id lists against the run's: swapped lanes and lists kept at another k are named as such."""
    truth = {"sparse_ids": list(outcome.trace.sparse_ids), "dense_ids": list(outcome.trace.dense_ids),
             "fused_ids": list(outcome.trace.fused_ids)}
    given = {k: list(trace[k]) if isinstance(trace[k], (list, tuple)) else trace[k] for k in truth if k in trace}
    wrong = [k for k in given if given[k] != truth[k]]
    if ("sparse_ids" in wrong and "dense_ids" in wrong and given["sparse_ids"] == truth["dense_ids"]
            and given["dense_ids"] == truth["sparse_ids"]):
        out.problem(f"{label}: sparse_ids are the run's dense_ids and the other way round (sparse_ids "
                    f"{given['sparse_ids']}, dense_ids {given['dense_ids']}): sparse_ids is the BM25 lane's list "
                    "(o.trace.sparse_ids), dense_ids the dense lane's (o.trace.dense_ids)", kind="lanes swapped")
        wrong = [k for k in wrong if k == "fused_ids"]
    cut = [k for k in wrong if isinstance(given[k], list) and _cut_at_other_k(given[k], truth[k], top_k)]
    if cut:
        held = "; ".join(f"{k} holds {len(given[k])} ids ({given[k]}), the run's {len(truth[k])} ({truth[k]})" for k in cut)
        out.problem(f"{label}: {held}: the run kept top_k = {top_k} (run.config.top_k), so none of its lists holds "
                    f"more than {top_k}; search with top_k=run.config.top_k, or copy o.trace.to_dict()",
                    kind="lists kept at another k")
    for key in (k for k in wrong if k not in cut):
        out.problem(f"{label}: {key} {given[key]} differ from the run's {truth[key]}")


def check_failed_traces(
    traces: Sequence[Mapping[str, Any]],
    run: GateRun,
    chunks: Sequence[PolicyChunk],
    callers: Mapping[str, Caller] | Sequence[Caller],
    *,
    same_run: bool = True,
) -> CheckResult:
    """Step 5: one compact trace per failed case: candidate ids, lane ranks, versions, timings; no text.

    Each trace is a dict with ``case``, ``sparse_ids``, ``dense_ids``,
    ``fused_ids``, ``candidates`` (each ``{"chunk_id", "bm25_rank",
    "dense_rank", "hybrid_rank"}``, 1-based integers or None, covering every
    returned id and the expected chunk; optionally a score per lane,
    ``bm25_score``, ``dense_score``, ``hybrid_score`` or ``rrf_score``),
    ``versions`` and ``timings_ms`` -- the shape of
    :func:`labsrc.reports.report.compact_trace`. No trace may contain chunk
    text, and none may mention a chunk its caller cannot see.

    Every id, rank and score is compared with the run at full precision: a
    score rounded to two decimals hides the RRF tie of ``1/61`` and ``1/62``.
    ``same_run`` says the traces were written from ``run`` itself (the
    exercise), so their timings must equal its own; a replay (the rubric
    grading a saved file) cannot time the same calls, and checks only that the
    timings were not rounded. A trace filed under another case's name is named
    as that case's.
    """
    out = Collector("step 5, compact traces")
    outcomes = _outcomes_by_name(run)
    who = as_caller_map(callers)
    failed = [o.case.name for o in run.failed_outcomes]
    named = [t.get("case") for t in traces if isinstance(t, Mapping)]
    lacking = [name for name in failed if name not in named]
    if failed:
        out.check(not lacking, f"a trace for each of the {len(failed)} failed case(s): {', '.join(failed)}",
                  f"no trace for failed case(s) {lacking}")
    verified: list[str] = []
    for index, trace in enumerate(traces, start=1):
        name = trace.get("case") if isinstance(trace, Mapping) else None
        owners = _owner(trace, outcomes) if isinstance(trace, Mapping) else []
        if isinstance(name, str) and owners and name not in owners:
            owner = owners[0] if len(owners) == 1 else f"one of {owners}"
            out.problem(f"trace #{index}, filed under case {name!r}, is case {owner!r}'s trace: its sparse_ids, "
                        f"dense_ids and fused_ids are that case's run, not {name!r}'s; set 'case' to the case you traced",
                        kind="traces of another case")
            continue
        before = len(out.problems)
        if not isinstance(trace, Mapping):
            out.problem(f"trace #{index} is a {type(trace).__name__}, not a dict")
            continue
        outcome = outcomes.get(name) if isinstance(name, str) else None
        if outcome is None:
            out.problem(f"trace #{index} names no case of the run (its 'case' is {name!r})"
                        + (f"; its ids are case {owners[0]!r}'s run" if len(owners) == 1 else ""))
            continue
        label = f"trace for case {name!r}"
        if outcome.passed:
            out.problem(f"{label}: that case passed; keep traces for failed cases only", kind="traces of passed cases")
        lacking_keys = [k for k in (*_ID_KEYS, "candidates", "versions", "timings_ms") if k not in trace]
        if lacking_keys:
            out.problem(f"{label} lacks {lacking_keys}: a compact trace keeps candidate ids, lane ranks, "
                        "versions and timings")
        _id_lists(out, label, trace, outcome, run.config.top_k)
        _trace_candidates(out, label, trace, outcome)
        scored = check_trace_scores(out, label, trace, outcome)
        versions = trace.get("versions")
        if isinstance(versions, Mapping):
            absent = [k for k in TRACE_VERSION_KEYS if not versions.get(k)]
            if absent:
                out.problem(f"{label}: versions lack {absent}")
            # A replay may run on another engine than the file's run (exact either way), so only a trace of this run
            # must name its versions.
            differ = [k for k in TRACE_VERSION_KEYS if same_run and versions.get(k)
                      and versions.get(k) != outcome.trace.versions.get(k)]
            if differ:
                out.problem(f"{label}: versions {', '.join(f'{k} {versions[k]!r}' for k in differ)} differ from the "
                            f"run's ({', '.join(f'{k} {outcome.trace.versions.get(k)!r}' for k in differ)})")
        timed = check_trace_timings(out, label, trace, outcome, same_run)
        _text_and_hidden(out, label, trace, outcome, chunks, who, run, " contains")
        if len(out.problems) == before:
            candidates = trace.get("candidates") if isinstance(trace.get("candidates"), list) else []
            parts = [f"{', '.join(k for k in _ID_KEYS if k in trace)} equal the run's",
                     f"{len(candidates)} candidates' lane ranks equal the run's"
                     + (f", and {scored} scores to the last digit" if scored else "")]
            if isinstance(versions, Mapping):
                parts.append(f"versions name {', '.join(TRACE_VERSION_KEYS)}" + (" as the run does" if same_run else ""))
            parts += [timed] if timed else []
            verified.append(f"{label}: " + "; ".join(parts))
    out.passes.extend(verified)
    if traces and not out.problems:
        out.passes.append("no trace holds chunk text, a chunk title or a chunk its caller cannot see")
    return out.result()


# --- step 6: the reranker artifact -----------------------------------------------------------


def _scores(out: Collector, label: str, candidates: list[Any], outcome: CaseOutcome, rrf_k: float) -> None:
    scores = [c.get("rrf_score") if isinstance(c, Mapping) else None for c in candidates]
    for entry, score in zip(candidates, scores):
        chunk_id = entry.get("chunk_id") if isinstance(entry, Mapping) else None
        if score is None:
            out.problem(f"{label}: candidate {chunk_id} has no rrf_score: every candidate needs its rrf_score",
                        kind="missing rrf_score")
        elif isinstance(score, bool) or not isinstance(score, (int, float)):
            out.problem(f"{label}: candidate {chunk_id} has rrf_score {score!r}, a {type(score).__name__}: "
                        "store the number itself (a float), not its text", kind="rrf_score that is not a number")
        elif chunk_id in outcome.ids["hybrid"]:
            ranks = [outcome.lane_rank(chunk_id, lane) for lane in ("bm25", "dense")]
            truth = rrf_of_ranks(ranks, rrf_k)
            run_score = lane_score(outcome, chunk_id, "hybrid")
            places = rounded_decimals(score, run_score if run_score is not None else truth)
            single = [(lane, r) for lane, r in zip(("bm25", "dense"), ranks) if r is not None]
            if score == 0 and len(single) == 1:
                # Not rounding: the sum was taken only where both lanes rank the chunk.
                (lane, rank), other = single[0], "dense" if single[0][0] == "bm25" else "bm25"
                out.problem(f"{label}: {chunk_id} has rrf_score {score!r}: RRF sums 1/(k + rank) over every lane "
                            f"that returned the chunk; {chunk_id} is in one lane, so its score is "
                            f"1/({rrf_k:g} + {rank}) = {truth!r} ({lane} rank {rank}; {other} did not return it), "
                            "not 0 (o.scores['hybrid'])", kind="rrf_score 0 for chunks one lane returned")
            elif places is not None:
                out.problem(f"{label}: {chunk_id} has rrf_score {score!r}, the run's {run_score!r} rounded to {places} "
                            f"decimals: store the full float (o.scores['hybrid']); {TIE_NOTE}", kind="rounded scores")
            # The sum of a chunk's lane terms in another order may differ in the last bit, never more.
            elif not math.isclose(score, truth, rel_tol=1e-12):
                terms = " + ".join(f"1/({rrf_k:g} + {r})" for r in ranks if r is not None)
                out.problem(
                    f"{label}: {chunk_id} has rrf_score {score!r}, but its lane ranks (bm25 {ranks[0]}, dense {ranks[1]}) "
                    f"give {terms} = {truth:.6f}: rrf_score is the sum of 1/(rrf_k + rank) over the lanes that "
                    "returned the chunk (o.scores['hybrid'])", kind="rrf_score that is not the RRF of the lane ranks")
    numbers = [s for s in scores if isinstance(s, (int, float)) and not isinstance(s, bool)]
    if len(numbers) == len(scores) and any(a < b for a, b in pairwise(numbers)):
        out.problem(f"{label}: rrf_score must not increase down the list", kind="rrf_score increasing")


def _ranks(out: Collector, label: str, candidates: list[Any]) -> None:
    ranks = [c.get("rank") if isinstance(c, Mapping) else None for c in candidates]
    if ranks == list(range(1, len(candidates) + 1)):
        return
    if any(isinstance(r, str) for r in ranks):
        out.problem(f"{label}: ranks are {ranks}, strings: store them as integers 1, 2, ... in order",
                    kind="ranks stored as strings")
    elif ranks == list(range(len(candidates))):
        out.problem(f"{label}: ranks are {ranks}; they must be 1, 2, ... in order (1-based): "
                    "enumerate(..., start=1)", kind="0-based ranks")
    else:
        out.problem(f"{label}: ranks are {ranks}; they must be 1, 2, ... in order (1-based)", kind="ranks out of order")


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
    with 1-based integer ranks, each ``rrf_score`` the RRF of its lane ranks,
    and the lane ranks of the run; no chunk text, nothing the caller cannot see.
    A reranker fetches permitted text by id when it runs.
    """
    out = Collector("step 6, reranker candidates")
    outcomes = _outcomes_by_name(run)
    who = as_caller_map(callers)
    named = [r.get("case") for r in records if isinstance(r, Mapping)]
    lacking = [name for name in outcomes if name not in named]
    out.check(not lacking, f"a record for each of the {len(outcomes)} cases", f"no candidate record for case(s) {lacking}")
    for name, outcome, record in _entries(records, outcomes, out, "record"):
        label = f"case {name!r}"
        candidates = record.get("candidates")
        if not isinstance(candidates, list):
            out.problem(f"{label}: 'candidates' must be a list")
            continue
        ids = [c.get("chunk_id") if isinstance(c, Mapping) else None for c in candidates]
        truth = list(outcome.ids["hybrid"])
        if ids != truth and _cut_at_other_k(ids, truth, run.config.top_k) and not any(
                ids == list(outcome.ids[lane]) for lane in ("bm25", "dense")):
            out.problem(f"{label}: candidates hold {len(ids)} ids ({ids}), the fused list {len(truth)} ({truth}): the run "
                        f"kept top_k = {run.config.top_k} (run.config.top_k); keep the whole fused list, o.ids['hybrid']",
                        kind="fused lists kept at another k")
        elif ids != truth:
            out.problem(f"{label}: candidates are not the fused list (expected {truth}, got {ids}): keep the RRF output",
                        kind="candidates that are not the fused list")
        _ranks(out, label, candidates)
        _scores(out, label, candidates, outcome, run.config.rrf_k)
        for entry in candidates:
            if not isinstance(entry, Mapping) or entry.get("chunk_id") not in truth:
                continue
            for lane in ("bm25", "dense"):
                if f"{lane}_rank" not in entry:
                    out.problem(f"{label}: {entry['chunk_id']} has no {lane}_rank", kind="missing lane ranks")
                    continue
                wrong = rank_problem(entry[f"{lane}_rank"], outcome.lane_rank(entry["chunk_id"], lane))
                if wrong is not None:
                    out.problem(f"{label}: {entry['chunk_id']} {lane}_rank {wrong[1]}", kind=wrong[0])
        _text_and_hidden(out, label, record, outcome, chunks, who, run, ": the record contains")
    if records and not out.problems:
        listed = sum(len(r["candidates"]) for r in records if isinstance(r, Mapping) and isinstance(r.get("candidates"), list))
        out.passes.append(f"every record is the run's fused list in order ({listed} candidates in all), with ranks "
                          "1, 2, ..., each rrf_score the run's to the last digit and each lane rank the run's")
        out.passes.append("no record holds chunk text, a chunk title or a chunk its caller cannot see")
    return out.result()
