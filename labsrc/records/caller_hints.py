"""Hints for an unknown caller id: the known caller it misses by letter case, whitespace or one character.

``"Luna-48291"`` looks right to a learner and is unknown to every lookup (caller
ids are case-sensitive, as chunk ids are). The shared message lists the known
callers and leaves the learner to spot the difference; :func:`caller_hint` names
the one they meant and says what differs.
"""

from __future__ import annotations

from collections.abc import Collection

from labsrc.errors import InvalidArgument

__all__ = ["caller_hint", "within_one_edit"]


def within_one_edit(a: str, b: str) -> bool:
    """True when ``a`` becomes ``b`` by at most one edit: insert, delete or replace one character.

    The bounded case of the Levenshtein distance (Levenshtein 1966), in one pass:
    with the lengths equal, at most one position may differ; with them one apart,
    the longer one minus one character must be the shorter.
    """
    if len(a) > len(b):
        a, b = b, a
    if len(b) - len(a) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b)) <= 1
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return a[i:] == b[i + 1:]
    return True  # b is a plus one character at the end


def _compact(text: str) -> str:
    """``text`` without any whitespace: around it or inside it (``"luna- 48291 "`` → ``"luna-48291"``)."""
    return "".join(text.split())


def caller_hint(caller: str, known: Collection[str]) -> str | None:
    """``"did you mean 'luna-48291'? (...)"`` for an unknown ``caller`` that is a known caller but for letter
    case, whitespace or one character; None when it is known already or no known caller is that close.

    A known caller is meant when, both case-folded and stripped of every whitespace, the two are at most one
    edit apart (:func:`within_one_edit`). The parenthesis says what differs, and that only it does, when the
    typo is not one of them.
    """
    if not isinstance(caller, str):
        raise InvalidArgument(f"caller_hint: caller must be a string, got {type(caller).__name__} {caller!r}")
    if caller in known:
        return None
    folded = _compact(caller).casefold()
    meant = sorted(k for k in known if isinstance(k, str) and within_one_edit(folded, _compact(k).casefold()))
    if not meant:
        return None
    typo = any(_compact(k).casefold() != folded for k in meant)
    # The letter case differs when it matters: the ids are further apart as written than case-folded.
    case = any(_compact(caller) != _compact(k) and (_compact(caller).casefold() == _compact(k).casefold()
                                                    or not within_one_edit(_compact(caller), _compact(k)))
               for k in meant)
    spaced = _compact(caller) != caller
    parts = [p for p, on in (("the letter case", case), ("whitespace", spaced), ("one character", typo)) if on]
    what = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    verb = "differs" if len(parts) == 1 else "differ"
    note = f"{what} {verb}" if typo else f"only {what} {verb}"
    if case:
        note += ": caller ids are case-sensitive"
    return f"did you mean {' or '.join(repr(k) for k in meant)}? ({note})"
