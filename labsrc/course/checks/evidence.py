"""What the checks look for in a learner's work: policy codes, query styles, leaked text and hidden ids."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from labsrc.boundary import block_reasons
from labsrc.records.cases import Case
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["chunk_text_in", "hidden_ids_in", "policy_codes", "query_style"]

# A policy code: letters, optional further letter groups, a number, an optional suffix:
# RPL-14, CLM-7, VIP-RPL-1, RPL-14-US. Matched case-insensitively, on the raw query.
_POLICY_CODE = re.compile(r"(?<![\w-])[A-Za-z]{2,6}(?:-[A-Za-z]{2,6})*-\d+(?:-[A-Za-z]{1,6})?(?![\w-])")
# A chunk sentence shorter than this many words is too generic to call a leak on its own.
_MIN_LEAK_WORDS = 5

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


def case_date(case: Case, on_date: dt.date) -> dt.date:
    return case.on_date or on_date


def reasons_text(caller: Caller, chunk: PolicyChunk, on_date: dt.date) -> str:
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
