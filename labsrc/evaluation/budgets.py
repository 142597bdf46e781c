"""Latency budgets for the retrieval stages (spec, "Latency gate")."""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "BUDGET_STAGES",
    "ENGINE_BUDGET_MS",
    "POSTGRES_BUDGET_MS",
    "REQUEST_STAGE",
    "RETRIEVAL_BUDGET_MS",
    "STAGES",
    "engine_budgets",
    "exceeded_retrieval_budgets",
]

#: The retrieval stages, in the order a request runs them.
STAGES = ("authorize", "bm25", "dense", "fusion")

#: The gate's own wall clock around a whole ``search`` call, measured only for retrievers that
#: report no stages of their own (a plug-in returning ``(chunk_id, score)`` pairs). No default budget.
REQUEST_STAGE = "request"

#: Every stage a gate config may budget.
BUDGET_STAGES = (*STAGES, REQUEST_STAGE)

#: Budget per stage in milliseconds. Read-only: copy it to change a budget.
RETRIEVAL_BUDGET_MS: Mapping[str, float] = MappingProxyType({"authorize": 10, "bm25": 12, "dense": 40, "fusion": 8})

#: The PostgreSQL engine's default budgets, for the same lesson-sized corpora. Each request is a
#: round trip to the server, so the in-memory budgets leave it no margin: on this project's 2-core
#: machine under a load of 4, the lesson on the engine measured p95 authorize 5.1-8.8 ms, bm25
#: 8.4-8.6 ms, dense 2.8-4.4 ms, fusion 0.1-0.2 ms (three runs, 2026-11-27), and at a load of 6
#: authorize 13.0 ms and bm25 14.6 ms (issue 49); ten runs beside four busy loops (load 4.2-5.2) peaked
#: at authorize 12.0 ms and bm25 11.2 ms. These budgets are four to six times the loaded p95.
POSTGRES_BUDGET_MS: Mapping[str, float] = MappingProxyType({"authorize": 50, "bm25": 60, "dense": 60, "fusion": 8})

#: Default budgets per engine (``--engine``): a config whose budgets are the in-memory defaults
#: gets its engine's instead (:func:`engine_budgets`).
ENGINE_BUDGET_MS: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {"memory": RETRIEVAL_BUDGET_MS, "postgres": POSTGRES_BUDGET_MS}
)


def engine_budgets(budgets_ms: Mapping[str, float], engine: str) -> Mapping[str, float]:
    """``budgets_ms``, or ``engine``'s defaults when ``budgets_ms`` are the in-memory defaults (which the
    lesson's gate.json also writes out): budgets a team chose are kept, the defaults fit the engine."""
    if engine not in ENGINE_BUDGET_MS:
        raise ValueError(f"unknown engine {engine!r}; known: {sorted(ENGINE_BUDGET_MS)}")
    if dict(budgets_ms) == dict(RETRIEVAL_BUDGET_MS):
        return ENGINE_BUDGET_MS[engine]
    return budgets_ms


def exceeded_retrieval_budgets(
    timings_ms: Mapping[str, float], budgets_ms: Mapping[str, float] = RETRIEVAL_BUDGET_MS
) -> list[str]:
    """Stages whose timing is over budget, missing, or not a finite number, in budget order.

    A missing stage counts as exceeded: a gate must not pass because nobody measured.
    """
    exceeded = []
    for stage, budget in budgets_ms.items():
        value = timings_ms.get(stage)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value > budget
        ):
            exceeded.append(stage)
    return exceeded
