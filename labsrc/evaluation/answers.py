"""What a ``search`` answered, read: awaited when async, then checked against the shapes the gate accepts.

Teams gate the retriever they run, so the gate reads the shapes vector stores and frameworks
already return (dicts, LangChain ``Document`` objects, Qdrant points, LlamaIndex nodes, by duck
typing: none of them is imported) and awaits an ``async def search``, instead of asking for an
adapter that could itself be wrong. Reading is strict, because the gate compares answers exactly:
a chunk id is a ``str``, a score a finite real, ids are unique, at most ``top_k`` of them.

A shape the gate cannot read raises :class:`ShapeError` (the retriever's contract is broken, the
same on every search); a bad value in one answer raises a plain ``TypeError``. The rules, for
readers, are in ``docs/gating.md#what-search-may-return``.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import math
import numbers
import os
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence, Sized
from typing import Any

from labsrc.evaluation.plain import PlainValue, payload_fields, plain_id, plain_score
from labsrc.records.policy import PolicyChunk

__all__ = [
    "ACCEPTED_SHAPES",
    "CONTRACT_DOCS",
    "ID_KEYS",
    "SCORE_KEYS",
    "ShapeError",
    "Payload",
    "call_search",
    "read_answer",
    "read_pairs",
]


# --- awaiting an async search -------------------------------------------------------------------
#
# One event loop per process, in a daemon thread, made on first use. One loop, not asyncio.run per call:
# a retriever keeps state bound to the loop it first ran on (an asyncio.Lock, a client opened inside its
# first search), and the gate calls it again and again, from 16 threads at once in the concurrency probe.
# A thread of its own, not the caller's: observe() may itself be called inside a running loop (a notebook),
# where run_until_complete is refused, and a thread blocking on .result() is fine. Workers are forked, and a
# fork keeps no threads: the child makes its own loop (register_at_fork, and the pid checked besides).

_loop_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_loop_thread: threading.Thread | None = None
_loop_pid = 0
#: Loops a fork inherited without their thread: kept referenced so they are never closed or collected in the
#: child (their file descriptors are the parent's too, and collecting a loop that thinks it runs warns).
_inherited_loops: list[asyncio.AbstractEventLoop] = []


def _forget_loop_after_fork() -> None:
    global _loop_lock, _loop, _loop_thread
    _loop_lock = threading.Lock()  # another thread may have held it at the fork: the child's copy stays held
    if _loop is not None:
        _inherited_loops.append(_loop)
    _loop, _loop_thread = None, None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_loop_after_fork)


def _await_loop() -> asyncio.AbstractEventLoop:
    """This process's loop for awaiting searches, running in its daemon thread (made here on first use)."""
    global _loop, _loop_thread, _loop_pid
    with _loop_lock:
        alive = _loop_thread is not None and _loop_thread.is_alive()
        if _loop is None or _loop_pid != os.getpid() or not alive or _loop.is_closed():
            if _loop is not None:
                _inherited_loops.append(_loop)
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="labsrc-await-search", daemon=True)
            thread.start()
            _loop, _loop_thread, _loop_pid = loop, thread, os.getpid()
        return _loop


async def _settle(awaitable: Awaitable[Any]) -> tuple[bool, Any]:
    """``(True, value)`` or ``(False, exception)``: nothing escapes into the loop.

    A task that raises ``SystemExit`` or ``KeyboardInterrupt`` stops its loop before the waiting thread is
    told, and that thread would wait forever; returned as a value, it is re-raised in the caller's thread.
    """
    try:
        return True, await awaitable
    except BaseException as exc:  # re-raised by _awaited in the thread that called observe
        return False, exc


def _awaited(awaitable: Awaitable[Any]) -> Any:
    """``await awaitable`` on the process's loop, from any thread; its exception is raised here."""
    ok, value = asyncio.run_coroutine_threadsafe(_settle(awaitable), _await_loop()).result()
    if not ok:
        raise value
    return value


# --- reading an answer ----------------------------------------------------------------------------

