"""The plug-in contract: any retriever, built by a factory, observed the same way.

A retriever the lab did not build enters the gate as a **factory**::

    def factory(chunks: tuple[PolicyChunk, ...], vectors: DenseSource | None) -> Subject

It is called with *every* stored chunk (hidden ones included: the retriever's own
boundary must keep them out) and the dense source (``None`` when the run has no
vectors). The object it returns needs one method,
``search(query, caller, on_date, top_k)``, returning either

* a :class:`~labsrc.retriever.policy.RetrievalResult` (lanes and trace; the lab's
  retrievers, :class:`~labsrc.retriever.PolicyRetriever` and
  :class:`~labsrc.engines.postgres.PostgresRetriever`, are factories as they are), or
* a sequence, best first, of ``(chunk_id, score)`` pairs, or of the shapes vector
  stores and frameworks return (dicts with an id and a score, LangChain
  ``Document`` objects, ``(Document, score)`` pairs, objects with ``.id`` and
  ``.score`` such as Qdrant's ``ScoredPoint`` or LlamaIndex's ``NodeWithScore``):
  the fused list only. Teams gate the retriever they run, so the gate reads what
  it returns instead of asking for an adapter (:mod:`~labsrc.evaluation.answers`
  reads it; the rules for readers are in ``docs/gating.md#what-search-may-return``).

``search`` may be ``async def`` (or return any awaitable): the answer is awaited on
one event loop per process, so an async retriever is judged as it runs.

:func:`observe` turns either into an :class:`Observation`; a ``search`` that
raises (whatever it raises, the lab's own errors included) becomes an observation
with ``error`` set, so one bad case does not stop the run. An answer whose *shape* the gate cannot read sets ``contract`` too: that
is the retriever's contract broken, the same for every search, not one bad answer.
:func:`build_subject` calls a factory and turns anything it raises into a
:class:`SubjectError` naming the user's own file and line.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import math
import sys
import sysconfig
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from functools import partial
from types import FunctionType, MappingProxyType
from typing import Any, Protocol, runtime_checkable

from labsrc.errors import LabError
from labsrc.evaluation.answers import Payload, ShapeError, call_search, read_answer
from labsrc.evaluation.plain import PlainValue, payload_fields, plain_id, plain_score, plain_str, plain_timings, plain_trace
from labsrc.lanes.dense import DenseSource
from labsrc.records.policy import Caller, PolicyChunk
from labsrc.retriever.policy import RetrievalResult

__all__ = [
    "Factory",
    "Observation",
    "Request",
    "Subject",
    "SubjectError",
    "BuildError",
    "build_subject",
    "close_subject",
    "describe_exception",
    "factory_name",
    "name_factory",
    "observe",
    "observe_request",
    "settle_contract",
    "subject_name",
    "subject_versions",
]

#: The lanes an observation can hold: the fused list (``hybrid``) always, the other two when reported.
OBSERVED_LANES = ("bm25", "dense", "hybrid")


@runtime_checkable
class Subject(Protocol):
    """What a factory returns: anything with ``search(query, caller, on_date, top_k)``."""

    def search(self, query: str, caller: Caller, on_date: dt.date, top_k: int) -> Any: ...


#: ``factory(chunks, vectors) -> Subject``: every stored chunk and the dense source (or None).
Factory = Callable[[tuple[PolicyChunk, ...], "DenseSource | None"], Subject]


class SubjectError(LabError):
    """A factory could not be imported or built, or built something that cannot search."""


class BuildError(SubjectError):
    """The factory ran and its build failed: it raised, did not return in time, or its worker ended.

    What the retriever did, not what the gate was given: the gate judges it (a failing ``build errors``
    gate, exit 1), where a factory it cannot even import (:class:`SubjectError`) is its input's fault (exit 2).
    """


_LAB_DIR = str(Path(__file__).resolve().parents[1])
_LIBRARY_DIRS = tuple(
    str(Path(p).resolve()) for p in {sysconfig.get_path("stdlib"), sysconfig.get_path("purelib"), sysconfig.get_path("platlib")} if p
)


def _frame_rank(filename: str) -> int:
    """2 for the user's own code, 1 for a library's, 0 for the lab's (where to point an error)."""
    path = str(Path(filename).resolve()) if filename and not filename.startswith("<") else filename
    if path.startswith(_LAB_DIR):
        return 0
    if any(path.startswith(d) for d in _LIBRARY_DIRS) or "site-packages" in path:
        return 1
    return 2


