"""Front matter: the flat ``key: value`` block at the top of a markdown page, read without YAML.

A page may open with a block between two ``---`` lines::

    ---
    region: emea                 # a comment after a value needs a space before '#'
    acl_tag: "it:staff"
    effective_from: 2026-01-01
    effective_to: null
    ---
    # The page's first heading

Only what a record needs is read, so only flat lines are: ``key: value``, a
blank line, or a ``#`` comment line. A value may be quoted (``"..."`` with
JSON's backslash escapes, or ``'...'`` with ``''`` for a quote); unquoted,
``null``, ``~`` and nothing at all are ``None``. Anything else (an indented
line, a list item, a flow list ``[a, b]``, a block scalar ``|``, a key given
twice, a block never closed) is an :class:`~labsrc.errors.InvalidRecord` naming
the file, the 1-based line and the value, never read some other way. Runtime
dependencies stay numpy, pandas and matplotlib: no PyYAML.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from labsrc.errors import InvalidRecord

__all__ = ["FrontMatter", "parse_front_matter"]

_FENCE = "---"
_KEY_VALUE = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)[ \t]*:(?:[ \t]+(?P<value>.*)|[ \t]*)")
_DOUBLE = re.compile(r'"(?P<inner>(?:[^"\\]|\\.)*)"[ \t]*(?:#.*)?')
_SINGLE = re.compile(r"'(?P<inner>(?:[^']|'')*)'[ \t]*(?:#.*)?")
_COMMENT = re.compile(r"(?:^|[ \t])#")
_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
#: YAML syntax that would mean a list, a mapping, a block of lines or a reference, not a flat value.
_NOT_FLAT = ("[", "{", "|", ">", "&", "*", "!", "%", "@", "`")


@dataclass(frozen=True)
class FrontMatter:
    """A page split into its front matter and its body.

    ``fields`` maps each key to ``(value, line)``: the value as written
    (unquoted; ``None`` for ``null``, ``~`` or nothing) and its 1-based line in
    the file. ``body`` is the text after the closing ``---`` (the whole page
    when there is no front matter) and ``body_line`` the line it starts on.
    """

    fields: Mapping[str, tuple[str | None, int]]
    body: str
    body_line: int


def _value(raw: str, *, path: str | Path, line: int, key: str) -> str | None:
    """The value of one ``key: raw`` line: unquoted, its comment dropped, ``None`` for a null."""
    def error(message: str) -> InvalidRecord:
        return InvalidRecord(f"{message}, got {raw!r}", path=path, line=line, field=key)

    if raw.startswith('"'):
        match = _DOUBLE.fullmatch(raw)
        if match is None:
            raise error('a double-quoted value must end with its closing " (then only a # comment)')
        try:
            return json.loads(f'"{match.group("inner")}"')
        except json.JSONDecodeError:
            raise error('a double-quoted value takes JSON\'s escapes only (\\", \\\\, \\n, \\uXXXX)') from None
    if raw.startswith("'"):
        match = _SINGLE.fullmatch(raw)
        if match is None:
            raise error("a single-quoted value must end with its closing ' (then only a # comment)")
        return match.group("inner").replace("''", "'")
    comment = _COMMENT.search(raw)
    value = (raw[: comment.start()] if comment else raw).strip()
    if value.startswith(_NOT_FLAT):
        raise error(
            f"front matter holds flat values only, and {value[0]!r} would start a YAML list, mapping or block; "
            "quote the value if it is text"
        )
    return None if value in _NULLS else value


def parse_front_matter(text: str, *, path: str | Path) -> FrontMatter:
    """Split ``text`` (a whole page) into its front matter and body; errors name ``path``, the line and the value."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip() != _FENCE:
        return FrontMatter(MappingProxyType({}), text, 1)
    closing = next((number for number, line in enumerate(lines[1:], start=2) if line.rstrip() == _FENCE), None)
    if closing is None:  # said first: every line of the page would otherwise be blamed as front matter
        raise InvalidRecord(
            "the front matter opened with '---' on line 1 is never closed; end it with a '---' line "
            "(or, if the page starts with a horizontal rule, put a blank line above it)",
            path=path,
            line=1,
        )
    fields: dict[str, tuple[str | None, int]] = {}
    for number, raw_line in enumerate(lines[1 : closing - 1], start=2):
        line = raw_line.rstrip("\r\n")
        if not line.strip() or line.lstrip().startswith("#"):
            continue  # a blank line or a comment line
        match = None if line[:1].isspace() else _KEY_VALUE.fullmatch(line.rstrip())
        if match is None:
            raise InvalidRecord(
                f"front matter lines must be flat 'key: value' lines (no indentation, lists or nesting), got {line!r}",
                path=path,
                line=number,
            )
        key = match.group("key")
        if key in fields:
            raise InvalidRecord(
                f"given twice (first on line {fields[key][1]}), got {line!r}", path=path, line=number, field=key
            )
        fields[key] = (_value(match.group("value") or "", path=path, line=number, key=key), number)
    return FrontMatter(MappingProxyType(fields), "".join(lines[closing:]), closing + 1)
