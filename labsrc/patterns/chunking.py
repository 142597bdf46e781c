"""Heading-aware markdown chunking.

A chunk never crosses a heading, so each one is about one section. Inside a
section the split is recursive and only goes as fine as it must: a section that
fits is one chunk; a long one is cut between paragraphs, then between lines
(lists), then between sentences, then between words, and only a single
over-long word is cut mid-word. Neighbouring pieces are packed back together
while they fit, so chunks are as large as ``max_chars`` allows.

Every chunk records where it came from, so results can be reassembled:

=============  ==================================================================
chunk_id       ``"{doc_id}#chunk-{index}"``
document_id    the document, named as :class:`~labsrc.records.policy.PolicyChunk` names it
doc_id         the same value, under the name the drop-in retriever and notebook 10 read
parent_id      the document the chunk belongs to (its parent for reassembly)
index          0-based position of the chunk in the document
section        0-based index of the heading section it lies in
range          ``(start, end)`` character offsets: ``text[start:end]`` is the chunk
heading        the heading path, e.g. ``"Returns > Laptops"`` (``""`` before any heading)
text           the chunk's text, without leading or trailing whitespace
=============  ==================================================================

Headings inside fenced code blocks (```` ``` ```` or ``~~~``) are not headings.
With ``headings=False`` (plain text) the whole text is one section with heading ``""``.
A blank text gives ``[]``; :func:`labsrc.patterns.documents.chunk_documents`, which
reads a team's pages, refuses a blank page by name instead.
"""

from __future__ import annotations

import re
from typing import Any

from labsrc.errors import InvalidArgument
from labsrc.ranking import check_top_k

__all__ = ["DEFAULT_MAX_CHARS", "chunk_markdown", "markdown_sections"]

DEFAULT_MAX_CHARS = 1000

_HEADING = re.compile(r"(#{1,6})[ \t]+(.*?)[ \t#]*$")
_FENCE = re.compile(r"(```|~~~)")

#: Separators from coarse to fine: paragraphs, lines, sentences, words.
_LEVELS = (
    re.compile(r"\n[ \t]*\n\s*"),
    re.compile(r"\n\s*"),
    re.compile(r"(?<=[.!?:;])\s+"),
    re.compile(r"\s+"),
)

Span = tuple[int, int]


def markdown_sections(text: str) -> list[tuple[Span, str]]:
    """``[((start, end), heading path), ...]``: the text cut at every markdown heading."""
    sections: list[tuple[Span, str]] = []
    path: list[tuple[int, str]] = []  # (level, title) of the open headings
    start, heading = 0, ""
    in_fence = False
    offset = 0
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if _FENCE.match(stripped):
            in_fence = not in_fence
        match = None if in_fence else _HEADING.fullmatch(stripped)
        if match and line[:1] == "#":
            if offset > start:
                sections.append(((start, offset), heading))
            level, title = len(match.group(1)), match.group(2).strip()
            path = [(lvl, t) for lvl, t in path if lvl < level] + [(level, title)]
            start, heading = offset, " > ".join(t for _, t in path)
        offset += len(line)
    if offset > start:
        sections.append(((start, offset), heading))
    return sections


def _trim(text: str, span: Span) -> Span | None:
    start, end = span
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if end > start else None


def _pieces(text: str, span: Span, separator: re.Pattern[str]) -> list[Span]:
    pieces, start = [], span[0]
    for match in separator.finditer(text, span[0], span[1]):
        pieces.append((start, match.start()))
        start = match.end()
    pieces.append((start, span[1]))
    return [p for p in (_trim(text, piece) for piece in pieces) if p]


def _split(text: str, span: Span, max_chars: int, level: int = 0) -> list[Span]:
    """Spans of at most ``max_chars`` covering every non-space character of ``span``."""
    trimmed = _trim(text, span)
    if trimmed is None:
        return []
    start, end = trimmed
    if end - start <= max_chars:
        return [trimmed]
    if level == len(_LEVELS):
        # A single word longer than max_chars: the only place a cut goes mid-word.
        return [(s, min(s + max_chars, end)) for s in range(start, end, max_chars)]
    pieces = _pieces(text, trimmed, _LEVELS[level])
    if len(pieces) == 1:
        return _split(text, trimmed, max_chars, level + 1)
    small: list[Span] = []
    for piece in pieces:
        small.extend(_split(text, piece, max_chars, level + 1))
    # Pack neighbours back together while the merged span still fits.
    packed: list[Span] = [small[0]]
    for piece in small[1:]:
        if piece[1] - packed[-1][0] <= max_chars:
            packed[-1] = (packed[-1][0], piece[1])
        else:
            packed.append(piece)
    return packed


def chunk_markdown(
    doc_id: str, text: str, max_chars: int = DEFAULT_MAX_CHARS, *, headings: bool = True
) -> list[dict[str, Any]]:
    """Split a markdown document into heading-aware chunks of at most ``max_chars`` characters.

    ``headings=False`` reads ``text`` as plain text: a line starting with ``#`` is not a heading.
    """
    if not isinstance(doc_id, str) or not doc_id.strip():
        raise InvalidArgument(f"doc_id must be a non-empty string, not {doc_id!r}")
    if not isinstance(text, str):
        raise InvalidArgument(f"text must be a string, not {type(text).__name__}")
    max_chars = check_top_k(max_chars, "max_chars")
    chunks: list[dict[str, Any]] = []
    sections = markdown_sections(text) if headings else [((0, len(text)), "")]
    for section, (span, heading) in enumerate(sections):
        for start, end in _split(text, span, max_chars):
            index = len(chunks)
            chunks.append(
                {
                    "chunk_id": f"{doc_id}#chunk-{index}",
                    "document_id": doc_id,
                    "doc_id": doc_id,
                    "parent_id": doc_id,
                    "index": index,
                    "section": section,
                    "range": (start, end),
                    "heading": heading,
                    "text": text[start:end],
                }
            )
    return chunks