def describe_exception(exc: BaseException) -> str:
    """``"ValueError: boom (my_retriever.py:12)"``: the error and where in the user's code it arose.

    The location is the deepest frame in the user's own files; failing that, the
    deepest outside the lab. A ``SyntaxError`` names its own file and line.
    """
    message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{type(exc).__name__}: {exc.msg} ({exc.filename}:{exc.lineno})"
    frames = traceback.extract_tb(exc.__traceback__)
    best = None
    for frame in frames:
        rank = _frame_rank(frame.filename)
        if rank and (best is None or rank >= best[0]):
            best = (rank, frame)
    if best is None:
        return message
    return f"{message} ({best[1].filename}:{best[1].lineno})"


def factory_name(factory: object) -> str:
    """``module:qualname`` of a factory, for messages and reports."""
    module = getattr(factory, "__module__", None) or type(factory).__module__
    loaded = sys.modules.get(module)
    if module.startswith("labsrc_plugin_") and getattr(loaded, "__file__", None):  # imported from a path
        module = Path(loaded.__file__).name  # type: ignore[union-attr,arg-type]
    name = getattr(factory, "__qualname__", None) or getattr(factory, "__name__", None)
    if name is None:  # functools.partial, a callable instance
        inner = getattr(factory, "func", None)
        return factory_name(inner) if inner is not None else f"{module}:{type(factory).__qualname__}"
    return f"{module}:{name}"


#: The attribute :func:`name_factory` sets and :func:`subject_name` reads.
_DISPLAY_NAME = "labsrc_display_name"


def name_factory(factory: Factory, name: str) -> Factory:
    """``factory``, named as its errors should name it (e.g. ``"the postgres engine"``).

    For the lab's own engines, chosen by ``--engine``, and the audit's subjects: the
    user typed an engine's or a subject's name, so errors name that, not a class
    inside the lab. A user's ``--retriever module:factory`` is left unnamed and keeps
    its ``module:qualname``. An object made for this run (a ``functools.partial``,
    a factory instance) is named in place and returned; a class or a function is
    shared by every caller, so it is wrapped in a ``partial`` that carries the name.
    """
    if isinstance(factory, (type, FunctionType)):
        factory = partial(factory)
    setattr(factory, _DISPLAY_NAME, name)
    return factory


def subject_name(factory: object) -> str:
    """How messages name a factory: the name :func:`name_factory` gave it, else :func:`factory_name`."""
    name = getattr(factory, _DISPLAY_NAME, None)
    return name if isinstance(name, str) and name else factory_name(factory)


def build_subject(
    factory: Factory, chunks: Sequence[PolicyChunk], vectors: DenseSource | None, *, what: str = "build"
) -> Subject:
    """``factory(tuple(chunks), vectors)``, checked: anything it raises becomes a :class:`SubjectError`."""
    if not callable(factory):
        raise SubjectError(f"the factory must be callable as factory(chunks, vectors), not {type(factory).__name__}")
    try:
        subject = factory(tuple(chunks), vectors)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        raise SubjectError(
            f"{subject_name(factory)} raised while building ({what}, {len(chunks)} chunks): {describe_exception(exc)}"
        ) from exc
    if not callable(getattr(subject, "search", None)):
        close_subject(subject)
        raise SubjectError(
            f"{subject_name(factory)} returned {type(subject).__name__}, which has no "
            "search(query, caller, on_date, top_k) method"
        )
    return subject


def close_subject(subject: object) -> None:
    """Call ``subject.close()`` when it has one (an engine holding a server); never raises."""
    close = getattr(subject, "close", None)
    if callable(close):
        try:
            close()
        except Exception:  # closing is best effort: the run's verdict is already decided
            pass


