"""Measured latency: replay requests, keep the retriever's own stage timings, summarise.

One request's timings are noisy (a garbage collection, another process on the
core), so a latency gate looks at a *distribution*: replay the case set a few
times untimed to warm caches and indexes, then ``repetitions`` times timed, and
report the median (p50) and the 95th percentile (p95) of each stage. The
timings are the ones :class:`~labsrc.trace.StageTimer` records inside
:meth:`PolicyRetriever.search <labsrc.retriever.policy.PolicyRetriever.search>`, the
same numbers a production trace would carry.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from labsrc.errors import InvalidArgument
from labsrc.evaluation.budgets import BUDGET_STAGES, exceeded_retrieval_budgets
from labsrc.evaluation.subject import Observation, Request, Subject, observe_request
from labsrc.records.cases import Case
from labsrc.records.policy import Caller
from labsrc.retriever.policy import PolicyRetriever

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["LatencyReport", "Progress", "measure_latency", "percentile_ms", "time_requests"]

#: ``progress(phase, done, total)``: called after each request of a long run.
Progress = Callable[[str, int, int], None]


def percentile_ms(samples: Sequence[float], q: float) -> float:
    """The q-th percentile with linear interpolation between order statistics.

    For sorted samples x_1..x_n, h = (n - 1)·q/100 and
    P_q = x_⌊h⌋ + (h − ⌊h⌋)·(x_⌊h⌋+1 − x_⌊h⌋) (0-based). This is Hyndman & Fan's
    (1996) definition 7, numpy's and Excel's default.
    """
    if not 0 <= q <= 100:
        raise InvalidArgument(f"q must be in [0, 100], got {q!r}")
    if len(samples) == 0:
        raise InvalidArgument("no samples: a percentile of nothing is undefined")
    return float(np.percentile(np.asarray(samples, dtype=np.float64), q, method="linear"))


@dataclass(frozen=True)
class LatencyReport:
    """Per-stage timing samples (ms) and their summary.

    ``samples[stage]`` holds one value per timed request, in the order measured;
    ``requests`` = ``repetitions`` × number of cases. ``warmup_samples[stage]``
    holds the warm-up rounds' values, kept apart and never summarised: they let
    the course's checks recognise a percentile taken with the warm-up included.
    """

    samples: Mapping[str, tuple[float, ...]]
    warmup: int
    repetitions: int
    requests: int
    warmup_samples: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("samples", "warmup_samples"):
            values = getattr(self, name)
            object.__setattr__(self, name, MappingProxyType({stage: tuple(v) for stage, v in values.items()}))

    @property
    def stages(self) -> tuple[str, ...]:
        """Measured stages in request order (unknown extra stages last, by name)."""
        known = [s for s in BUDGET_STAGES if s in self.samples]
        return tuple(known + sorted(set(self.samples) - set(BUDGET_STAGES)))

    @property
    def p50_ms(self) -> dict[str, float]:
        return {stage: percentile_ms(self.samples[stage], 50) for stage in self.stages}

    @property
    def p95_ms(self) -> dict[str, float]:
        return {stage: percentile_ms(self.samples[stage], 95) for stage in self.stages}

    def exceeded(
        self, p50_budget_ms: Mapping[str, float], p95_budget_ms: Mapping[str, float]
    ) -> dict[str, list[str]]:
        """Stages over budget (or unmeasured), per statistic: ``{"p50": [...], "p95": [...]}``."""
        return {
            "p50": exceeded_retrieval_budgets(self.p50_ms, p50_budget_ms),
            "p95": exceeded_retrieval_budgets(self.p95_ms, p95_budget_ms),
        }

    def to_frame(
        self,
        p50_budget_ms: Mapping[str, float] | None = None,
        p95_budget_ms: Mapping[str, float] | None = None,
    ) -> pd.DataFrame:
        """One row per stage: p50, p95, mean and max in ms, sample count and, given budgets, verdicts."""
        import pandas as pd  # only reports need pandas; keep `import labsrc` light

        p50, p95 = self.p50_ms, self.p95_ms
        stages = list(self.stages)
        for budgets in (p50_budget_ms or {}, p95_budget_ms or {}):
            stages += [s for s in budgets if s not in stages]  # a budgeted but unmeasured stage still shows up
        rows = []
        for stage in stages:
            values = self.samples.get(stage, ())
            row: dict[str, object] = {
                "stage": stage,
                "p50_ms": p50.get(stage, float("nan")),
                "p95_ms": p95.get(stage, float("nan")),
                "mean_ms": float(np.mean(values)) if values else float("nan"),
                "max_ms": float(np.max(values)) if values else float("nan"),
                "samples": len(values),
            }
            if p50_budget_ms is not None or p95_budget_ms is not None:
                b50 = (p50_budget_ms or {}).get(stage)
                b95 = (p95_budget_ms or {}).get(stage)
                row["p50_budget_ms"] = float("nan") if b50 is None else float(b50)
                row["p95_budget_ms"] = float("nan") if b95 is None else float(b95)
                over50 = b50 is not None and stage in exceeded_retrieval_budgets(p50, {stage: b50})
                over95 = b95 is not None and stage in exceeded_retrieval_budgets(p95, {stage: b95})
                row["within_budget"] = not (over50 or over95)
            rows.append(row)
        return pd.DataFrame(rows)

    def to_dict(
        self, p50_budget_ms: Mapping[str, float] | None = None, p95_budget_ms: Mapping[str, float] | None = None
    ) -> dict[str, object]:
        """JSON-ready summary (no raw samples): settings plus one entry per stage."""
        frame = self.to_frame(p50_budget_ms, p95_budget_ms)
        stages = {}
        for record in frame.to_dict(orient="records"):
            stage = record.pop("stage")
            stages[stage] = {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in record.items()}
        return {"warmup": self.warmup, "repetitions": self.repetitions, "requests": self.requests, "stages": stages}


def measure_latency(
    retriever: PolicyRetriever | Subject,
    cases: Sequence[Case],
    callers: Mapping[str, Caller],
    on_date: dt.date,
    top_k: int = 2,
    *,
    warmup: int = 3,
    repetitions: int = 20,
    progress: Progress | None = None,
    ask: Callable[[Request], Observation] | None = None,
) -> LatencyReport:
    """Replay ``cases`` ``warmup`` times untimed, then ``repetitions`` times timed.

    Every timed request contributes one sample per stage (a warm-up request's
    timings go to ``warmup_samples``, never into p50 or p95), taken from the
    request's own trace (``result.trace.timings_ms``); a retriever that returns
    bare ``(chunk_id, score)`` pairs contributes the gate's wall clock around the
    call as the ``request`` stage (:func:`~labsrc.evaluation.subject.observe`). A case's ``on_date``
    wins over ``on_date``, exactly as in :func:`labsrc.gate.gates.run_cases`. ``ask`` replaces
    the in-process call (the gate passes a build living in a worker process).
    """
    if ask is None:
        ask = partial(observe_request, retriever)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise InvalidArgument(f"warmup must be an int >= 0, not {warmup!r}")
    if isinstance(repetitions, bool) or not isinstance(repetitions, int) or repetitions < 1:
        raise InvalidArgument(f"repetitions must be an int >= 1, not {repetitions!r}")
    if not cases:
        raise InvalidArgument("no cases to time")
    requests = []
    for case in cases:
        if case.caller not in callers:
            raise InvalidArgument(f"case {case.name!r} names unknown caller {case.caller!r}")
        requests.append(Request(case.query, callers[case.caller], case.on_date or on_date, top_k, case.kind))
    return time_requests(ask, requests, warmup=warmup, repetitions=repetitions, progress=progress)


def time_requests(
    ask: Callable[[Request], Observation],
    requests: Sequence[Request],
    *,
    warmup: int = 3,
    repetitions: int = 20,
    progress: Progress | None = None,
) -> LatencyReport:
    """Ask every request ``warmup`` rounds untimed, then ``repetitions`` rounds timed (see :func:`measure_latency`)."""
    total = (warmup + repetitions) * len(requests)
    done = 0
    samples: dict[str, list[float]] = {}
    warm: dict[str, list[float]] = {}
    for round_ in range(warmup + repetitions):
        timed = round_ >= warmup
        for request in requests:
            observation = ask(request)
            if observation.error is None:  # a search that raised failed its case already
                for stage, ms in observation.timings_ms.items():
                    (samples if timed else warm).setdefault(stage, []).append(float(ms))
            done += 1
            if progress is not None:
                progress("timing" if timed else "warm-up", done, total)
    return LatencyReport(
        {stage: tuple(values) for stage, values in samples.items()},
        warmup=warmup,
        repetitions=repetitions,
        requests=repetitions * len(requests),
        warmup_samples={stage: tuple(values) for stage, values in warm.items()},
    )