#: Where every contract message sends its reader (a heading of docs/gating.md).
CONTRACT_DOCS = "docs/gating.md#what-search-may-return"
#: The adapter for Documents in rank order without scores (an ensemble's): a score from each one's rank.
RANK_SCORES_DOCS = "docs/gating.md#documents-in-rank-order-without-scores"
#: What every contract message says the gate reads.
ACCEPTED_SHAPES = (
    "the gate reads a RetrievalResult, or a list, best first, of (chunk_id, score) pairs, dicts with 'chunk_id' "
    "or 'id' and 'score', objects with .id and .score, or LangChain Documents (metadata['score'], or (Document, "
    "score) pairs)"
)
#: Keys read as the chunk id, first present wins: of a dict result, or of an object's ``.metadata``/``.payload``.
ID_KEYS = ("chunk_id", "id", "doc_id")
#: Keys read as the score, first present wins. Not ``distance``: lower is better, and the gate reads best first.
SCORE_KEYS = ("score", "similarity", "relevance_score")
#: Where an object's chunk id is looked for, in order: by name, and for each name its record (``.payload``,
#: ``.metadata``) before its own attribute, so a store's own key (a UUID in ``Document.id``) never hides the
#: chunk id kept beside it; LlamaIndex's ``.node_id`` before a ``doc_id`` that usually names the parent document.
_ID_PLACES = (("record", "chunk_id"), ("attribute", "chunk_id"), ("record", "id"), ("attribute", "id"),
              ("attribute", "node_id"), ("record", "doc_id"))
_MISSING: Any = object()


class ShapeError(TypeError):
    """The answer has a shape the gate cannot read: the contract is broken, not one answer's values."""

    def __init__(self, returned: str, problem: str) -> None:
        super().__init__(f"search returned {returned}: {problem}; {ACCEPTED_SHAPES} ({CONTRACT_DOCS})")


def _attribute(obj: object, name: str) -> Any:
    """``obj.name`` when it is a value (not None, not a method), else missing."""
    value = getattr(obj, name, None)
    return _MISSING if value is None or callable(value) else value


def _first_key(record: Mapping[Any, Any], keys: Sequence[str]) -> tuple[str, Any]:
    """The first of ``keys`` present (and not None) in ``record``, and its value; ``("", missing)`` if none."""
    for key in keys:
        value = record.get(key)
        if value is not None:
            return key, value
    return "", _MISSING


def _key(record: Mapping[Any, Any], keys: Sequence[str]) -> Any:
    """The value of the first of ``keys`` present (and not None) in ``record``, else missing."""
    return _first_key(record, keys)[1]


def _records(obj: object) -> list[Mapping[Any, Any]]:
    """An object's own records: a Qdrant point's ``.payload``, a Document's or a node's ``.metadata``."""
    return [r for r in (getattr(obj, "payload", None), getattr(obj, "metadata", None)) if isinstance(r, Mapping)]


def _object_id(obj: object) -> Any:
    records = _records(obj)
    for place, name in _ID_PLACES:
        value = _key_in(records, name) if place == "record" else _attribute(obj, name)
        if value is not _MISSING:
            return value
    return _MISSING


def _key_in(records: Sequence[Mapping[Any, Any]], key: str) -> Any:
    for record in records:
        value = _key(record, (key,))
        if value is not _MISSING:
            return value
    return _MISSING


def _object_score(obj: object) -> tuple[Any, str]:
    """The object's score and the field it was read from (``score``, ``metadata.score``, ...)."""
    score = _attribute(obj, "score")
    if score is not _MISSING:
        return score, "score"
    for place in ("payload", "metadata"):
        record = getattr(obj, place, None)
        if isinstance(record, Mapping):
            key, value = _first_key(record, SCORE_KEYS)
            if key:
                return value, f"{place}.{key}"
    return _MISSING, ""


def _is_scalar(value: object) -> bool:
    return value is None or isinstance(value, (str, bytes, numbers.Number))


def _kind(item: object) -> str:
    """How a message names one result: ``dict with keys ['rank', 'text']``, ``tuple``, ``Document``."""
    if isinstance(item, Mapping):
        keys = sorted(str(k) for k in itertools.islice(item, 9))
        shown = repr(keys[:8])[:-1] + (", ...]" if len(keys) > 8 else "]")
        return f"{type(item).__name__} with keys {shown}"
    return type(item).__name__


