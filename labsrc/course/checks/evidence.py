"""What the checks look for in a learner's work: policy codes, query styles, leaked text and hidden ids."""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from labsrc.boundary import block_reasons
from labsrc.lanes.analysis import LESSON_STOPWORDS, LUCENE_ENGLISH_STOPWORDS, fold_dashes, tokens
from labsrc.records.cases import Case
from labsrc.records.policy import Caller, PolicyChunk

__all__ = [
    "QUESTION_WORDS",
    "chunk_text_in",
    "chunk_text_by_field",
    "chunk_titles_by_field",
    "content_words",
    "hidden_ids_in",
    "policy_codes",
    "query_style",
]

# A policy code: letters, optional further letter groups, a number, an optional suffix:
# RPL-14, CLM-7, VIP-RPL-1, RPL-14-US. Matched case-insensitively, on the raw query.
_POLICY_CODE = re.compile(r"(?<![\w-])[A-Za-z]{2,6}(?:-[A-Za-z]{2,6})*-\d+(?:-[A-Za-z]{1,6})?(?![\w-])")
# A chunk sentence shorter than this many words is too generic to call a leak on its own.
_MIN_LEAK_WORDS = 5

#: Words that carry no topic in a support question, on top of the lesson's and Lucene's stopwords.
QUESTION_WORDS = frozenset({
    "i", "me", "my", "you", "your", "we", "our", "us", "he", "she", "his", "her", "its",
    "do", "does", "did", "can", "could", "would", "should", "may", "might", "must", "shall",
    "what", "which", "who", "whom", "how", "why", "where", "am", "been", "being", "have", "has", "had",
    "get", "got", "so", "any", "all", "some", "from", "about", "up", "out", "than", "too", "very",
})  # fmt: skip


def content_words(text: str) -> list[str]:
    """The lesson analyzer's terms of ``text`` that carry its topic, in order, without repeats.

    Stopwords (the lesson's, Lucene's, :data:`QUESTION_WORDS`) and one-letter
    tokens (the ``s`` of ``maker's``) are dropped:
    ``content_words("can I swap my broken laptop?") == ["swap", "broken", "laptop"]``.
    """
    skip = LESSON_STOPWORDS | LUCENE_ENGLISH_STOPWORDS | QUESTION_WORDS
    return list(dict.fromkeys(t for t in tokens(text) if len(t) > 1 and t not in skip))


def policy_codes(text: str) -> tuple[str, ...]:
    """Policy codes in ``text`` in order of appearance, upper-cased: ``"rpl-14 vs CLM-7"`` → ``("RPL-14", "CLM-7")``.

    Any Unicode dash counts as ``-``, as the analyzer reads it (``VIP‑RPL‑1`` pasted with U+2011 is ``VIP-RPL-1``).
    """
    return tuple(match.upper() for match in _POLICY_CODE.findall(fold_dashes(text)))


def query_style(query: str) -> str:
    """``exact_code`` (only policy codes), ``mixed`` (a code plus words) or ``paraphrase`` (no code)."""
    codes = policy_codes(query)
    if not codes:
        return "paraphrase"
    rest = _POLICY_CODE.sub(" ", fold_dashes(query))
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


def _strings_at(value: Any, skip_keys: frozenset[str] = frozenset(), path: str = "") -> Iterator[tuple[str, str]]:
    """``(field path, string)`` for every string inside ``value``: ``debug.notes[0]``; a key sits at its own path."""
    if isinstance(value, str):
        yield path or "(the value itself)", value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if key in skip_keys:
                continue
            here = f"{path}.{key}" if path else str(key)
            yield here, str(key)
            yield from _strings_at(item, skip_keys, here)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _strings_at(item, skip_keys, f"{path}[{index}]")
    elif isinstance(value, (set, frozenset)):
        for item in sorted(value, key=repr):
            yield from _strings_at(item, skip_keys, f"{path}{{}}")


_WORD = re.compile(r"[^\W_]+(?:-[^\W_]+)*")


@functools.lru_cache(maxsize=8192)
def _words(text: str) -> tuple[str, ...]:
    # Cached: a check compares every string of a run with every chunk's text, so each chunk's words are asked
    # for once per string (1,772 times for the rubric's exercise 6 replay: 2.1 of its 2.8 s before the cache).
    return tuple(w.casefold() for w in _WORD.findall(text))


