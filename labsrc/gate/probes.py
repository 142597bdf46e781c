"""Probes that decide whether the gate's comparisons can be trusted, and one that overlaps requests.

The rebuild and bait gates compare a retriever's answers across builds. That
comparison proves noninterference only if each build really is the factory's
work on the chunks it was handed, and only for what is reproducible at all:

* **Canary** (:func:`canary_chunk`, :class:`CanaryCheck`): one build is handed
  the stored chunks plus a permitted canary (a unique code as its text and, with
  vectors, a vector of its own) and minus one permitted chunk the first build
  returned. The canary must come back for its own code, and the withheld chunk
  must not come back at all. A factory that ignores what it is handed (a client
  of its own index, a cache from an earlier build) fails one or both, and then no
  comparison across builds means anything.
* **Repeat** (:func:`repeatability`): the same chunks built twice, in two
  processes, every case replayed on both. Ids that differ make the rebuild and
  bait comparisons of those cases impossible; scores that differ make them compare
  ids and order only. Noise is never reported as a leak.
* **Concurrency** (:func:`interleaved`): every case replayed from many threads at
  once on one build, callers interleaved, each answer compared with the same case
  replayed alone.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from labsrc.boundary import block_reasons, permitted_chunks
from labsrc.gate.bait import BaitVectors
from labsrc.gate.generated import GeneratedCheck
from labsrc.gate.noninterference import Comparison, compare_observations
from labsrc.evaluation.subject import Observation, Request
from labsrc.lanes.dense import DenseSource
from labsrc.records.cases import Case
from labsrc.records.policy import Caller, PolicyChunk

__all__ = [
    "CONCURRENCY_ROUNDS",
    "CanaryCheck",
    "ConcurrencyCheck",
    "Probes",
    "Repeatability",
    "canary_chunk",
    "canary_vectors",
    "interleaved",
    "repeatability",
]

_YEAR = dt.timedelta(days=365)

#: How many times the concurrency probe replays every case.
CONCURRENCY_ROUNDS = 4
_LETTERS = "bcdfghjklmnpqrstvwxz"


def canary_code(taken_ids: Collection[str]) -> str:
    """A word no chunk holds: ``canary`` and ten consonants derived from the stored ids (deterministic).

    Letters only, lower case, so every tokenizer, lower-caser and stemmer keeps it one token.
    """
    digest = hashlib.sha256("\n".join(sorted(taken_ids)).encode()).digest()
    return "canary" + "".join(_LETTERS[b % len(_LETTERS)] for b in digest[:10])


def canary_chunk(caller: Caller, on_date: dt.date, taken_ids: Collection[str]) -> PolicyChunk:
    """A chunk ``caller`` may see on ``on_date`` whose text is a unique code (its own query)."""
    code = canary_code(taken_ids)
    chunk_id, n = f"{code}-chunk", 1
    while chunk_id in taken_ids:
        n += 1
        chunk_id = f"{code}-chunk-{n}"
    start = on_date - _YEAR if on_date - dt.date.min > _YEAR else dt.date.min
    chunk = PolicyChunk(
        chunk_id=chunk_id, document_id=chunk_id, parent_id=chunk_id, version=f"{chunk_id}/1",
        region=caller.region, acl_tag=sorted(caller.acl_tags)[0], effective_from=start, effective_to=None,
        text=code,
    )
    if block_reasons(caller, chunk, on_date):  # a bug here would make the probe vacuous
        raise AssertionError(f"internal: canary {chunk_id} is hidden from {caller.actor_id}")  # pragma: no cover
    return chunk


def canary_vectors(source: DenseSource, canary: PolicyChunk, dimension_query: str) -> BaitVectors:
    """The source, plus one vector that is both the canary's document vector and its code's query vector."""
    dimension = int(np.asarray(source.query_vector(dimension_query)).shape[-1])
    seed = int.from_bytes(hashlib.sha256(canary.text.encode()).digest()[:8], "little")
    vector = np.random.default_rng(seed).standard_normal(dimension)
    vector /= np.linalg.norm(vector)
    return BaitVectors(source, {canary.chunk_id: vector}, queries={canary.text: vector})


def pick_canary_caller(
    cases: Sequence[Case], callers: Mapping[str, Caller], stored: Sequence[PolicyChunk], on_date: dt.date
) -> tuple[Caller, dt.date] | None:
    """The case (caller, date) that sees the most stored chunks and holds a tag (ties: case order), or None."""
    best: tuple[int, Caller, dt.date] | None = None
    for case in cases:
        caller, day = callers[case.caller], case.on_date or on_date
        if not caller.acl_tags:
            continue
        seen = len(permitted_chunks(caller, stored, day))
        if best is None or seen > best[0]:
            best = (seen, caller, day)
    return None if best is None else (best[1], best[2])


@dataclass(frozen=True)
class CanaryCheck:
    """Whether the factory indexed what it was handed (see the module docs).

    ``returned`` is the fused list for the canary's code; ``withheld_rank`` the
    1-based rank (any lane, full depth) at which the withheld chunk still came
    back, or ``None``. ``error`` is set when the canary build or a search failed,
    so the factory could not be shown to index what it is handed.
    """

    caller: str
    on_date: dt.date
    canary_id: str
    code: str
    returned: tuple[str, ...] = ()
    withheld: str | None = None
    withheld_case: str | None = None
    withheld_rank: int | None = None
    error: str | None = None

    @property
    def found(self) -> bool:
        return self.canary_id in self.returned

    @property
    def passed(self) -> bool:
        return self.error is None and self.found and self.withheld_rank is None

    def findings(self) -> tuple[str, ...]:
        if self.error is not None:
            return (f"the factory could not be shown to index what it is handed: {self.error}",)
        out = []
        if not self.found:
            got = list(self.returned) if self.returned else "nothing"
            out.append(
                f"the factory ignored the chunks it was handed: the canary {self.canary_id!r} (text {self.code!r}), "
                f"permitted to {self.caller!r} on {self.on_date}, did not come back for its own text (it returned {got})"
            )
        if self.withheld_rank is not None:
            out.append(
                f"the factory ignored the chunks it was handed: {self.withheld!r}, withheld from a build, still came "
                f"back for case {self.withheld_case!r} at rank {self.withheld_rank}"
            )
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        return {
            "caller": self.caller, "on_date": self.on_date.isoformat(), "canary_id": self.canary_id,
            "code": self.code, "returned": list(self.returned), "found": self.found, "withheld": self.withheld,
            "withheld_case": self.withheld_case, "withheld_rank": self.withheld_rank, "error": self.error,
            "passed": self.passed,
        }


def withheld_rank(answer: Observation, chunk_id: str) -> int | None:
    """The best rank at which ``chunk_id`` appears in any lane of ``answer``, or None."""
    ranks = [answer.ids(lane).index(chunk_id) + 1 for lane in answer.lanes if chunk_id in answer.ids(lane)]
    return min(ranks) if ranks else None


@dataclass(frozen=True)
class Repeatability:
    """Two builds of the same chunks, every case replayed on both (:func:`repeatability`).

    ``ids_differ`` names the cases whose ids or order differ (with what differs);
    ``scores_differ`` those whose scores alone differ; ``largest`` is the largest
    score difference. ``error`` is set when the second build failed.
    """

    compared: int
    ids_differ: tuple[tuple[str, str], ...] = ()
    scores_differ: tuple[str, ...] = ()
    largest: float = 0.0
    error: str | None = None
    fields_differ: tuple[str, ...] = ()

    @property
    def reproducible(self) -> bool:
        return self.error is None and not self.ids_differ and not self.scores_differ

    def unstable(self) -> frozenset[str]:
        """Cases whose ids cannot be compared across builds."""
        return frozenset(name for name, _ in self.ids_differ)

    def noisy_fields(self) -> frozenset[str]:
        """Payload fields that differ between two builds of the same chunks (an id a store makes up, a
        timestamp): noise, so no comparison across builds reads them."""
        return frozenset(self.fields_differ)

    def to_dict(self) -> dict[str, Any]:
        return {
            "compared": self.compared, "reproducible": self.reproducible,
            "ids_differ": {name: what for name, what in self.ids_differ}, "scores_differ": list(self.scores_differ),
            "largest_score_diff": self.largest, "error": self.error, "fields_differ": list(self.fields_differ),
        }


def repeatability(cases: Sequence[Case], first: Sequence[Observation], second: Sequence[Observation]) -> Repeatability:
    """Compare two builds' answers case by case (cases that raised in either build are left out)."""
    ids_differ: list[tuple[str, str]] = []
    scores_differ: list[str] = []
    fields: set[str] = set()
    largest, compared = 0.0, 0
    for case, a, b in zip(cases, first, second):
        if a.error or b.error:
            continue
        compared += 1
        comparison = compare_observations(a, b, kind="repeat", mode="ids")
        fields.update(f.field for f in comparison.fields)  # payload noise: left out of comparisons, not a leak
        comparison = replace(comparison, fields=())
        if comparison.differs or comparison.trace_differs:
            ids_differ.append((case.name, comparison.describe() if comparison.differs else "the trace differs"))
        elif comparison.max_score_diff != 0.0:
            scores_differ.append(case.name)
            largest = max(largest, comparison.max_score_diff)
    return Repeatability(compared, tuple(ids_differ), tuple(scores_differ), largest, fields_differ=tuple(sorted(fields)))


