"""A case query the lesson analyzer reduces to nothing: every word a stop word, or no word at all.

``"the a of an is for"`` is not blank, so the case format and the case rule let
it through, yet BM25 scores no chunk for it (every term is dropped before
scoring) and ``labsrc gate`` later reports the case only as a recall failure.
:func:`empty_query_message` says why at once, naming the dropped words. It asks
the library's own analyzer (:data:`~labsrc.lanes.analysis.lesson_analyzer`: its
pattern, normal form and stop list), so the check and the sparse lane agree.
"""

from __future__ import annotations

from labsrc.errors import InvalidArgument
from labsrc.lanes.analysis import lesson_analyzer

__all__ = ["empty_query_message", "stop_words_in"]


def stop_words_in(query: str) -> tuple[str, ...]:
    """The words of ``query`` the lesson analyzer drops as stop words, normalised, in order, without repeats:
    ``stop_words_in("The form of the claim") == ("the", "of")``."""
    if not isinstance(query, str):
        raise InvalidArgument(f"stop_words_in: query must be a string, got {type(query).__name__} {query!r}")
    return tuple(dict.fromkeys(w for w in lesson_analyzer.words(query) if w in lesson_analyzer.stopwords))


def empty_query_message(query: str) -> str | None:
    """Why BM25 has no term to match for ``query``, or None when the lesson analyzer keeps a term of it.

    A blank query is left to the case rule, which says so already (None here).
    """
    if not isinstance(query, str):
        raise InvalidArgument(f"empty_query_message: query must be a string, got {type(query).__name__} {query!r}")
    if not query.strip() or lesson_analyzer(query):
        return None
    dropped = stop_words_in(query)
    if dropped:
        return (f"every word is a stop word ({', '.join(dropped)}), so BM25 has no term to match: "
                "ask with a content word or a code")
    return ("it holds no letter or digit, so the analyzer finds no word in it and BM25 has no term to match: "
            "ask with a content word or a code")