def _common_runs(words: Sequence[str], other: Sequence[str], minimum: int) -> set[tuple[str, ...]]:
    """Maximal runs of ``minimum``+ consecutive words that ``words`` and ``other`` share (longest common substrings)."""
    runs: set[tuple[str, ...]] = set()
    previous = [0] * (len(other) + 1)
    for i, word in enumerate(words):
        current = [0] * (len(other) + 1)
        for j, candidate in enumerate(other):
            if word == candidate:
                current[j + 1] = previous[j] + 1
        for j in range(len(other) + 1):
            length = previous[j]
            # A run that ended at (i - 1, j - 1) and does not continue here is maximal.
            if length >= minimum and (j == len(other) or current[j + 1] == 0):
                runs.add(tuple(words[i - length:i]))
        previous = current
    runs.update(tuple(words[len(words) - n:]) for n in previous if n >= minimum)
    return runs


def _contains(haystack: tuple[str, ...], run: tuple[str, ...]) -> bool:
    return f" {' '.join(run)} " in f" {' '.join(haystack)} "


def chunk_text_in(
    value: Any, chunks: Sequence[PolicyChunk], *, skip_keys: Iterable[str] = ("query", "notes")
) -> list[str]:
    """Sorted ids of the chunks whose text, whole or in part, appears in ``value``.

    "In part" means a run of :data:`_MIN_LEAK_WORDS` or more consecutive words of
    the chunk inside one string of ``value``: a 60-character snippet is text too.
    A run several chunks share (two versions of a rule say the same thing) is
    blamed on the chunks holding the longest run found.
    ``value`` is any JSON-like structure: a trace, an artifact record, a list of them.
    Keys in ``skip_keys`` are not searched: a query may quote old policy wording
    on purpose (a superseded case does), and it is the user's text, not retrieved text.
    """
    texts = {c.chunk_id: _words(c.text) for c in chunks}
    found: set[str] = set()
    for string in dict.fromkeys(_strings(value, frozenset(skip_keys))):
        words = _words(string)
        if len(words) < _MIN_LEAK_WORDS:
            continue
        runs: set[tuple[str, ...]] = set()
        for text in texts.values():
            runs |= _common_runs(words, text, _MIN_LEAK_WORDS)
        maximal = [r for r in runs if not any(len(o) > len(r) and _contains(o, r) for o in runs)]
        for run in maximal:
            found.update(chunk_id for chunk_id, text in texts.items() if _contains(text, run))
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


def chunk_text_by_field(
    value: Any, chunks: Sequence[PolicyChunk], *, skip_keys: Iterable[str] = ("query", "notes")
) -> dict[str, list[str]]:
    """:func:`chunk_text_in`, field by field: ``{"debug.raw": ["eu-refurb-v2-rule"]}``, fields in order of appearance."""
    skip = tuple(skip_keys)
    found: dict[str, list[str]] = {}
    for path, string in _strings_at(value, frozenset(skip)):
        ids = chunk_text_in(string, chunks, skip_keys=skip)
        if ids:
            found.setdefault(path, [])
            found[path] = sorted(set(found[path]) | set(ids))
    return found


def chunk_titles_by_field(
    value: Any, chunks: Sequence[PolicyChunk], *, skip_keys: Iterable[str] = ("query", "notes")
) -> dict[str, list[str]]:
    """Fields whose string is, or contains, a chunk's title (two words or more), with the chunks of that title.

    A title is the chunk's own text too: "VIP merchant terms: refurbished laptops" tells a reader what a
    hidden chunk is about, and no lane returns it, so a trace has no reason to hold it.
    """
    titles: dict[tuple[str, ...], list[str]] = {}
    for chunk in chunks:
        words = _words(chunk.title or "")
        if len(words) >= 2:
            titles.setdefault(words, []).append(chunk.chunk_id)
    found: dict[str, list[str]] = {}
    for path, string in _strings_at(value, frozenset(skip_keys)):
        words = _words(string)
        hits = sorted({cid for title, ids in titles.items() if _contains(words, title) for cid in ids})
        if hits:
            found[path] = sorted(set(found.get(path, [])) | set(hits))
    return found
