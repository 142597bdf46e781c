"""Checks for steps 1 and 2: the learner's positive and adversarial cases.

Both checks validate every case with :func:`~labsrc.records.cases.case_format_problems`
(the validation :func:`~labsrc.records.cases.load_cases` runs, so the check and
the save cell never disagree) and judge it against the boundary with
:func:`~labsrc.gate.case_rules.case_problems` (the rule ``labsrc gate``
and the lesson use).
"""

from __future__ import annotations

import datetime as dt
import difflib
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from labsrc.boundary import BlockReason, block_reasons, permitted_chunks
from labsrc.course.checks.evidence import (
    _common_runs,
    _words,
    case_date,
    content_words,
    policy_codes,
    query_style,
)
from labsrc.course.checks.result import CheckResult, Collector
from labsrc.course.checks.stopwords import empty_query_message
from labsrc.errors import LabError
from labsrc.gate.case_rules import CaseProblem, case_problems
from labsrc.gate.gates import as_caller_map
from labsrc.lanes.analysis import tokens
from labsrc.lanes.dense import dense_rank
from labsrc.lanes.sparse import bm25_rank
from labsrc.records.cases import NEGATIVE_KINDS, Case, padded_id_hint, case_format_problems
from labsrc.records.policy import Caller, PolicyChunk

__all__ = [
    "ADVERSARIAL_KINDS",
    "COPY_MIN_WORDS",
    "DENSE_REACH_DEPTH",
    "DENSE_REACH_MIN_COSINE",
    "QUERY_STYLES",
    "check_adversarial_cases",
    "check_positive_cases",
    "copied_words",
    "id_hint",
]

#: The positive-query styles step 1 asks for.
QUERY_STYLES = ("exact_code", "paraphrase", "mixed")
#: The adversarial kinds step 2 asks for, one of each at least.
ADVERSARIAL_KINDS = ("restricted", "superseded", "wrong_region", "absent")
#: Every kind step 2 counts and checks as adversarial: a not_yet_effective case too, though none is required.
_ANY_ADVERSARIAL = (*NEGATIVE_KINDS, "absent")
_OPTIONAL_KINDS = tuple(k for k in _ANY_ADVERSARIAL if k not in ADVERSARIAL_KINDS)


def _quoted(words: Sequence[str]) -> str:
    return ", ".join(repr(w) for w in words)


def _format_problems(out: Collector, cases: Sequence[Case]) -> None:
    """Every case through the case-file validation, exactly as ``load_cases`` would see it."""
    earlier: dict[str, str] = {}
    for index, case in enumerate(cases, start=1):
        for field, message in case_format_problems(case, earlier=earlier):
            out.problem(f"case {case.name!r} (#{index}), field {field!r}: {message}; load_cases would refuse it",
                        kind=f"cases load_cases refuses (field {field!r})")
        earlier.setdefault(case.name, f"case #{index}")


def id_hint(chunk_id: str, known: Collection[str]) -> str:
    """What to say about an id no stored chunk has: whitespace around it, the same id in other letter case,
    or the nearest ids."""
    padded = padded_id_hint(chunk_id, known)
    stripped = chunk_id.strip() or chunk_id
    if padded is not None and stripped in known:
        return padded
    same = sorted(k for k in known if k.casefold() == stripped.casefold())
    if same:
        near = f"ids are case-sensitive: did you mean {same[0]!r}?"
    else:
        close = difflib.get_close_matches(stripped, sorted(known), n=2, cutoff=0.75)
        near = f"did you mean {' or '.join(repr(n) for n in close)}?" if close else ""
    return "; ".join(h for h in (padded, near) if h)


def _last_day_hint(caller: Caller, chunk: PolicyChunk, day: dt.date) -> str:
    """For a positive case expecting a version that had ended by ``day``: the last day it was in force, when the
    caller could see it then; "" otherwise. ``effective_to`` is inclusive (labsrc.records.policy), so that day
    is ``effective_to`` itself, the day before its successor's ``effective_from``."""
    end = chunk.effective_to
    if end is None or end >= day or block_reasons(caller, chunk, end):
        return ""
    return (f"; it was in force from {chunk.effective_from} until {end} (effective_to is inclusive: its last day); "
            f'to expect it, date the case within those days ("on_date": "{end.isoformat()}" at the latest)')


