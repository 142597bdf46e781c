"""Checks for steps 1 and 2: the learner's positive and adversarial cases."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

from labsrc.boundary import block_reasons
from labsrc.course.checks.evidence import (
    case_date,
    policy_codes,
    query_style,
    reasons_text,
)
from labsrc.course.checks.result import CheckResult, Collector
from labsrc.evaluation.gates import as_caller_map
from labsrc.lanes.analysis import tokens
from labsrc.records.cases import NEGATIVE_KINDS, Case
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["ADVERSARIAL_KINDS", "QUERY_STYLES", "check_adversarial_cases", "check_positive_cases"]

#: The positive-query styles step 1 asks for.
QUERY_STYLES = ("exact_code", "paraphrase", "mixed")
#: The adversarial kinds step 2 asks for, one of each at least.
ADVERSARIAL_KINDS = ("restricted", "superseded", "wrong_region", "absent")

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
    out = Collector("step 1, positive cases")
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
        date = case_date(case, on_date)
        for chunk_id in case.expected:
            chunk = by_id.get(chunk_id)
            if chunk is None:
                out.problems.append(f"case {case.name!r} expects {chunk_id!r}, which is not in the corpus")
            elif block_reasons(caller, chunk, date):
                out.problems.append(
                    f"case {case.name!r} expects {chunk_id}, which caller {caller.actor_id} cannot see on {date} "
                    f"({reasons_text(caller, chunk, date)}): a positive case may only expect permitted evidence"
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
    out = Collector("step 2, adversarial cases")
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
        date = case_date(case, on_date)
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
