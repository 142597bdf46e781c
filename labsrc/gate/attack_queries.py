"""Queries made from a chunk's own distinctive text: what an attacker who knows a hidden chunk would type.

Notebook 05's hidden-code attack asks for ``VIP-RPL-1``, the code of a chunk
Luna may not see. A team's cases rarely ask for a hidden chunk's code, so the
gate makes such queries itself, from every hidden chunk:

* **its codes**: tokens holding both a letter and a digit (``CD-12``,
  ``RPL-14``, ``v2``), kept as written (a lookup table of codes matches them);
* **its rarest terms**: the three analysed terms of the chunk with the lowest
  document frequency in the stored corpus (ties by term), the words BM25 weighs most.

Each query is the chunk's own text, so any lane that can reach the chunk ranks
it high: a retriever whose boundary lets it through returns it for one of them.
A code is an identifier, shown in reports as ids are; the rarest terms are words
of a hidden chunk, so reports name them by reference (:func:`shown_query`), never
as text: the gate must not become the leak it looks for.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from labsrc.lanes.analysis import LESSON_TOKEN_PATTERN, Analyzer, lesson_analyzer
from labsrc.records.policy import PolicyChunk

__all__ = ["AttackQueries", "attack_queries", "chunk_codes", "shown_query"]

_RAW_TOKEN = re.compile(LESSON_TOKEN_PATTERN)
#: Terms in a rarest-terms query.
RARE_TERMS = 3


def chunk_codes(text: str) -> tuple[str, ...]:
    """The codes in ``text`` as written, in order, without repeats: tokens with a letter and a digit.

    ``chunk_codes("Rule RPL-14 replaces RPL-9 (v2).") == ("RPL-14", "RPL-9", "v2")``.
    """
    found: dict[str, None] = {}
    for token in _RAW_TOKEN.findall(text):
        if any(ch.isdigit() for ch in token) and any(ch.isalpha() for ch in token):
            found.setdefault(token, None)
    return tuple(found)


def shown_query(how: str, query: str, chunk_id: str) -> str:
    """How reports show an attack query: a code as it is, words of a chunk by reference."""
    return query if how == "code" else f"<the {how} of {chunk_id!r}>"


@dataclass(frozen=True)
class AttackQueries:
    """The attack queries of every stored chunk, computed once per run (the rarest terms need the corpus's df)."""

    by_chunk: Mapping[str, tuple[tuple[str, str], ...]]

    def of(self, chunk_id: str) -> tuple[tuple[str, str], ...]:
        """``(how, query)`` pairs for one chunk: ``("code", "CD-12")``, ``("rarest terms", ...)``."""
        return self.by_chunk.get(chunk_id, ())


def attack_queries(chunks: Sequence[PolicyChunk], analyzer: Analyzer = lesson_analyzer) -> AttackQueries:
    """Every chunk's attack queries: its first code and its three rarest terms; repeats dropped."""
    terms = {c.chunk_id: analyzer(c.text) for c in chunks}
    df: Counter[str] = Counter()
    for chunk_terms in terms.values():
        df.update(set(chunk_terms))
    out: dict[str, tuple[tuple[str, str], ...]] = {}
    for chunk in chunks:
        queries: dict[str, str] = {}
        codes = chunk_codes(chunk.text)
        if codes:
            queries.setdefault(codes[0], "code")
        rare = sorted(set(terms[chunk.chunk_id]), key=lambda t: (df[t], t))[:RARE_TERMS]
        if rare:
            queries.setdefault(" ".join(rare), "rarest terms")
        out[chunk.chunk_id] = tuple((how, query) for query, how in queries.items())
    return AttackQueries(out)
