"""Analysis: turning text into the terms BM25 counts.

``tokens`` is the lesson's analyzer: lowercase, keep hyphenated codes such as
``rpl-14`` whole, drop a handful of stopwords. :class:`Analyzer` generalises it
(token pattern, stopword set, NFKC + casefold, dashes read as ``-``, optional
Snowball stemming) so the same lane can index real prose.

A code pasted from a word processor often carries another dash: ``VIP‑RPL‑1``
with U+2011 (non-breaking hyphen), an en dash U+2013 or a minus sign U+2212.
NFKC leaves those alone, so the analyzer reads every one of :data:`DASHES` as
ASCII ``-`` (``dashes=True``, the default) and the code stays one token,
``vip-rpl-1``. On ASCII text this changes nothing.

The lesson writes the token pattern as ``[a-z0-9]+(?:-[a-z0-9]+)*``. The lab uses
``[^\\W_]+(?:-[^\\W_]+)*`` instead: on ASCII text the two match exactly the same
tokens (after lowercasing, "a word character that is not ``_``" *is* ``[a-z0-9]``),
but the lab's pattern keeps non-ASCII letters such as ``é`` or ``ß`` instead of
silently splitting words at them.
"""

from __future__ import annotations

import importlib
import re
import threading
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from labsrc.errors import InvalidArgument, MissingDependency

__all__ = [
    "DASHES",
    "Analyzer",
    "LESSON_TOKEN_PATTERN",
    "LESSON_STOPWORDS",
    "LUCENE_ENGLISH_STOPWORDS",
    "PROSE_TOKEN_PATTERN",
    "STEM_CACHE_SIZE",
    "english_analyzer",
    "fold_dashes",
    "lesson_analyzer",
    "tokens",
]

#: Letters and digits, with internal hyphens kept so policy codes stay whole.
LESSON_TOKEN_PATTERN = r"[^\W_]+(?:-[^\W_]+)*"

#: Runs of two or more word characters: the usual pattern for prose (scikit-learn, bm25s).
PROSE_TOKEN_PATTERN = r"(?u)\b\w\w+\b"

#: The lesson's stopwords (spec, "Sparse lane").
LESSON_STOPWORDS = frozenset({"a", "an", "the", "after", "for", "of", "is", "within", "when"})

#: Lucene's classic English stop set (EnglishAnalyzer.ENGLISH_STOP_WORDS_SET), 33 words.
LUCENE_ENGLISH_STOPWORDS = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in",
        "into", "is", "it", "no", "not", "of", "on", "or", "such", "that", "the",
        "their", "then", "there", "these", "they", "this", "to", "was", "will", "with",
    }
)  # fmt: skip


#: The characters ``Analyzer(dashes=True)`` reads as ASCII ``-``: every dash and hyphen of Unicode 14 (general
#: category Pd, ``-`` itself aside) and U+2212 MINUS SIGN (category Sm, but what a word processor puts in "RPL−14").
#: Written out rather than derived at import: deriving costs 0.12 s, and the set would then depend on the Python's
#: Unicode version (3.10 has no U+2E5D), so one saved index would analyse differently on two machines.
#: ``tests/test_dashes.py`` checks it against ``unicodedata.category``.
DASHES = frozenset(
    "\u058a\u05be\u1400\u1806\u2010\u2011\u2012\u2013\u2014\u2015\u2212\u2e17\u2e1a\u2e3a\u2e3b\u2e40"
    "\u2e5d\u301c\u3030\u30a0\ufe31\ufe32\ufe58\ufe63\uff0d\U00010ead"
)
_TO_HYPHEN = str.maketrans(dict.fromkeys(DASHES, "-"))


def fold_dashes(text: str) -> str:
    """``text`` with every character of :data:`DASHES` read as ASCII ``-`` (ASCII text comes back as it is)."""
    return text if text.isascii() else text.translate(_TO_HYPHEN)


#: Most distinct tokens an analyzer remembers the stems of (about 150 bytes each); beyond it, new tokens are
#: stemmed on every use. SciFact's 5,183 abstracts hold 35,851 distinct tokens.
STEM_CACHE_SIZE = 1_000_000


class _Stems(dict):
    """``token → stem``, filled on first use.

    Snowball's Python stemmer keeps the word it is working on in its own fields, so two threads stemming at
    once corrupt each other's words (wrong stems, or an ``IndexError`` from inside the stemmer; measured:
    8 threads over 800 SciFact abstracts, 7 analysed wrong). It therefore runs under a lock, and only for
    a token not seen before: reading a stem is one dict lookup, which is also the speed-up (a SciFact
    abstract took 5.1 ms to analyse stemming every token, 0.33 ms stemming each distinct token once).
    Two threads that miss the same new token together stem it one after the other and store the same string.
    """

    __slots__ = ("_lock", "_stem_word")

    def __init__(self, stem_word: Callable[[str], str]) -> None:
        super().__init__()
        self._stem_word = stem_word
        self._lock = threading.Lock()

    def __missing__(self, token: str) -> str:
        with self._lock:
            stem = self._stem_word(token)
        if len(self) < STEM_CACHE_SIZE:
            self[token] = stem
        return stem

    def __reduce__(self) -> tuple:
        # Pickled (to an analysis worker) as the stemmer alone: a lock does not pickle, and the cache refills.
        return (type(self), (self._stem_word,))


