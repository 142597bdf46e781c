"""Checks for the coursework: each one looks at a learner's work and says specifically what is wrong.

The lesson ends with six "Build it yourself" steps. Each step has a check here.
A check never says only "wrong": every problem names the case, chunk, lane or
field and says what to change, for example::

    case 'vip-refund' expects merchant-vip-refurb, which caller luna-48291 cannot
    see on 2026-05-27 (restricted): a positive case may only expect permitted evidence

A check returns a :class:`CheckResult` (what passed, what did not).
``result.require()`` raises :class:`CheckFailed` with every problem listed, so a
notebook cell stops on the first step that does not hold yet.

The checks reuse the library's own rules (the boundary's :func:`~labsrc.boundary.block_reasons`,
the lesson analyzer, the gate run's outcomes); they re-implement nothing.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from labsrc.lanes.analysis import tokens
from labsrc.boundary import block_reasons
from labsrc.evaluation.budgets import STAGES
from labsrc.records.cases import NEGATIVE_KINDS, Case
from labsrc.evaluation.config import LANES
from labsrc.errors import LabError
from labsrc.evaluation.gates import CaseOutcome, GateRun, as_caller_map
from labsrc.records.policy import Caller, PolicyChunk

__all__ = [
    "ADVERSARIAL_KINDS",
    "CheckFailed",
    "CheckResult",
    "QUERY_STYLES",
    "TRACE_VERSION_KEYS",
    "check_adversarial_cases",
    "check_candidates_artifact",
    "check_dense_source",
    "check_failed_traces",
    "check_lane_comparison",
    "check_positive_cases",
    "chunk_text_in",
    "hidden_ids_in",
    "policy_codes",
    "query_style",
]

#: The positive-query styles step 1 asks for.
QUERY_STYLES = ("exact_code", "paraphrase", "mixed")
#: The adversarial kinds step 2 asks for, one of each at least.
ADVERSARIAL_KINDS = ("restricted", "superseded", "wrong_region", "absent")
#: What a trace's ``versions`` must name (lesson spec, "Trace").
TRACE_VERSION_KEYS = ("retriever", "index", "sparse", "dense", "fusion")

# A policy code: letters, optional further letter groups, a number, an optional suffix:
# RPL-14, CLM-7, VIP-RPL-1, RPL-14-US. Matched case-insensitively, on the raw query.
_POLICY_CODE = re.compile(r"(?<![\w-])[A-Za-z]{2,6}(?:-[A-Za-z]{2,6})*-\d+(?:-[A-Za-z]{1,6})?(?![\w-])")
# A chunk sentence shorter than this many words is too generic to call a leak on its own.
_MIN_LEAK_WORDS = 5


class CheckFailed(LabError):
    """A coursework check found problems; the message lists every one of them."""

    def __init__(self, result: CheckResult) -> None:
        self.result = result
        super().__init__(str(result))


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one check: ``passes`` (what holds) and ``problems`` (what to fix)."""

    name: str
    passes: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "passes", tuple(self.passes))
        object.__setattr__(self, "problems", tuple(self.problems))

    @property
    def passed(self) -> bool:
        return not self.problems

    def require(self) -> CheckResult:
        """Return ``self`` when every check holds; raise :class:`CheckFailed` otherwise."""
        if self.problems:
            raise CheckFailed(self)
        return self

    def __str__(self) -> str:
        if self.problems:
            head = f"{self.name}: {len(self.problems)} problem(s) to fix"
            return "\n".join([head, *(f"  - {p}" for p in self.problems)])
        head = f"{self.name}: all {len(self.passes)} checks pass"
        return "\n".join([head, *(f"  ok {p}" for p in self.passes)])


class _Collector:
    def __init__(self, name: str) -> None:
        self.name = name
        self.passes: list[str] = []
        self.problems: list[str] = []

    def check(self, condition: bool, ok: str, problem: str) -> bool:
        (self.passes if condition else self.problems).append(ok if condition else problem)
        return condition

    def result(self) -> CheckResult:
        return CheckResult(self.name, tuple(self.passes), tuple(self.problems))


# --- helpers ------------------------------------------------------------------------------


def policy_codes(text: str) -> tuple[str, ...]:
    """Policy codes in ``text`` in order of appearance, upper-cased: ``"rpl-14 vs CLM-7"`` → ``("RPL-14", "CLM-7")``."""
    return tuple(match.upper() for match in _POLICY_CODE.findall(text))


def query_style(query: str) -> str:
    """``exact_code`` (only policy codes), ``mixed`` (a code plus words) or ``paraphrase`` (no code)."""
    codes = policy_codes(query)
    if not codes:
        return "paraphrase"
    rest = _POLICY_CODE.sub(" ", query)
    return "mixed" if re.search(r"[A-Za-z0-9]", rest) else "exact_code"