def subject_versions(subject: object, on_date: dt.date, fallback: str) -> dict[str, str]:
    """The subject's own ``versions(on_date)`` when it has one, else ``{"retriever": fallback}``."""
    versions = getattr(subject, "versions", None)
    if callable(versions):
        try:
            return {plain_str(str(k), "versions key"): plain_str(str(v), "version") for k, v in dict(versions(on_date)).items()}
        except Exception:
            pass
    return {"retriever": fallback}


@dataclass(frozen=True)
class Observation:
    """What one ``search`` call showed the caller.

    ``lanes`` maps ``hybrid`` (the fused list) and, when the retriever reports
    them, ``bm25`` and ``dense`` to ``(chunk_id, score)`` pairs, best first.
    ``trace`` is the result's trace without timings (``None`` for a pairs-only
    retriever). ``timings_ms`` holds the retriever's own stage timings, or, when
    it reports none, the gate's wall clock around the call (and its await) as ``request``.
    ``error`` is set, and every list empty, when ``search`` raised or broke the contract.

    ``contract`` is set, with ``error``, only when the answer's *shape* is one the gate cannot
    read (not a list of results, an item of an unknown kind, a dict with no id or score key, an
    id that is not a str, a score that is not a number): one line naming what was returned, the
    shapes the gate reads and the fix. Such a retriever breaks the same way on every search, so
    the run can stop at the first one instead of failing every case. A search that raised, or
    an answer with a bad *value* (a non-finite score, a repeated id, more than ``top_k``
    results), leaves it ``None``: that is one answer's bug, judged like any failed case.
    """

    lanes: Mapping[str, tuple[tuple[str, float], ...]]
    trace: Mapping[str, Any] | None = None
    timings_ms: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    error: str | None = None
    contract: str | None = None
    payload: tuple[Payload, ...] = ()

    def __post_init__(self) -> None:
        lanes = {lane: tuple((str(i), float(s)) for i, s in pairs) for lane, pairs in self.lanes.items()}
        lanes.setdefault("hybrid", ())
        object.__setattr__(self, "lanes", MappingProxyType(lanes))
        object.__setattr__(self, "timings_ms", MappingProxyType(dict(self.timings_ms)))
        if self.trace is not None:
            object.__setattr__(self, "trace", MappingProxyType(dict(self.trace)))
        payload = tuple(tuple((str(k), v) for k, v in fields) for fields in self.payload)
        if payload and len(payload) != len(lanes["hybrid"]):
            raise ValueError(f"{len(payload)} payloads for {len(lanes['hybrid'])} results of the fused list")
        object.__setattr__(self, "payload", payload)

    def fields(self, chunk_id: str) -> dict[str, PlainValue]:
        """The payload of ``chunk_id``'s result in the fused list (empty when it carries none)."""
        for (i, _), fields in zip(self.lanes["hybrid"], self.payload):
            if i == chunk_id:
                return dict(fields)
        return {}

    @property
    def lanes_reported(self) -> bool:
        """Whether the retriever reported its lanes (a ``RetrievalResult``), not only the fused list."""
        return "bm25" in self.lanes

    def ids(self, lane: str) -> tuple[str, ...]:
        return tuple(i for i, _ in self.lanes.get(lane, ()))

    def scores(self, lane: str) -> tuple[float, ...]:
        return tuple(s for _, s in self.lanes.get(lane, ()))


