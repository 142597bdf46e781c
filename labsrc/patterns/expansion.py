"""Query expansion: a table of domain terms and the extra terms each one adds.

Support tickets say "money back" where the policy says "refund", and "broken"
where it says "damaged". A small, reviewed expansion table closes that
vocabulary gap for the lexical lane without a model. Expansion only *adds*
terms; the caller's words are kept, so it cannot make an exact-code query
(``RPL-14``) worse for BM25.

An expanded query is also a signal for fusion: see
:func:`labsrc.fusion.weighted.adaptive_fusion_params`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from labsrc.errors import InvalidArgument, InvalidRecord
from labsrc.lanes.analysis import lesson_analyzer
from labsrc.records.loading import load_json

__all__ = ["SUPPORT_POLICY_EXPANSIONS", "QueryExpander"]

#: The lab's default table: support-policy vocabulary (customer words → policy words).
SUPPORT_POLICY_EXPANSIONS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "broken": ("damaged", "defective"),
        "cracked": ("damaged",),
        "faulty": ("defective",),
        "money back": ("refund",),
        "reimbursement": ("refund",),
        "swap": ("replacement", "exchange"),
        "exchange": ("replacement",),
        "notebook": ("laptop",),
        "reconditioned": ("refurbished",),
        "lost": ("missing", "carrier"),
        "never arrived": ("missing", "carrier", "delivery"),
        "parcel": ("package", "shipment"),
        "cancel": ("cancellation",),
        "shoes": ("footwear",),
        "sneakers": ("footwear",),
        "rma": ("return", "authorization"),
        "gdpr": ("personal", "data", "erasure"),
        "chargeback": ("dispute", "payment"),
    }
)


class QueryExpander:
    """Expand queries from a ``{term: [extra terms]}`` table.

    Terms may be phrases ("money back"): a phrase fires when its analysed tokens
    occur consecutively in the analysed query. Added terms that the query
    already contains are not added twice.

    Parameters
    ----------
    table:
        Term → extra terms. Copied; later changes to the caller's dict have no effect.
    analyzer:
        How the query and the table's terms are tokenised (the lesson analyzer by default).
    """

    def __init__(
        self,
        table: Mapping[str, Sequence[str]] = SUPPORT_POLICY_EXPANSIONS,
        *,
        analyzer: Callable[[str], list[str]] = lesson_analyzer,
    ) -> None:
        if not isinstance(table, Mapping):
            raise InvalidArgument(f"the expansion table must be a mapping of term -> list of terms, not {type(table).__name__}")
        self.analyzer = analyzer
        entries: dict[str, tuple[str, ...]] = {}
        keys: list[tuple[tuple[str, ...], str]] = []
        for term, extra in table.items():
            if not isinstance(term, str) or not analyzer(term):
                raise InvalidArgument(f"expansion term {term!r} has no tokens after analysis")
            if isinstance(extra, str) or not isinstance(extra, Sequence) or not all(
                isinstance(e, str) and e.strip() for e in extra
            ):
                raise InvalidArgument(f"expansions of {term!r} must be a list of non-empty strings, not {extra!r}")
            entries[term] = tuple(extra)
            keys.append((tuple(analyzer(term)), term))
        self.table: Mapping[str, tuple[str, ...]] = MappingProxyType(entries)
        self._keys = tuple(keys)

    @classmethod
    def from_json(cls, path: str | Path, *, analyzer: Callable[[str], list[str]] = lesson_analyzer) -> QueryExpander:
        """Load a table from a JSON object ``{"term": ["extra", ...], ...}``."""
        data = load_json(path)
        if not isinstance(data, dict):
            raise InvalidRecord(f"expected a JSON object of term -> list of terms, got {type(data).__name__}", path=path)
        for term, extra in data.items():
            if not isinstance(extra, list) or not all(isinstance(e, str) and e.strip() for e in extra):
                raise InvalidRecord("must be a list of non-empty strings", path=path, field=term)
        try:
            return cls(data, analyzer=analyzer)
        except InvalidArgument as exc:
            raise InvalidRecord(str(exc), path=path) from exc

    def fired(self, query: str) -> tuple[str, ...]:
        """The table terms found in ``query``, in the order they first occur there (ties: table order)."""
        tokens = self.analyzer(query)
        found: list[tuple[int, int, str]] = []
        for order, (key_tokens, term) in enumerate(self._keys):
            width = len(key_tokens)
            for start in range(len(tokens) - width + 1):
                if tuple(tokens[start : start + width]) == key_tokens:
                    found.append((start, order, term))
                    break
        return tuple(term for _, _, term in sorted(found))

    def expand(self, query: str) -> tuple[str, tuple[str, ...]]:
        """``(expanded text, terms that fired)``; an unmatched query comes back unchanged with ``()``."""
        if not isinstance(query, str):
            raise InvalidArgument(f"query must be a string, not {type(query).__name__}")
        fired = self.fired(query)
        if not fired:
            return query, ()
        present = set(self.analyzer(query))
        added: list[str] = []
        for term in fired:
            for extra in self.table[term]:
                extra_tokens = self.analyzer(extra)
                if extra_tokens and not set(extra_tokens) <= present:
                    added.append(extra)
                    present.update(extra_tokens)
        return (f"{query} {' '.join(added)}" if added else query), fired

    def __len__(self) -> int:
        return len(self.table)

    def __repr__(self) -> str:
        return f"QueryExpander({len(self.table)} terms)"