_NO_ID = "has no chunk id (metadata or payload 'chunk_id', 'id' or 'doc_id'; or .chunk_id, .id, .node_id)"


#: ``(chunk_id, score, payload source, payload fields to skip)`` as one result holds them, unchecked.
_Read = tuple[Any, Any, object, tuple[str, ...]]


def _read_item(item: object, rank: int, returned: str) -> _Read:
    """One result's id and score, unchecked, and what its payload is read from; a result of no known shape is refused.

    The payload source is the whole result (a dict, a ``Document``, a point, a node), or the
    holder of a ``(holder, score)`` pair; a ``(chunk_id, score)`` pair has none. The field the
    score was read from is skipped: scores are compared as scores.
    """
    if isinstance(item, Mapping):
        score_key, score = _first_key(item, SCORE_KEYS)
        chunk_id = _key(item, ID_KEYS)
        if chunk_id is _MISSING:
            raise ShapeError(returned, f"result {rank} has no id key ({', '.join(map(repr, ID_KEYS))})")
        if not score_key:
            hint = "; a distance is not read (lower is better): return a score" if "distance" in item else ""
            keys = ", ".join(map(repr, SCORE_KEYS))
            raise ShapeError(returned, f"result {rank} ({chunk_id!r}) has no score ({keys}: missing or None){hint}")
        return chunk_id, score, item, (score_key,)
    if isinstance(item, (str, bytes)):
        problem = f"result {rank} is {_short(item)}: an id alone has no score, return (chunk_id, score)"
        raise ShapeError(returned, problem)
    if isinstance(item, Sequence):
        if len(item) != 2:
            raise ShapeError(returned, f"result {rank} is {_short(item)}, not a (chunk_id, score) pair")
        holder, score = item
        if isinstance(holder, PolicyChunk):
            return holder.chunk_id, score, holder, ()
        if _is_scalar(holder) or isinstance(holder, Sequence):
            return holder, score, None, ()  # a str is the id; anything else is refused by _checked, naming its type
        chunk_id = _key(holder, ID_KEYS) if isinstance(holder, Mapping) else _object_id(holder)
        if chunk_id is _MISSING:
            kind = _kind(holder)
            raise ShapeError(returned, f"result {rank} is a ({kind}, score) pair whose {kind} {_NO_ID}")
        return chunk_id, score, holder, ()
    if _is_scalar(item):
        raise ShapeError(returned, f"result {rank} is {_short(item)} ({type(item).__name__}), not a result")
    chunk_id = _object_id(item)
    if chunk_id is _MISSING:
        raise ShapeError(returned, f"result {rank} is a {type(item).__name__} that {_NO_ID}")
    score, score_field = _object_score(item)
    if score is _MISSING:
        hint = (": a vector store's similarity_search_with_relevance_scores returns (Document, score) pairs; "
                "a retriever that returns Documents in rank order without scores (LangChain's EnsembleRetriever, "
                f"any retriever's invoke) needs a score from its rank, in five lines: {RANK_SCORES_DOCS}"
                if hasattr(item, "page_content") else "")
        raise ShapeError(returned, f"result {rank} ({chunk_id!r}) has no score (.score, or metadata or payload "
                                    f"{', '.join(map(repr, SCORE_KEYS))}){hint}")
    return chunk_id, score, item, (score_field,)


def _checked(item: object, chunk_id: Any, score: Any, rank: int, returned: str) -> tuple[str, float]:
    """One result's id and score, strictly and as plain data: an exact str id, a finite float score (not a bool).

    A ``str`` subclass is copied to a plain ``str`` here, so none of its methods (``__eq__``,
    ``__hash__``) runs anywhere after this line.
    """
    if not isinstance(chunk_id, str):
        hint = ("; a store's own key is not a chunk id: keep chunk_id in the payload or metadata"
                if _records(item) else "")
        raise ShapeError(returned, f"result {rank} has chunk_id {_short(chunk_id)} ({type(chunk_id).__name__}); "
                                    f"expected a str, the chunk_id of a chunk the factory was handed{hint}")
    chunk_id = plain_id(chunk_id, f"result {rank}'s chunk_id")
    if isinstance(score, bool) or not isinstance(score, numbers.Real):
        raise ShapeError(returned, f"result {rank} ({chunk_id!r}) has score {_short(score)} "
                                    f"({type(score).__name__}); expected a finite number")
    value = plain_score(score, f"result {rank}'s score")
    if not math.isfinite(value):  # a real number of the wrong value: this answer's bug, not the contract
        raise TypeError(f"result {rank} ({chunk_id!r}) has score {_short(value)}; expected a finite number")
    return chunk_id, value