def _rule_problems(out: Collector, case: Case, who, by_id, on_date: dt.date) -> bool:
    """The one case rule (labsrc.gate.case_rules), with the course's hints added; True when the case obeys it."""
    problems = case_problems(case, who, by_id, on_date)
    for p in problems:
        text = str(p)
        if p.field in ("expected", "forbidden") and p.value not in by_id:
            hint = id_hint(p.value, by_id)
            text = text if not hint else f"{text}; {hint}"
        elif p.field == "expected" and BlockReason.SUPERSEDED in block_reasons(
                who[case.caller], by_id[p.value], case_date(case, on_date)):
            text += _last_day_hint(who[case.caller], by_id[p.value], case_date(case, on_date))
        out.problem(text, kind=f"cases that break the case rule (field {p.field!r})")
    return not problems


def _empty_query(out: Collector, case: Case) -> bool:
    """True (and a problem) when the lesson analyzer keeps no term of the case's query."""
    message = empty_query_message(case.query)
    if message is not None:
        out.problem(str(CaseProblem(case.name, "query", case.query, message)), kind="queries BM25 has no term of")
    return message is not None


#: A positive query holding this many consecutive words of its expected chunk (and most of its own words
#: from it) is a copy of the chunk, whatever else it holds.
COPY_MIN_WORDS = 5


def copied_words(query: str, text: str) -> int:
    """The longest run of consecutive words ``query`` shares with ``text`` (policy codes count as words)."""
    words, other = _words(query), _words(text)
    runs = _common_runs(words, other, 1)
    return max((len(r) for r in runs), default=0)


# --- step 1: positive cases ------------------------------------------------------------------


def _repeated_query(out: Collector, case: Case, first: Case) -> None:
    """A second positive case asking ``first``'s query as the same caller: a copy, or a conflicting expectation."""
    if set(case.expected) == set(first.expected):
        out.problem(f"case {case.name!r} asks the same query as {first.name!r} for the same caller: "
                    "it adds no evidence", kind="repeated queries")
        return
    out.problem(
        f"case {case.name!r} asks the same query as {first.name!r} for the same caller but expects "
        f"{' and '.join(case.expected)} where {first.name!r} expects {' and '.join(first.expected)}: "
        "the two expectations conflict (one question, two different right answers); if both chunks answer it, "
        f"keep one case expecting both ({', '.join(sorted(set(case.expected) | set(first.expected)))}), "
        "otherwise drop the case whose chunk does not answer it", kind="conflicting expectations")


def check_positive_cases(
    cases: Sequence[Case],
    chunks: Sequence[PolicyChunk],
    callers: Mapping[str, Caller] | Sequence[Caller],
    on_date: dt.date,
    *,
    minimum: int = 8,
) -> CheckResult:
    """Step 1: at least ``minimum`` permitted positive cases, with exact codes, paraphrases and mixed queries.

    Every case must load (kind, name, expected as ``load_cases`` checks them);
    every expected chunk must exist and be visible to the case's caller on the
    case's date; the cases use at least two callers; a paraphrase shares no
    content word with its rule (else BM25 finds it and it tests nothing new);
    a query keeps a term after analysis (:mod:`~labsrc.course.checks.stopwords`).
    """
    out = Collector("step 1, positive cases")
    by_id = {c.chunk_id: c for c in chunks}
    who = as_caller_map(callers)
    _format_problems(out, cases)
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
    asking = sorted({c.caller for c in positives})
    if positives:
        others = sorted(set(who) - set(asking))
        out.check(
            len(asking) >= 2,
            f"callers: {', '.join(asking)}",
            f"all {len(positives)} positive cases ask as {asking[0]}; the task asks for a second caller too: "
            f"add cases for one of {others} (each sees another slice of the corpus)",
        )
    seen_queries: dict[tuple[str, str, dt.date | None], Case] = {}
    problems_before = len(out.problems)
    for case in positives:
        key = (case.query.strip().casefold(), case.caller, case.on_date)
        if key in seen_queries:
            _repeated_query(out, case, seen_queries[key])
        seen_queries.setdefault(key, case)
        empty = _empty_query(out, case)
        if not _rule_problems(out, case, who, by_id, on_date) or empty:
            continue
        for chunk_id in case.expected:
            run, total = copied_words(case.query, by_id[chunk_id].text), len(_words(case.query))
            if run >= COPY_MIN_WORDS and run * 2 >= total:
                out.problem(
                    f"case {case.name!r} copies {run} consecutive words of its expected chunk {chunk_id}'s text "
                    f"into its query ({query_style(case.query)} query of {total} words): a copied query finds its "
                    "chunk by string matching and tests neither lane; write the question a customer would ask, "
                    "in their words (keep a policy code if the case is about the code)",
                    kind="queries copied from their expected chunk",
                )
        if query_style(case.query) != "paraphrase":
            continue
        query = content_words(case.query)
        for chunk_id in case.expected:
            shared = [w for w in query if w in set(tokens(by_id[chunk_id].text))]
            if shared:
                out.problem(
                    f"paraphrase case {case.name!r} shares the word(s) {_quoted(shared)} with its rule {chunk_id}, "
                    "so BM25 can match it on those words: a paraphrase says the same thing in other words; "
                    "replace them (a synonym, a description) or make the case a mixed query",
                    kind="paraphrases that share words with their rule",
                )
    if positives and len(out.problems) == problems_before:
        out.passes.append("every expected chunk exists and is visible to its case's caller on its date")
    return out.result()


