"""Content enrichment: put a chunk's keywords and entities in front of its text.

A chunk that says "it" and "the framework" instead of naming things is hard for
BM25 to find. Prepending the keywords and named entities an upstream step
extracted gives the lexical lane those words::

    key1, key2, key3 | React, Vue, Next.js

    Test content here

The string is what gets *indexed*; users are still shown the original content
(the SQLite store keeps both).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from labsrc.errors import InvalidArgument

__all__ = ["MAX_ENTITIES", "MAX_ENTITIES_PER_TYPE", "MAX_KEYWORDS", "enrich_content"]

#: How many keywords, entities per type and entities in all are kept.
MAX_KEYWORDS = 7
MAX_ENTITIES_PER_TYPE = 2
MAX_ENTITIES = 5


def _strings(values: object, name: str) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise InvalidArgument(f"{name} must be a list of strings, not {type(values).__name__} {values!r}")
    if not all(isinstance(v, str) for v in values):
        raise InvalidArgument(f"{name} must contain only strings, got {values!r}")
    # Blank entries carry no words; dropping them keeps the header free of ", ,".
    return [v.strip() for v in values if v.strip()]


def enrich_content(
    content: str,
    keywords: Sequence[str] | None = None,
    entities: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """``"kw1, kw2 | Ent1, Ent2\\n\\ncontent"``: keywords and entities prepended to ``content``.

    Keeps the first 7 keywords, and the first 2 entities of each type (in the
    mapping's order) up to 5 in all, without type labels. Either part may be
    empty; with neither, ``content`` comes back unchanged.
    """
    if not isinstance(content, str):
        raise InvalidArgument(f"content must be a string, not {type(content).__name__}")
    kept_keywords = _strings(keywords, "keywords")[:MAX_KEYWORDS]
    if entities is not None and not isinstance(entities, Mapping):
        raise InvalidArgument(f"entities must map a type to a list of names, not {type(entities).__name__}")
    kept_entities: list[str] = []
    for kind, names in (entities or {}).items():
        kept_entities.extend(_strings(names, f"entities[{kind!r}]")[:MAX_ENTITIES_PER_TYPE])
    kept_entities = kept_entities[:MAX_ENTITIES]
    parts = [", ".join(group) for group in (kept_keywords, kept_entities) if group]
    if not parts:
        return content
    return f"{' | '.join(parts)}\n\n{content}"