def interleaved(
    cases: Sequence[Case], callers: Mapping[str, Caller], on_date: dt.date, top_k: int, rounds: int,
    skip: Collection[int] = (),
) -> list[tuple[int, Request]]:
    """``rounds`` replays of every case (but ``skip``), ordered so that neighbours have different callers.

    Cases are dealt round-robin across callers (each caller's cases in case order), so any
    two requests that overlap in time are, as far as the case set allows, from two callers.
    """
    by_caller: dict[str, list[int]] = {}
    for i, case in enumerate(cases):
        if i not in skip:
            by_caller.setdefault(case.caller, []).append(i)
    queues = list(by_caller.values())
    order: list[int] = []
    for depth in range(max((len(q) for q in queues), default=0)):
        order += [q[depth] for q in queues if depth < len(q)]
    out = []
    for _ in range(rounds):
        for i in order:
            case = cases[i]
            out.append((i, Request(case.query, callers[case.caller], case.on_date or on_date, top_k, case.kind)))
    return out


def compare_concurrent(alone: Observation, together: Observation, mode: str,
                       ignore_fields: Collection[str] = ()) -> Comparison:
    """How a case answered under concurrent requests differs from the same case alone."""
    return compare_observations(alone, together, kind="concurrency", mode=mode, ignore_fields=ignore_fields)