# --- step 2: adversarial cases ---------------------------------------------------------------


def _answered(case: Case, caller: Caller, chunks: Sequence[PolicyChunk], date: dt.date) -> str | None:
    """Why a permitted chunk answers an absent case's query, or None.

    BM25 over the caller's permitted chunks: when its first hit shares at least
    half of the query's content words (and two, for a longer query), that chunk
    answers the question and the evidence is not absent.
    """
    query = content_words(case.query)
    if not query:
        return None
    ranked = bm25_rank(case.query, permitted_chunks(caller, chunks, date), top_k=1)
    if not ranked:
        return None
    chunk = ranked[0][0]
    shared = [w for w in query if w in set(tokens(chunk.text))]
    if len(shared) >= max(math.ceil(len(query) / 2), min(2, len(query))):
        return (
            f"absent case {case.name!r}: BM25 over {caller.actor_id}'s permitted chunks ranks {chunk.chunk_id} first, "
            f"sharing {len(shared)} of the query's {len(query)} content words ({_quoted(shared)}): a permitted chunk "
            "answers it, so the evidence is not absent; ask about something no permitted policy covers"
        )
    return None


#: How deep the dense lane may rank a forbidden chunk, with the boundary lifted for it, for a meaning-only
#: attack (no shared word) to count as aimed at it.
DENSE_REACH_DEPTH = 5
#: ... and how similar (cosine) the chunk must be to the query: a dense lane ranks *something* first for any
#: query, so a rank alone would accept "can I pay with bitcoin" as an attack on a refund rule (MiniLM: 0.15);
#: the course's paraphrases of their rules score 0.32 to 0.45.
DENSE_REACH_MIN_COSINE = 0.3


def _dense_reach(case: Case, caller: Caller, chunk: PolicyChunk, chunks: Sequence[PolicyChunk], date: dt.date,
                 dense: Any, depth: int) -> str | None:
    """None when the dense lane, without the boundary for ``chunk``, ranks it within ``depth`` at a cosine of
    at least :data:`DENSE_REACH_MIN_COSINE`; otherwise why it does not."""
    if dense is None:
        return ("no dense source was given to ask whether the dense lane would reach it (pass dense= to the "
                "check for a meaning-only attack)")
    universe = [*permitted_chunks(caller, chunks, date), chunk]
    try:
        ranked = dense_rank(case.query, universe, dense, top_k=len(universe))
    except LabError as exc:
        return f"the dense lane cannot be asked ({exc})"
    ids = [c.chunk_id for c, _ in ranked]
    lane = f"the dense lane, over {caller.actor_id}'s permitted chunks with {chunk.chunk_id} let through,"
    if chunk.chunk_id not in ids:
        return f"{lane} does not return it at all (no positive similarity)"
    rank = ids.index(chunk.chunk_id) + 1
    score = ranked[rank - 1][1]
    if rank > depth:
        return f"{lane} ranks it {rank} (deeper than its top {depth})"
    if score < DENSE_REACH_MIN_COSINE:
        return (f"{lane} ranks it {rank}, but at a similarity of only {score:.2f} (below {DENSE_REACH_MIN_COSINE}): "
                "the query is not about what the chunk says")
    return None