def _case_date(case: Case, on_date: dt.date) -> dt.date:
    return case.on_date or on_date


def _reasons(caller: Caller, chunk: PolicyChunk, on_date: dt.date) -> str:
    return ", ".join(r.value for r in block_reasons(caller, chunk, on_date))


def _strings(value: Any, skip_keys: frozenset[str] = frozenset()) -> Iterator[str]:
    """Every string inside nested dicts, lists and tuples (keys included), skipping ``skip_keys``."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if key in skip_keys:
                continue
            yield str(key)
            yield from _strings(item, skip_keys)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from _strings(item, skip_keys)


def _sentences(text: str) -> list[str]:
    parts = [p.strip().casefold() for p in re.split(r"(?<=[.;:])\s+", text)]
    return [p.rstrip(".;:") for p in parts if len(p.split()) >= _MIN_LEAK_WORDS]


def chunk_text_in(
    value: Any, chunks: Sequence[PolicyChunk], *, skip_keys: Iterable[str] = ("query", "notes")
) -> list[str]:
    """Sorted ids of the chunks whose text (whole, or any sentence of 5+ words) appears in ``value``.

    ``value`` is any JSON-like structure: a trace, an artifact record, a list of them.
    Keys in ``skip_keys`` are not searched: a query may quote old policy wording
    on purpose (a superseded case does), and it is the user's text, not retrieved text.
    """
    haystack = "\n".join(_strings(value, frozenset(skip_keys))).casefold()
    if not haystack:
        return []
    found = []
    for chunk in chunks:
        text = chunk.text.strip().casefold()
        if text and (text in haystack or any(s in haystack for s in _sentences(chunk.text))):
            found.append(chunk.chunk_id)
    return sorted(found)


def hidden_ids_in(
    value: Any, chunks: Sequence[PolicyChunk], caller: Caller, on_date: dt.date, *, skip_keys: Iterable[str] = ("forbidden",)
) -> list[str]:
    """Sorted ids of chunks the caller may not see on ``on_date`` that appear as a string in ``value``.

    Keys in ``skip_keys`` are not searched: a case's own ``forbidden`` list names
    hidden chunks on purpose, and is written by the case author, not retrieved.
    """
    present = set(_strings(value, frozenset(skip_keys)))
    return sorted(c.chunk_id for c in chunks if c.chunk_id in present and block_reasons(caller, c, on_date))


# --- step 1: positive cases ------------------------------------------------------------------


def check_positive_cases(
    cases: Sequence[Case],
    chunks: Sequence[PolicyChunk],
    callers: Mapping[str, Caller] | Sequence[Caller],
    on_date: dt.date,
    *,
    minimum: int = 8,
) -> CheckResult:
    """Step 1: at least ``minimum`` permitted positive cases, with exact codes, paraphrases and mixed queries.

    Every expected chunk must exist and be visible to the case's caller on the
    case's date; otherwise the case measures the boundary, not retrieval, and
    can never pass.
    """
    out = _Collector("step 1, positive cases")
    by_id = {c.chunk_id: c for c in chunks}
    who = as_caller_map(callers)
    positives = [c for c in cases if c.kind == "positive"]
    out.check(
        len(positives) >= minimum,
        f"{len(positives)} positive cases (at least {minimum})",
        f"only {len(positives)} positive case(s); the assignment asks for at least {minimum}: "
        f"add {minimum - len(positives)} more",
    )
    styles: dict[str, list[str]] = {style: [] for style in QUERY_STYLES}
    for case in positives:
        styles[query_style(case.query)].append(case.name)
    hints = {
        "exact_code": "a query that is only a policy code, such as 'RPL-14'",
        "paraphrase": "a query in other words than the policy, with no code",
        "mixed": "a policy code plus words, such as 'RPL-14 cracked laptop'",
    }
    for style in QUERY_STYLES:
        out.check(
            bool(styles[style]),
            f"{style} queries: {', '.join(styles[style])}",
            f"no {style} positive case: add {hints[style]}",
        )
    seen_queries: dict[tuple[str, str, dt.date | None], str] = {}
    problems_before = len(out.problems)
    for case in positives:
        key = (case.query.strip().casefold(), case.caller, case.on_date)
        if key in seen_queries:
            out.problems.append(
                f"case {case.name!r} asks the same query as {seen_queries[key]!r} for the same caller: it adds no evidence"
            )
        seen_queries.setdefault(key, case.name)
        caller = who.get(case.caller)
        if caller is None:
            out.problems.append(f"case {case.name!r} names unknown caller {case.caller!r}; known callers: {sorted(who)}")
            continue
        date = _case_date(case, on_date)
        for chunk_id in case.expected:
            chunk = by_id.get(chunk_id)
            if chunk is None:
                out.problems.append(f"case {case.name!r} expects {chunk_id!r}, which is not in the corpus")
            elif block_reasons(caller, chunk, date):
                out.problems.append(
                    f"case {case.name!r} expects {chunk_id}, which caller {caller.actor_id} cannot see on {date} "
                    f"({_reasons(caller, chunk, date)}): a positive case may only expect permitted evidence"
                )
    if positives and len(out.problems) == problems_before:
        out.passes.append("every expected chunk exists and is visible to its case's caller on its date")
    return out.result()


# --- step 2: adversarial cases ---------------------------------------------------------------

_KIND_REASONS = {
    "restricted": {"restricted"},
    "superseded": {"superseded", "not_yet_effective"},
    "wrong_region": {"wrong_region"},
}


def check_adversarial_cases(
    cases: Sequence[Case],
    chunks: Sequence[PolicyChunk],
    callers: Mapping[str, Caller] | Sequence[Caller],
    on_date: dt.date,
    *,
    minimum: int = 4,
) -> CheckResult:
    """Step 2: at least ``minimum`` adversarial cases, one of each kind in :data:`ADVERSARIAL_KINDS`.

    A negative case is only a real attack when its forbidden chunks are hidden
    from its caller *for the case's reason* (a restricted case forbids a chunk
    the caller lacks the tag for, and so on) and when its query shares words
    with them, so that without the boundary it would find them. An absent
    case must not name a code that a permitted chunk carries.
    """
    out = _Collector("step 2, adversarial cases")
    by_id = {c.chunk_id: c for c in chunks}
    who = as_caller_map(callers)
    adversarial = [c for c in cases if c.kind in ADVERSARIAL_KINDS]
    out.check(
        len(adversarial) >= minimum,
        f"{len(adversarial)} adversarial cases (at least {minimum})",
        f"only {len(adversarial)} adversarial case(s); the assignment asks for at least {minimum}: "
        f"add {minimum - len(adversarial)} more",
    )
    for kind in ADVERSARIAL_KINDS:
        names = [c.name for c in adversarial if c.kind == kind]
        out.check(bool(names), f"{kind}: {', '.join(names)}", f"no {kind} case")
    for case in adversarial:
        caller = who.get(case.caller)
        if caller is None:
            out.problems.append(f"case {case.name!r} names unknown caller {case.caller!r}; known callers: {sorted(who)}")
            continue
        date = _case_date(case, on_date)
        query_terms = set(tokens(case.query))
        if case.kind in NEGATIVE_KINDS and not case.forbidden:
            out.problems.append(f"{case.kind} case {case.name!r} lists no forbidden chunk ids")
        for chunk_id in case.forbidden:
            chunk = by_id.get(chunk_id)
            if chunk is None:
                out.problems.append(f"case {case.name!r} forbids {chunk_id!r}, which is not in the corpus")
                continue
            reasons = {r.value for r in block_reasons(caller, chunk, date)}
            if not reasons:
                out.problems.append(
                    f"case {case.name!r} forbids {chunk_id}, but caller {caller.actor_id} may see it on {date}: "
                    "the gate would fail on permitted evidence; forbid only chunks the boundary hides"
                )
                continue
            wanted = _KIND_REASONS.get(case.kind)
            if wanted is not None and not reasons & wanted:
                out.problems.append(
                    f"{case.kind} case {case.name!r} forbids {chunk_id}, which is hidden from {caller.actor_id} "
                    f"as {', '.join(sorted(reasons))}, not as {case.kind}: pick a chunk that tests the {case.kind} rule"
                )
            if case.kind in NEGATIVE_KINDS and not query_terms & set(tokens(chunk.text)):
                out.problems.append(
                    f"case {case.name!r} shares no word with forbidden chunk {chunk_id}, so even without the "
                    "boundary BM25 would not find it: use wording or a code from that chunk"
                )
        if case.kind == "absent":
            codes = set(policy_codes(case.query))
            carriers = sorted(
                c.chunk_id for c in chunks
                if codes & set(policy_codes(c.text)) and not block_reasons(caller, c, date)
            )
            if carriers:
                out.problems.append(
                    f"absent case {case.name!r} names a code that permitted chunk(s) {carriers} carry: "
                    "the evidence is not absent for this caller"
                )
    return out.result()


# --- step 3: the real encoder ----------------------------------------------------------------


def check_dense_source(source: Any, cases: Sequence[Case] = ()) -> CheckResult:
    """Step 3: the dense lane uses a real, versioned bi-encoder whose vectors cover every case query.

    ``source`` is the dense source handed to the retriever, for example
    :func:`labsrc.lanes.embed.load_embeddings`'s result.
    """
    from labsrc.lanes.embed import missing_model_fields  # embed imports vectordir; keep checks importable on its own

    out = _Collector("step 3, real encoder")
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
    out = _Collector("step 4, lane comparison")
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
    out = _Collector("step 5, compact traces")
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
    out = _Collector("step 6, reranker candidates")
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