@dataclass(frozen=True)
class ConcurrencyCheck:
    """The concurrency probe: ``requests`` (every case ``rounds`` times) from ``threads`` threads at once.

    ``error`` is set when the probe could not finish (no request answered within the search timeout,
    the worker died); the per-case differences live on each case's outcome.
    """

    threads: int
    rounds: int
    requests: int
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"threads": self.threads, "rounds": self.rounds, "requests": self.requests, "error": self.error}


@dataclass(frozen=True)
class Probes:
    """What the probes of a factory's gate run found: the input of the canary, repeat and concurrency gates.

    ``canary`` is ``None`` when no case's caller holds a tag (no permitted canary can be made) or
    noninterference is off; ``generated`` holds what the generated probes found; ``leftovers`` the
    processes builds left running (the gate killed them; ``None`` where they cannot be found, without
    ``/proc``), ``containment`` what held them (:func:`~labsrc.gate.containment.containment_kind`),
    ``output`` what each build printed (never mixed into the verdict lines); ``builds`` counts the builds the run made (each in its own worker
    process) and ``restarts`` the builds made again after a search timed out. ``failed_builds`` holds one
    ``(line, cases)`` per build after the main one that failed (raised, timed out, ended): the line names the
    build, the gate it was made for, what it was handed and the error; ``cases`` those whose requests it was to
    answer. ``search_errors`` holds one line per search of a probe (repeat, canary, concurrency, rebuild, bait,
    generated) that raised or timed out: each is its own finding ('build errors', 'search errors'), whichever
    probe asked for it, never a difference the probe's own gate reports.
    """

    canary: CanaryCheck | None = None
    repeat: Repeatability | None = None
    concurrency: ConcurrencyCheck | None = None
    builds: int = 0
    restarts: int = 0
    noninterference: bool = True
    generated: GeneratedCheck | None = None
    leftovers: tuple[str, ...] | None = ()
    output: tuple[tuple[str, str], ...] = ()
    containment: str | None = None
    failed_builds: tuple[tuple[str, tuple[str, ...]], ...] = ()
    search_errors: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "canary": None if self.canary is None else self.canary.to_dict(),
            "repeat": None if self.repeat is None else self.repeat.to_dict(),
            "concurrency": None if self.concurrency is None else self.concurrency.to_dict(),
            "generated": None if self.generated is None else self.generated.to_dict(),
            "builds": self.builds,
            "restarts": self.restarts,
            "leftovers": None if self.leftovers is None else list(self.leftovers),
            "containment": self.containment,
            "printed": [what for what, _ in self.output],
            "failed_builds": [line for line, _ in self.failed_builds],
            "search_errors": list(self.search_errors),
        }