def _load_stemmer(language: str) -> Callable[[str], str]:
    try:
        import snowballstemmer
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependency(
            f"Snowball stemming ({language!r}) needs the 'stem' extra: "
            "pip install 'hybrid-retrieval-lab[stem]'"
        ) from exc
    # snowballstemmer.stemmer() hands back PyStemmer's C stemmer whenever PyStemmer is importable (other
    # packages pull it in), and its Snowball release stems some words differently: the same analyzer would
    # then score differently on two machines. The pure-Python algorithm is loaded by its module instead.
    folder = Path(snowballstemmer.__file__).parent
    languages = sorted(p.stem.removesuffix("_stemmer") for p in folder.glob("*_stemmer.py"))
    if language not in languages:
        raise InvalidArgument(f"unknown Snowball language {language!r}; valid: {', '.join(languages)}")
    module = importlib.import_module(f"snowballstemmer.{language}_stemmer")
    stemmer = getattr(module, "".join(part.capitalize() for part in language.split("_")) + "Stemmer")()
    return stemmer.stemWord


@dataclass(frozen=True)
class Analyzer:
    """A configurable text analyzer: normalise, find tokens, drop stopwords, stem.

    The steps run in that order. Stopwords are matched *before* stemming, as in
    Lucene's EnglishAnalyzer, so the stop list is written in surface forms.

    Parameters
    ----------
    pattern:
        Regular expression whose matches are the tokens.
    stopwords:
        Tokens to drop (compared after normalisation).
    normalize:
        Unicode normal form applied first (``None`` to skip). NFKC folds
        compatibility characters, e.g. full-width digits, into plain ones.
    casefold:
        Use ``str.casefold`` (a stronger, unicode-aware lowercase).
    stemmer:
        A Snowball language name such as ``"english"``, or ``None``.
    name:
        A version string recorded in traces and reports.
    dashes:
        Read every character of :data:`DASHES` (Unicode's dashes and hyphens,
        the minus sign) as ASCII ``-``, after the normal form, so ``VIP‑RPL‑1``
        (U+2011) is the token ``vip-rpl-1``. An index saved before this field
        existed loads with ``dashes=False``: it analyses queries as it did.
    """

    pattern: str = LESSON_TOKEN_PATTERN
    stopwords: frozenset[str] = LESSON_STOPWORDS
    normalize: str | None = "NFKC"
    casefold: bool = True
    stemmer: str | None = None
    name: str = "bm25-tokenizer-v1"
    dashes: bool = True
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _stems: _Stems | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.normalize not in (None, "NFC", "NFKC", "NFD", "NFKD"):
            raise InvalidArgument(
                f"normalize must be one of None, 'NFC', 'NFKC', 'NFD', 'NFKD', not {self.normalize!r}"
            )
        if not isinstance(self.dashes, bool):
            raise InvalidArgument(f"dashes must be True or False, not {self.dashes!r}")
        try:
            regex = re.compile(self.pattern)
        except re.error as exc:
            raise InvalidArgument(f"invalid token pattern {self.pattern!r}: {exc}") from exc
        object.__setattr__(self, "stopwords", frozenset(self.stopwords))
        object.__setattr__(self, "_regex", regex)
        object.__setattr__(self, "_stems", None if self.stemmer is None else _Stems(_load_stemmer(self.stemmer)))

    def normalise(self, text: str) -> str:
        """Apply the unicode normal form, the dashes (after it: NFKC turns U+FE58 into U+2014) and case folding."""
        if self.normalize is not None:
            text = unicodedata.normalize(self.normalize, text)
        if self.dashes:
            text = fold_dashes(text)
        return text.casefold() if self.casefold else text

    def words(self, text: str) -> list[str]:
        """The tokens of ``text`` in order, normalised, before stopwords are dropped and stems taken."""
        return self._regex.findall(self.normalise(text))

    def __call__(self, text: str) -> list[str]:
        """The terms of ``text`` in order, duplicates kept. Safe to call from many threads at once."""
        kept = [token for token in self.words(text) if token not in self.stopwords]
        if self._stems is not None:
            stems = self._stems
            kept = [stems[token] for token in kept]
        return kept

    def analyze_many(self, texts: Iterable[str]) -> list[list[str]]:
        return [self(text) for text in texts]


#: The lesson's analyzer (spec, "Sparse lane").
lesson_analyzer = Analyzer()


def tokens(text: str) -> list[str]:
    """The lesson analyzer: ``tokens("Rule RPL-14.") == ["rule", "rpl-14"]``."""
    return lesson_analyzer(text)


@lru_cache(maxsize=1)
def english_analyzer() -> Analyzer:
    """The analyzer for real English prose (the BEIR track).

    Prose tokens (runs of two or more word characters), Lucene's 33-word English
    stop set, then English Snowball stemming: the settings behind the published
    BM25 baselines (bm25s and Anserini's flat BM25 on BEIR). The lesson analyzer
    stays the default for the policy fixtures, whose hyphenated codes this one
    would split. Stemming needs the ``stem`` extra, hence a function, not a
    constant; it returns the same object on every call, so indexes cached per
    analyzer are shared. It reads dashes as ``-`` too (the default), which
    changes none of its tokens: its pattern splits at ``-`` and at every other
    dash alike.
    """
    return Analyzer(
        pattern=PROSE_TOKEN_PATTERN,
        stopwords=LUCENE_ENGLISH_STOPWORDS,
        stemmer="english",
        name="bm25-english-snowball-v1",
    )
