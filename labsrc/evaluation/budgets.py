"""Latency budgets for the retrieval stages (spec, "Latency gate")."""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["BUDGET_STAGES", "REQUEST_STAGE", "RETRIEVAL_BUDGET_MS", "STAGES", "exceeded_retrieval_budgets"]

#: The retrieval stages, in the order a request runs them.
STAGES = ("authorize", "bm25", "dense", "fusion")

#: The gate's own wall clock around a whole ``search`` call, measured only for retrievers that
#: report no stages of their own (a plug-in returning ``(chunk_id, score)`` pairs). No default budget.
REQUEST_STAGE = "request"

#: Every stage a gate config may budget.
BUDGET_STAGES = (*STAGES, REQUEST_STAGE)

#: Budget per stage in milliseconds. Read-only: copy it to change a budget.
RETRIEVAL_BUDGET_MS: Mapping[str, float] = MappingProxyType({"authorize": 10, "bm25": 12, "dense": 40, "fusion": 8})


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