def _refuse_container(out: Any) -> None:
    """Refuse an answer that is not a list of results at all, naming what it is."""
    name = type(out).__name__
    if out is None:
        raise ShapeError("None", "a search that returns nothing (a missing return?) is not a list of results")
    if isinstance(out, (str, bytes)):
        raise ShapeError(name, "a string is not a list of results")
    if isinstance(out, Mapping):
        raise ShapeError(_kind(out), "a dict is not a list of results (of an id -> score dict: its items, best first)")
    if isinstance(out, (set, frozenset)):
        raise ShapeError(name, "a set has no order; return a list, best first")
    if hasattr(out, "__aiter__"):
        raise ShapeError(name, "an async iterator is not read; collect it into a list")
    if not isinstance(out, Sequence) and _object_id(out) is not _MISSING:
        raise ShapeError(f"one {name}", "return a list of them, best first")
    if hasattr(type(out), "model_fields"):  # a pydantic response (Qdrant's QueryResponse) iterates its fields
        raise ShapeError(name, "a response model is not a list of results; return the list of results it holds")
    if not hasattr(out, "__iter__"):
        raise ShapeError(name, "not a list of results")


#: One result's payload: every field it carries but its id and score, flattened (:func:`~labsrc.evaluation.plain.payload_fields`).
Payload = tuple[tuple[str, PlainValue], ...]


def read_answer(out: Any, top_k: int, *, payload: bool = True) -> tuple[tuple[tuple[str, float], ...],
                                                                       tuple[Payload, ...]]:
    """Read a fused-list answer: ``(pairs, payloads)``, each payload aligned with its pair.

    Any accepted shape, unique ids, finite scores, at most top_k. Linear and bounded: at most
    ``top_k + 1`` items are read, so an endless iterator or a million results cost no more than a
    legal answer, and repeated ids are found with a set of plain ``str``. A shape the gate cannot
    read raises :class:`ShapeError`; a bad value (a non-finite score, a repeated id, too many, a
    field that is not plain data) a plain ``TypeError``. ``payload=False`` leaves the payloads empty.
    """
    _refuse_container(out)
    pairs: list[tuple[str, float]] = []
    payloads: list[Payload] = []
    seen: set[str] = set()
    for rank, item in enumerate(itertools.islice(out, top_k + 1), start=1):
        if rank > top_k:
            size = f"{len(out)} results" if isinstance(out, Sized) else "more results"
            raise TypeError(f"search returned {size} for top_k={top_k}")
        returned = f"a {type(out).__name__} of {_kind(item)}"
        raw_id, raw_score, source, skip = _read_item(item, rank, returned)
        chunk_id, score = _checked(item, raw_id, raw_score, rank, returned)
        if chunk_id in seen:
            raise TypeError(f"search returned the same chunk more than once: {chunk_id!r} again at rank {rank}")
        seen.add(chunk_id)
        pairs.append((chunk_id, score))
        if payload:
            payloads.append(() if source is None else payload_fields(source, rank, skip=skip))
    return tuple(pairs), tuple(payloads)


def read_pairs(out: Any, top_k: int) -> tuple[tuple[str, float], ...]:
    """The ``(chunk_id, score)`` pairs of :func:`read_answer`."""
    return read_answer(out, top_k)[0]


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def call_search(search: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``search(*args, **kwargs)``, awaited when it returns an awaitable (an ``async def search``)."""
    out = search(*args, **kwargs)
    if not inspect.isawaitable(out):
        return out
    out = _awaited(out)
    if inspect.isawaitable(out):
        close = getattr(out, "close", None)
        if callable(close) and inspect.iscoroutine(out):
            close()  # never awaited, and never warned about: the message below says what happened
        problem = "the awaited answer is itself awaitable; await it in search"
        raise ShapeError(f"an awaitable of {type(out).__name__}", problem)
    return out