def check_adversarial_cases(
    cases: Sequence[Case],
    chunks: Sequence[PolicyChunk],
    callers: Mapping[str, Caller] | Sequence[Caller],
    on_date: dt.date,
    *,
    minimum: int = 4,
    dense: Any = None,
    dense_depth: int = DENSE_REACH_DEPTH,
) -> CheckResult:
    """Step 2: at least ``minimum`` adversarial cases, one of each kind in :data:`ADVERSARIAL_KINDS`
    (a not_yet_effective case counts towards ``minimum`` and is checked the same way, but is not required).

    Each case must load and obey the one case rule
    (:func:`~labsrc.gate.case_rules.case_problems`: a restricted, superseded,
    not_yet_effective or wrong-region case forbids only chunks the boundary hides from
    its caller, at least one for the case's own reason). A negative case's query
    must aim at its forbidden chunks, so that without the boundary a lane would
    find them: it shares a word with them (BM25), or, a meaning-only attack, the
    ``dense`` source (when given) ranks them within its top ``dense_depth`` over
    the caller's permitted chunks with the forbidden one let through, at a cosine
    of at least :data:`DENSE_REACH_MIN_COSINE`. An absent case must not be answered by a permitted chunk:
    neither by a code one carries nor by BM25 over the caller's permitted chunks.
    A query of stop words only is refused, as in step 1; the summary counts every kind seen.
    """
    out = Collector("step 2, adversarial cases")
    by_id = {c.chunk_id: c for c in chunks}
    who = as_caller_map(callers)
    _format_problems(out, cases)
    adversarial = [c for c in cases if c.kind in _ANY_ADVERSARIAL]
    out.check(
        len(adversarial) >= minimum,
        f"{len(adversarial)} adversarial cases (at least {minimum})",
        f"only {len(adversarial)} adversarial case(s); the assignment asks for at least {minimum}: "
        f"add {minimum - len(adversarial)} more",
    )
    for kind in ADVERSARIAL_KINDS:
        names = [c.name for c in adversarial if c.kind == kind]
        out.check(bool(names), f"{kind}: {', '.join(names)}", f"no {kind} case")
    # Every kind seen, the optional not_yet_effective included, the required kinds first.
    counts = [(k, sum(c.kind == k for c in adversarial)) for k in (*ADVERSARIAL_KINDS, *_OPTIONAL_KINDS)]
    if adversarial:
        out.passes.append(f"{len(adversarial)} adversarial cases by kind: "
                          + ", ".join(f"{n} {k}" for k, n in counts if n))
    for case in adversarial:
        empty = _empty_query(out, case)
        if not _rule_problems(out, case, who, by_id, on_date) or empty:
            continue
        caller, date = who[case.caller], case_date(case, on_date)
        query_terms = set(tokens(case.query))
        if case.kind in NEGATIVE_KINDS:
            for chunk_id in case.forbidden:
                if query_terms & set(tokens(by_id[chunk_id].text)):
                    continue  # BM25 would score it without the boundary
                reach = _dense_reach(case, caller, by_id[chunk_id], chunks, date, dense, dense_depth)
                if reach is None:
                    out.passes.append(f"{case.name}: a meaning-only attack the dense lane, without the boundary, "
                                      f"ranks {chunk_id} within its top {dense_depth}")
                    continue
                out.problem(
                    f"case {case.name!r} shares no word with forbidden chunk {chunk_id}, so BM25 would not find it "
                    f"even without the boundary, and {reach}: use wording or a code from that chunk, or say what it "
                    "says in other words, close enough in meaning for the dense lane",
                    kind="attacks neither lane would aim at a forbidden chunk",
                )
        if case.kind == "absent":
            codes = set(policy_codes(case.query))
            carriers = sorted(
                c.chunk_id for c in chunks
                if codes & set(policy_codes(c.text)) and not block_reasons(caller, c, date)
            )
            if carriers:
                out.problem(
                    f"absent case {case.name!r} names a code that permitted chunk(s) {carriers} carry: "
                    "the evidence is not absent for this caller",
                    kind="absent cases a permitted chunk answers",
                )
            elif (answer := _answered(case, caller, chunks, date)) is not None:
                out.problem(answer, kind="absent cases a permitted chunk answers")
    return out.result()
