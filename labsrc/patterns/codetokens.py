"""Code-aware query tokens: ``getUserName`` also matches "get", "user" and "name".

Identifiers glue words together. A prose analyzer keeps ``getUserName`` as one
token, so a question about "user name" never meets the code that defines it.
:func:`code_tokens` keeps each identifier whole *and* adds its parts, split at
camelCase humps, acronym boundaries (``HTTPServer`` → http, server), digits
and underscores (snake_case), so both the exact identifier and its words count.
"""

from __future__ import annotations

import re
import unicodedata

from labsrc.errors import InvalidArgument

__all__ = ["code_tokens", "split_identifier"]

#: An identifier-ish run: letters, digits and underscores.
_IDENTIFIER = re.compile(r"[^\W]+")
#: The parts of one underscore-free run: an acronym before a capitalised word, a
#: capitalised or lowercase word, a trailing acronym, or digits. Case boundaries
#: are ASCII (A-Z); other letters stay inside the word they belong to.
_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[^\W\d_A-Z]+|[A-Z]+|\d+|[^\W\d_]+")


def split_identifier(identifier: str) -> list[str]:
    """The lowercase parts of one identifier: ``"getUserName"`` → ``["get", "user", "name"]``."""
    parts: list[str] = []
    for piece in identifier.split("_"):
        parts.extend(match.group().casefold() for match in _PART.finditer(piece))
    return parts


def code_tokens(query: str) -> list[str]:
    """Each identifier of ``query``, lowercased, followed by its parts; no duplicates.

    ``code_tokens("getUserName") == ["getusername", "get", "user", "name"]`` and
    ``code_tokens("user_id") == ["user_id", "user", "id"]``. Order is first
    occurrence, so the list is deterministic and usable as a BM25 analyzer.
    """
    if not isinstance(query, str):
        raise InvalidArgument(f"query must be a string, not {type(query).__name__}")
    seen: dict[str, None] = {}
    for match in _IDENTIFIER.finditer(unicodedata.normalize("NFKC", query)):
        identifier = match.group()
        whole = identifier.strip("_").casefold()
        if whole:
            seen.setdefault(whole, None)
        for part in split_identifier(identifier):
            seen.setdefault(part, None)
    return list(seen)
