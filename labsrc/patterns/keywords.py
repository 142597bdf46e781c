"""Keyword extraction with YAKE, the step that feeds content enrichment.

:func:`~labsrc.patterns.enrich.enrich_content` prepends a chunk's keywords to
the text BM25 indexes; this module supplies them. YAKE (Campos et al., "YAKE!
Keyword extraction from single documents using multiple local features",
*Information Sciences* 509, 2020) scores each candidate n-gram from features of
the document alone (casing, position, frequency, how many contexts a word
appears in, how spread over the sentences it is), so it needs no corpus and no
model download. A lower score is a better keyword.

The ``yake`` package is an extra: ``pip install 'hybrid-retrieval-lab[keywords]'``.
It is imported inside :func:`extract_keywords`, so ``import labsrc`` works without it.

Determinism. YAKE gives equal scores to candidates with equal features, which
is common in a short chunk, and orders those ties by where they first occur in
the text; its ``top`` then cuts inside a tie by that order. Here the lab ranks
all of YAKE's candidates itself, by (score ascending, keyword ascending), and
only then drops near-duplicates and keeps ``top``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import resources

from labsrc.errors import InvalidArgument, MissingDependency
from labsrc.patterns.enrich import MAX_KEYWORDS, enrich_content

__all__ = [
    "DEFAULT_DEDUP_LIMIT",
    "DEFAULT_MAX_NGRAM",
    "INSTALL_KEYWORDS",
    "enrich_with_keywords",
    "extract_keywords",
]

#: Longest keyword, in words. YAKE's own default is 3; with 3, the seven keywords of a
#: short chunk overlap heavily ("damaged refurbished laptops", "damaged refurbished",
#: "damaged"), and every repeat is one more term-frequency count for BM25.
DEFAULT_MAX_NGRAM = 2
#: YAKE's default: a candidate whose similarity to a better keyword exceeds this is dropped.
DEFAULT_DEDUP_LIMIT = 0.9
INSTALL_KEYWORDS = "pip install 'hybrid-retrieval-lab[keywords]'"

_HEADING = re.compile(r"^#{1,6}\s+")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_SENTENCE_END = (".", "!", "?", ":", ";")
_STOPWORD_FILE = re.compile(r"stopwords_([a-z]{2})\.txt")


def _yake():
    try:
        import yake
    except ImportError as exc:
        raise MissingDependency(f"keyword extraction needs the keywords extra: {INSTALL_KEYWORDS} ({exc})") from exc
    return yake


def _languages() -> list[str]:
    """The languages YAKE ships a stopword list for (``stopwords_<code>.txt``)."""
    folder = resources.files("yake.core") / "StopwordsList"
    names = (entry.name for entry in folder.iterdir()) if folder.is_dir() else ()
    return sorted(m.group(1) for m in map(_STOPWORD_FILE.fullmatch, names) if m)


def _sentence_text(text: str) -> str:
    """``text`` on one line, with each markdown block ending in a full stop.

    YAKE replaces line breaks with spaces, so a heading would run into the first
    sentence under it ("Damaged on arrival Rule RPL-14: ..." yields "arrival rule").
    A heading, a list item and a paragraph (lines up to a blank line) each end a
    sentence here; lines inside a paragraph are joined, as hard-wrapped prose needs.
    """
    blocks: list[list[str]] = [[]]
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            blocks.append([])
        elif _HEADING.match(line):
            blocks += [[_HEADING.sub("", line)], []]
        elif _LIST_ITEM.match(line):
            blocks += [[_LIST_ITEM.sub("", line)]]
        else:
            blocks[-1].append(line)
    sentences = (" ".join(block) for block in blocks if block)
    return " ".join(s if s.endswith(_SENTENCE_END) else f"{s}." for s in sentences)


def _select(
    scored: Iterable[tuple[str, float]],
    *,
    top: int,
    dedup_limit: float,
    similarity: Callable[[str, str], float],
) -> list[str]:
    """Best ``top`` keywords: by (score asc, keyword asc), near-duplicates of a better one dropped."""
    kept: list[str] = []
    seen: set[str] = set()
    for keyword, _ in sorted(((k.strip().lower(), float(s)) for k, s in scored), key=lambda ks: (ks[1], ks[0])):
        if not keyword or keyword in seen:
            continue
        seen.add(keyword)
        if any(similarity(keyword, better) > dedup_limit for better in kept):
            continue
        kept.append(keyword)
        if len(kept) == top:
            break
    return kept


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(f"{name} must be a positive integer, not {value!r}")
    return value


def extract_keywords(
    text: str,
    *,
    top: int = MAX_KEYWORDS,
    max_ngram: int = DEFAULT_MAX_NGRAM,
    language: str = "en",
    dedup_limit: float = DEFAULT_DEDUP_LIMIT,
) -> list[str]:
    """The ``top`` best YAKE keywords of ``text``, best first, lowercased.

    YAKE (Campos et al., "YAKE! Keyword extraction from single documents using
    multiple local features", *Information Sciences* 509, 2020) scores each
    candidate of 1 to ``max_ngram`` words that neither starts nor ends with a
    stopword; lower is better. Candidates are ranked by (score ascending,
    keyword ascending), so equal scores break by the keyword's text, and a
    candidate more similar than ``dedup_limit`` to a better one (YAKE's ``seqm``
    similarity, 0-1) is dropped; 1.0 keeps every distinct keyword.

    Keywords are lowercased: YAKE's candidates are keyed by their lowercased
    form, and the surface form it can also report is simply the first occurrence's,
    so it would change when a sentence is reordered. BM25's analyzers lowercase anyway.

    Parameters
    ----------
    top:
        How many keywords to return at most (7 by default, what
        :func:`~labsrc.patterns.enrich.enrich_content` keeps).
    max_ngram:
        Longest keyword in words (YAKE's ``n``); 2 by default, see :data:`DEFAULT_MAX_NGRAM`.
    language:
        Two-letter code of YAKE's stopword list (``"en"``, ``"de"``, ...).
    dedup_limit:
        Similarity above which a candidate counts as a near-duplicate, in (0, 1].

    Blank text gives ``[]``. Raises :class:`~labsrc.errors.InvalidArgument` for a
    bad argument and :class:`~labsrc.errors.MissingDependency` without the
    ``keywords`` extra.
    """
    if not isinstance(text, str):
        raise InvalidArgument(f"text must be a string, not {type(text).__name__}")
    top = _positive_int(top, "top")
    max_ngram = _positive_int(max_ngram, "max_ngram")
    if isinstance(dedup_limit, bool) or not isinstance(dedup_limit, (int, float)) or not 0 < dedup_limit <= 1:
        raise InvalidArgument(f"dedup_limit must be a number in (0, 1], not {dedup_limit!r}")
    if not isinstance(language, str):
        raise InvalidArgument(f"language must be a two-letter code such as 'en', not {language!r}")
    yake = _yake()
    languages = _languages()
    if language not in languages:
        raise InvalidArgument(f"language must be one of YAKE's stopword lists {languages}, not {language!r}")
    sentences = _sentence_text(text)
    if not sentences:
        return []
    # dedup_lim=1.0 and no top: YAKE returns every valid candidate with its score
    # (lowercased), and the ordering, the cut and the deduplication happen in _select.
    extractor = yake.KeywordExtractor(lan=language, n=max_ngram, dedup_lim=1.0, top=sys.maxsize)
    return _select(extractor.extract_keywords(sentences), top=top, dedup_limit=float(dedup_limit), similarity=extractor.seqm)


def enrich_with_keywords(
    content: str,
    entities: Mapping[str, Sequence[str]] | None = None,
    *,
    top: int = MAX_KEYWORDS,
    max_ngram: int = DEFAULT_MAX_NGRAM,
    language: str = "en",
) -> str:
    """``enrich_content(content, extract_keywords(content, ...), entities)``: the indexable string.

    For chunks whose upstream step supplied no keywords. ``top`` is at most 7,
    the number :func:`~labsrc.patterns.enrich.enrich_content` keeps.
    """
    if _positive_int(top, "top") > MAX_KEYWORDS:
        raise InvalidArgument(f"top must be at most {MAX_KEYWORDS} (enrich_content keeps {MAX_KEYWORDS}), not {top!r}")
    if not isinstance(content, str):
        raise InvalidArgument(f"content must be a string, not {type(content).__name__}")
    keywords = extract_keywords(content, top=top, max_ngram=max_ngram, language=language)
    return enrich_content(content, keywords, entities)
