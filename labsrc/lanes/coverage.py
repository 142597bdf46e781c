"""Which case queries a stored dense source has no vector for, and the one sentence that says what to run.

Stored vectors (``labsrc embed`` output, fixture tables) know the queries they
were made with and nothing else. A case whose query has no vector gets an empty
dense lane (fixture tables, vector folders) or an error (stored MiniLM without
the ``embed`` extra) -- either way the learner must embed their own queries.
The rubric, ``labsrc gate``, ``labsrc search`` and the exercise checks all say
it with :func:`no_vector_hint`, so the advice reads the same everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from labsrc.records.cases import Case

__all__ = ["EMBED_COMMAND", "missing_query_vectors", "missing_vectors_note", "no_vector_hint", "query_lookup"]

#: The command that embeds a learner's chunks and case queries (needs the ``embed`` extra).
EMBED_COMMAND = "labsrc embed --chunks {chunks} --queries {cases} --out {out}"


def query_lookup(source: Any) -> Callable[[str], bool] | None:
    """``text -> has a stored vector`` for a stored source; None for an encoder, which embeds any text."""
    if hasattr(source, "has_query"):  # StoredEmbeddings
        return source.has_query
    if hasattr(source, "query_id_for"):  # VectorDirectory
        return lambda text: source.query_id_for(text) is not None
    queries = getattr(source, "queries", None)
    if isinstance(queries, dict) or hasattr(queries, "keys"):  # FixtureVectors
        return lambda text: text in queries
    return None


def missing_query_vectors(source: Any, cases: Sequence[Case]) -> list[str] | None:
    """Names of the cases whose (non-blank) query has no stored vector, in case order.

    None when ``source`` embeds any text (an encoder): then nothing can be missing.
    """
    lookup = query_lookup(source)
    if lookup is None:
        return None
    return [c.name for c in cases if c.query.strip() and not lookup(c.query)]


def no_vector_hint(
    count: int,
    *,
    chunks_path: str = "fixtures/policies/chunks.jsonl",
    cases_path: str = "my-submission/cases.jsonl",
    out: str = "my-submission/vectors/all-MiniLM-L6-v2",
    command: str | None = None,
) -> str:
    """``"3 of your case queries have no vector: run `labsrc embed ...`"``.

    ``command`` replaces the whole command (a submission's own, which may remove a link first).
    """
    command = command or EMBED_COMMAND.format(chunks=chunks_path, cases=cases_path, out=out)
    verb = "has" if count == 1 else "have"
    return (
        f"{count} of your case queries {verb} no vector: run `{command}` (the 'embed' extra) "
        "and use that folder as your vectors"
    )


def missing_vectors_note(
    source: Any,
    cases: Sequence[Case],
    *,
    chunks_path: str | None = None,
    cases_path: str | None = None,
    vectors_path: str | None = None,
    limit: int = 8,
) -> str | None:
    """The :func:`no_vector_hint` for the cases whose queries ``source`` has no vector for, naming a few; None if none."""
    lacking = missing_query_vectors(source, cases) or []
    if not lacking:
        return None
    hint = no_vector_hint(
        len(lacking),
        chunks_path=str(chunks_path or "CHUNKS.jsonl"),
        cases_path=str(cases_path or "CASES.jsonl"),
        out=str(vectors_path or "vectors/all-MiniLM-L6-v2"),
    )
    more = f" and {len(lacking) - limit} more" if len(lacking) > limit else ""
    return f"{hint}; their dense lane is empty until then: {', '.join(lacking[:limit])}{more}"
