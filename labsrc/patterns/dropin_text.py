"""The drop-in retriever's text helpers: its tokenizer, a dict-based RRF and snippets.

Small functions a newcomer can call on their own (``tokenize``, ``rrf``,
``make_snippet``); :class:`~labsrc.patterns.dropin.HybridRetriever` uses the same ones.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

from labsrc.errors import InvalidArgument
from labsrc.fusion.rrf import DEFAULT_RRF_K, check_rrf_k, rrf_contribution
from labsrc.lanes.analysis import LESSON_TOKEN_PATTERN, Analyzer
from labsrc.ranking import check_top_k

__all__ = ["DROPIN_ANALYZER", "make_snippet", "rrf", "tokenize"]

#: Casefolded runs of letters and digits after NFKC, hyphenated codes kept whole; no stopwords.
#: The token pattern is the lesson analyzer's (:data:`~labsrc.lanes.analysis.LESSON_TOKEN_PATTERN`),
#: so ``VIP-RPL-1`` is one token here too and the hidden-code attack of notebook 02 has nothing to split.
DROPIN_ANALYZER = Analyzer(pattern=LESSON_TOKEN_PATTERN, stopwords=frozenset(), name="dropin-tokenizer-v2")


def tokenize(text: str) -> list[str]:
    """Lowercased letter-and-digit runs, unicode-safe: ``tokenize("Café ＲＰＬ１４") == ["café", "rpl14"]``.

    NFKC folds compatibility characters first (full-width letters and digits
    become ASCII), then ``str.casefold`` lowercases (the unicode-aware lowercase:
    ``"ß"`` becomes ``"ss"``). Non-ASCII letters are kept, never split off.
    A hyphen *between* letters or digits joins them, as in the lesson analyzer:
    ``tokenize("VIP-RPL-1") == ["vip-rpl-1"]``. Other punctuation, ``_`` and
    stray hyphens separate tokens; there are no stopwords.
    """
    if not isinstance(text, str):
        raise InvalidArgument(f"tokenize takes a string, not {type(text).__name__}")
    return DROPIN_ANALYZER(text)


def rrf(ranks: Mapping[str, Sequence[int]], k: float = DEFAULT_RRF_K) -> dict[str, float]:
    """score(id) = Σ_lanes 1 / (k + rank), from ``{id: [its 1-based rank in each lane]}``.

    ``k`` is RRF's smoothing constant (60 by default, per Cormack et al. 2009),
    not a number of results. The dict comes back in (score desc, id asc) order.
    """
    check_rrf_k(k)
    scores: dict[str, float] = {}
    for item, lane_ranks in ranks.items():
        if isinstance(lane_ranks, (str, bytes)) or not isinstance(lane_ranks, Sequence):
            raise InvalidArgument(f"ranks[{item!r}] must be a list of 1-based ranks, not {lane_ranks!r}")
        for rank in lane_ranks:
            if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)):
                raise InvalidArgument(f"ranks[{item!r}] holds {rank!r}; ranks are 1-based ints")
        # Sum in rank order so the float result never depends on the input order.
        scores[item] = sum(rrf_contribution(int(rank), k) for rank in sorted(lane_ranks))
    return dict(sorted(scores.items(), key=lambda pair: (-pair[1], pair[0])))


def _word_pattern(term: str) -> re.Pattern[str]:
    # The term as a whole word: not preceded or followed by a letter or digit.
    return re.compile(r"(?<![^\W_])" + re.escape(term) + r"(?![^\W_])", re.IGNORECASE)


def make_snippet(text: str, query: str, max_len: int = 240) -> str:
    """At most ``max_len`` characters of ``text`` centred on the first query-term match.

    The window is cut on word boundaries (whitespace) where it does not reach
    the text's ends. When no query term occurs in ``text`` the snippet is the
    head of the text. A text shorter than ``max_len`` comes back whole.
    """
    max_len = check_top_k(max_len, "max_len")
    if len(text) <= max_len:
        return text
    first: tuple[int, int] | None = None
    for term in dict.fromkeys(tokenize(query)):
        match = _word_pattern(term).search(text)
        if match and (first is None or match.start() < first[0]):
            first = (match.start(), match.end())
    if first is None:
        start = 0
    else:
        centre = (first[0] + first[1]) // 2
        start = min(max(0, centre - max_len // 2), len(text) - max_len)
    end = start + max_len
    if start > 0:
        # Drop the partial word at the left edge (unless the match itself would go).
        space = text.find(" ", start, first[0] if first else end)
        if space != -1:
            start = space + 1
    if end < len(text):
        space = text.rfind(" ", first[1] if first else start, end + 1)
        if space > start:
            end = space
    return text[start:end].strip()