def _accepts_query_kind(search: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(search).parameters
    except (TypeError, ValueError):
        return False
    return "query_kind" in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def observe(
    subject: Subject, query: str, caller: Caller, on_date: dt.date, top_k: int, *, query_kind: str = "adhoc",
    payload: bool = True,
) -> Observation:
    """Call ``subject.search`` once (awaiting it when it is async) and record what it showed.

    ``payload=False`` reads ids and scores only (a request as deep as the corpus is read for its ids).
    Whatever the subject raises becomes the observation's ``error`` (the case fails, the run goes on),
    the lab's own :class:`~labsrc.errors.LabError` included: a retriever that calls ``labsrc.bm25_rank``
    with ``top_k=0`` raised it, and that is the retriever's failure, not bad input to the gate (the gate
    checks its own input before it asks anything). An answer of a shape the gate cannot read sets
    ``contract`` as well as ``error`` (see :class:`Observation`).
    """
    search = subject.search
    kwargs = {"query_kind": query_kind} if _accepts_query_kind(search) else {}
    start = time.perf_counter()
    try:
        out = call_search(search, query, caller, on_date, top_k, **kwargs)
        elapsed = (time.perf_counter() - start) * 1000.0
        if isinstance(out, RetrievalResult):
            return _observe_result(out, top_k, payload)
        pairs, fields = read_answer(out, top_k, payload=payload)
        return Observation({"hybrid": pairs}, None, {"request": elapsed}, payload=fields)
    except ShapeError as exc:  # error reads as every other broken answer did ("TypeError: ..."); contract alone
        return Observation({"hybrid": ()}, None, {}, error=f"TypeError: {exc}", contract=str(exc))
    except (KeyboardInterrupt, SystemExit):  # the calling process's own; a gate's worker contains them
        raise
    except (Exception, asyncio.CancelledError) as exc:  # an awaited search may end cancelled: its case's error
        return Observation({"hybrid": ()}, None, {}, error=describe_exception(exc))


def _lane_pairs(lane: str, pairs: Any, top_k: int) -> tuple[tuple[str, float], ...]:
    """One lane of a ``RetrievalResult`` as plain ``(str, float)`` pairs: at most ``top_k``, unique, finite."""
    out: list[tuple[str, float]] = []
    seen: set[str] = set()
    for rank, (chunk, score) in enumerate(pairs, start=1):
        if rank > top_k:
            raise TypeError(f"the {lane} lane returned more than top_k={top_k} results")
        field = f"the {lane} lane's result {rank}"
        chunk_id = plain_id(getattr(chunk, "chunk_id", None), f"{field} chunk_id")
        value = plain_score(score, f"{field} score")
        if not math.isfinite(value):
            raise TypeError(f"{field} ({chunk_id!r}) has score {value!r}; expected a finite number")
        if chunk_id in seen:
            raise TypeError(f"the {lane} lane returned {chunk_id!r} more than once")
        seen.add(chunk_id)
        out.append((chunk_id, value))
    return tuple(out)


def _observe_result(out: RetrievalResult, top_k: int, with_payload: bool = True) -> Observation:
    """A ``RetrievalResult`` reduced to plain data (:mod:`~labsrc.evaluation.plain`), here, on the search's clock."""
    lanes = {"bm25": _lane_pairs("bm25", out.sparse, top_k), "dense": _lane_pairs("dense", out.dense, top_k),
             "hybrid": _lane_pairs("fused", out.fused, top_k)}
    payload = tuple(payload_fields(chunk, rank) for rank, (chunk, _) in enumerate(out.fused, start=1)
                    ) if with_payload else ()
    trace = plain_trace(out.trace.to_dict(include_timings=False))
    return Observation(lanes, trace, plain_timings(out.trace.timings_ms, "trace timings_ms"), payload=payload)


@dataclass(frozen=True)
class Request:
    """One ``search`` call: what a case asks, as its caller, on its date, how deep."""

    query: str
    caller: Caller
    on_date: dt.date
    top_k: int
    query_kind: str = "adhoc"
    payload: bool = True  # False: only ids and scores are read (a request as deep as the corpus)


def observe_request(subject: Subject, request: Request) -> Observation:
    """:func:`observe` for a :class:`Request`."""
    return observe(subject, request.query, request.caller, request.on_date, request.top_k, query_kind=request.query_kind,
                   payload=request.payload)


def settle_contract(ask: Callable[[Request], Observation], label: str) -> Callable[[Request], Observation]:
    """``ask``, stopping the run at the first answer whose *shape* the gate cannot read.

    The shape is the retriever's contract, the same for every search: a cascade of failing gates
    would hide a one-line fix. Until the first answer the gate can read, an answer of a shape it
    cannot read raises :class:`~labsrc.evaluation.subject.SubjectError` (``labsrc gate`` exits 2
    with that one line); a search that raised settles nothing, and after a readable answer a bad
    shape is one failed search, judged as any other.
    """
    settled = False

    def asked(request: Request) -> Observation:
        nonlocal settled
        answer = ask(request)
        if not settled:
            if answer.contract:
                raise SubjectError(f"{label}: {answer.contract}")
            settled = not answer.error
        return answer

    return asked
