"""Check for step 4: Recall@k per lane and p50/p95 per stage, as the run measured them.

When a number is wrong the check says which mistake produced it, where it can
tell: a p50 that is the mean, a p95 that is the maximum or another percentile
method, a percentile taken with the warm-up rounds put back, a Recall@k over
all chunks instead of the caller's permitted ones, a mean over every case
instead of the positive ones. Numbers are printed with as
many digits as it takes to tell them apart, and a value rounded the way the
notebook displays it (two decimals or more) is accepted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from labsrc.course.checks.result import CheckResult, Collector
from labsrc.evaluation.budgets import STAGES
from labsrc.gate.config import LANES
from labsrc.gate.gates import GateRun
from labsrc.evaluation.metrics import recall_at_k

__all__ = ["PERCENTILE_METHOD", "check_lane_comparison", "distinct_digits"]

#: How the run computes p50 and p95 (labsrc.evaluation.latency.percentile_ms).
PERCENTILE_METHOD = (
    "the run uses linear interpolation between order statistics (numpy.percentile's default, "
    "method='linear'; Hyndman & Fan 1996, definition 7): sort the n samples, h = (n - 1) * q / 100, "
    "P = x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)]); "
    "take run.latency.p50_ms / p95_ms, or labsrc.evaluation.latency.percentile_ms(samples, q)"
)

#: Other percentile definitions a learner may have used, by numpy's name and what people call them.
_OTHER_METHODS = {
    "inverted_cdf": "nearest-rank",
    "lower": "lower",
    "higher": "higher",
    "nearest": "nearest",
    "midpoint": "midpoint",
    "hazen": "Hazen",
    "weibull": "Weibull (Excel PERCENTILE.EXC)",
    "median_unbiased": "median-unbiased",
    "normal_unbiased": "normal-unbiased",
}


def distinct_digits(value: float, truth: float, minimum: int = 2) -> tuple[str, str]:
    """``value`` and ``truth`` printed with the fewest decimals (at least ``minimum``, at most 12) that differ."""
    for digits in range(minimum, 13):
        a, b = f"{value:.{digits}f}", f"{truth:.{digits}f}"
        if a != b:
            return a, b
    return repr(value), repr(truth)


def _close(value: float, truth: float, tolerance: float) -> bool:
    """Equal within ``tolerance``, or equal to ``truth`` rounded to 2 or more decimals (as displayed)."""
    if math.isclose(value, truth, rel_tol=1e-9, abs_tol=tolerance):
        return True
    return any(math.isclose(value, round(truth, d), abs_tol=1e-12) for d in range(2, 10))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        return None
    return float(value)


def _all_chunks_recall(run: GateRun, retriever: Any, lane: str) -> float | None:
    """The lane's mean Recall@k if each positive had been ranked over *all* chunks, boundary ignored."""
    if retriever is None:
        return None
    from labsrc.fusion.rrf import reciprocal_rank_fusion
    from labsrc.lanes.dense import dense_rank
    from labsrc.lanes.sparse import bm25_rank

    k = run.config.top_k
    positives = [o for o in run.outcomes if o.case.kind == "positive"]
    if not positives:
        return None
    total = 0.0
    for o in positives:
        sparse = bm25_rank(o.case.query, retriever.chunks, top_k=k)
        dense = dense_rank(o.case.query, retriever.chunks, retriever.vectors, top_k=k)
        ranked = {"bm25": sparse, "dense": dense,
                  "hybrid": reciprocal_rank_fusion([sparse, dense], run.config.rrf_k, top_k=k)}[lane]
        total += recall_at_k([c.chunk_id for c, _ in ranked], o.case.expected, k)
    return total / len(positives)


def _shallower_recall(value: float, run: GateRun, lane: str, tolerance: float) -> int | None:
    """The k below the run's at which the lane's mean Recall@k over the positives equals ``value``, if any."""
    positives = [o for o in run.outcomes if o.case.kind == "positive"]
    if not positives:
        return None
    for depth in range(1, run.config.top_k):
        at = sum(recall_at_k(list(o.ids[lane])[:depth], o.case.expected, depth) for o in positives) / len(positives)
        if _close(value, at, tolerance):
            return depth
    return None


def _recall_hint(value: float, run: GateRun, retriever: Any, lane: str, tolerance: float) -> str:
    k = run.config.top_k
    positives = [o for o in run.outcomes if o.case.kind == "positive"]
    shallower = _shallower_recall(value, run, lane, tolerance)
    if shallower is not None:
        return (f"this matches Recall@{shallower}; the run asked k = {k} (run.config.top_k): "
                f"average o.recall({lane!r}, run.config.top_k) over the positive cases")
    if positives and len(positives) != len(run.outcomes):
        over_all = sum(o.recall(lane, k) for o in positives) / len(run.outcomes)
        if _close(value, over_all, tolerance):
            return (f"this is the sum over the {len(positives)} positive cases divided by all {len(run.outcomes)} "
                    "cases: average over the positive cases only (the others expect nothing)")
    unbounded = _all_chunks_recall(run, retriever, lane)
    truth = run.recall[lane]
    if unbounded is not None and not _close(unbounded, truth, tolerance) and _close(value, unbounded, tolerance):
        return ("this Recall@k was computed over all chunks, not the caller's permitted ones: rank each case "
                "through the retriever (the boundary first), as its caller on its date -- o.recall(lane, k)")
    return f"average o.recall({lane!r}, k) over the positive cases at k={k}"


def _swapped_hint(stage: str, stat: str, value: float, run: GateRun) -> str | None:
    """Say so when ``value`` is another stage's figure, or this stage's other percentile."""
    latency = run.latency
    tables = {"p50": latency.p50_ms, "p95": latency.p95_ms}
    for other in STAGES:
        if other == stage:
            continue
        for other_stat, table in tables.items():
            truth = table.get(other)
            if truth is not None and not math.isclose(truth, tables[stat].get(stage, math.nan), rel_tol=1e-9) \
                    and math.isclose(value, truth, rel_tol=1e-6, abs_tol=1e-9):
                return (f"this is the {other} stage's {other_stat}: rows swapped? "
                        f"take run.latency.{stat}_ms[{stage!r}] for the {stage} stage")
    other_stat = "p95" if stat == "p50" else "p50"
    truth = tables[other_stat].get(stage)
    if truth is not None and math.isclose(value, truth, rel_tol=1e-6, abs_tol=1e-9) \
            and not math.isclose(truth, tables[stat].get(stage, math.nan), rel_tol=1e-9):
        return f"this is the {stage} stage's {other_stat}: p50 and p95 swapped? take run.latency.{stat}_ms[{stage!r}]"
    return None


def _methods_giving(data: np.ndarray, q: int, value: float) -> list[str]:
    """The numpy methods of :data:`_OTHER_METHODS` whose ``q``-th percentile of ``data`` is ``value``, in that order."""
    return [m for m in _OTHER_METHODS
            if math.isclose(value, float(np.percentile(data, q, method=m)), rel_tol=1e-6, abs_tol=1e-9)]


def _named(method: str, others: Sequence[str], what: str) -> str:
    """``the nearest percentile (numpy method='nearest')``, plus the methods that give the same ``what`` here."""
    if len(others) == 1:
        alike = f", or method {others[0]!r}, which gives the same {what} on these samples"
    elif others:
        names = f"{', '.join(repr(m) for m in others[:-1])} and {others[-1]!r}"
        alike = f", or methods {names}, which give the same {what} on these samples"
    else:
        alike = ""
    return f"the {_OTHER_METHODS[method]} percentile (numpy method={method!r}){alike}"


def _joint_method_hint(stat: str, value: float, other: float | None, data: np.ndarray) -> str | None:
    """The numpy method that gives both this ``stat``'s ``value`` and the other stat's ``other``, or None.

    One method explains a learner's two numbers better than two methods do (numpy's 'nearest'
    can look like 'higher' at p50 and 'inverted_cdf' at p95), so each method is tried on both.
    """
    if other is None:
        return None
    q, other_q = (50, 95) if stat == "p50" else (95, 50)
    both = [m for m in _methods_giving(data, q, value) if m in _methods_giving(data, other_q, other)]
    if not both:
        return None
    other_stat = "p95" if stat == "p50" else "p50"
    return (f"your p50 and p95 are both {_named(both[0], both[1:], 'two numbers')}: "
            f"numpy.percentile(samples, {q}, method={both[0]!r}) gives your {stat} and "
            f"numpy.percentile(samples, {other_q}, method={both[0]!r}) your {other_stat}")


def _method_hint(stat: str, value: float, data: np.ndarray) -> str | None:
    """The numpy method that gives ``value`` as this ``stat`` on its own (when none gives both numbers), or None."""
    here = _methods_giving(data, 50 if stat == "p50" else 95, value)
    return f"your {stat} is {_named(here[0], here[1:], stat)}" if here else None


def _warmup_hint(stage: str, stat: str, value: float, run: GateRun) -> str | None:
    """Say so when ``value`` is a percentile of the stage's samples with the run's warm-up rounds put back."""
    latency = run.latency
    warm = latency.warmup_samples.get(stage, ()) if latency is not None else ()
    if not warm:
        return None
    pooled = np.asarray((*warm, *latency.samples.get(stage, ())), dtype=np.float64)
    q = 50 if stat == "p50" else 95
    if not any(math.isclose(value, float(np.percentile(pooled, q, method=m)), rel_tol=1e-6, abs_tol=1e-9)
               for m in ("linear", *_OTHER_METHODS)):
        return None
    timed = len(pooled) - len(warm)
    return (f"these samples are not the run's: it drops the warm-up rounds ({latency.warmup} untimed rounds, "
            f"{len(warm)} requests, that build caches and indexes) and summarises only the {timed} samples of its "
            f"{latency.repetitions} timed rounds; your {stat} is taken over all {len(pooled)}, warm-up included: "
            f"take run.latency.{stat}_ms[{stage!r}], or percentile_ms(run.latency.samples[{stage!r}], {q})")


def _latency_hint(stage: str, stat: str, value: float, samples: Sequence[float], run: GateRun | None = None,
                  other: float | None = None) -> str:
    """Which mistake gave ``value``; ``other`` is the learner's figure for the stage's other percentile."""
    swapped = _swapped_hint(stage, stat, value, run) if run is not None and run.latency is not None else None
    if swapped is not None:
        return swapped
    warmed = _warmup_hint(stage, stat, value, run) if run is not None else None
    if warmed is not None:
        return warmed
    data = np.asarray(samples, dtype=np.float64)
    q = 50 if stat == "p50" else 95
    if data.size:
        joint = _joint_method_hint(stat, value, other, data)
        if joint is not None:
            return f"{joint}; {PERCENTILE_METHOD}"
        if stat == "p50" and math.isclose(value, float(np.mean(data)), rel_tol=1e-6, abs_tol=1e-9):
            return f"your p50 looks like the mean of the {data.size} samples: p50 is the median (50th percentile)"
        if math.isclose(value, float(np.max(data)), rel_tol=1e-6, abs_tol=1e-9):
            return f"your {stat} is the largest of the {data.size} samples, not the {q}th percentile"
        alone = _method_hint(stat, value, data)
        if alone is not None:
            return f"{alone}; {PERCENTILE_METHOD}"
    return PERCENTILE_METHOD


def check_lane_comparison(
    recall: Mapping[str, float],
    latency_ms: Mapping[str, Mapping[str, float]],
    run: GateRun,
    *,
    retriever: Any = None,
    tolerance: float = 1e-9,
    k: int | None = None,
) -> CheckResult:
    """Step 4: Recall@k for BM25, dense and hybrid, and p50/p95 per stage, matching ``run``.

    ``recall`` maps lane → permitted Recall@k over the positive cases;
    ``latency_ms`` maps stage → ``{"p50": ms, "p95": ms}``. With the run's
    ``retriever`` given, a Recall@k computed over all chunks is recognised.
    ``k`` is the k the learner computed Recall@k at: the run keeps only
    ``top_k`` results per lane, so Recall@5 of them is the same number as
    Recall@2 and only the stated k can tell the mistake.
    """
    out = Collector("step 4, lane comparison")
    used = k
    k = run.config.top_k
    if used is not None:
        if isinstance(used, bool) or not isinstance(used, (int, np.integer)):
            out.problem(f"k is {used!r}, a {type(used).__name__}: k is the run's whole number of results, "
                        "k = run.config.top_k")
        elif used != k:
            why = (f"it keeps {k} results per lane, so Recall@{used} of them is Recall@{k}'s number under the wrong name"
                   if used > k else f"Recall@{used} measures a shorter list than the gate judges")
            out.problem(f"you computed Recall@{used}; the run asked k = {k} (run.config.top_k): {why}; "
                        "set k = run.config.top_k")
        else:
            out.passes.append(f"k = {k}, the run's top_k")
    missing = [lane for lane in LANES if lane not in recall]
    out.check(not missing, f"Recall@{k} for {', '.join(LANES)}", f"no Recall@{k} for {missing}: report all three lanes")
    for lane in LANES:
        if lane not in recall:
            continue
        value, truth = _number(recall[lane]), float(run.recall[lane])
        if value is None:
            out.problem(f"{lane} Recall@{k} is {recall[lane]!r}, a {type(recall[lane]).__name__}: store the number")
            continue
        if _close(value, truth, tolerance):
            out.passes.append(f"{lane} Recall@{k} = {truth:.2f}")
            continue
        shown, real = distinct_digits(value, truth)
        out.problem(f"{lane} Recall@{k} is {shown} but the run gives {real}: "
                    f"{_recall_hint(value, run, retriever, lane, tolerance)}", kind=f"wrong Recall@{k}")
    if run.latency is None:
        out.problem("the run measured no latency: call release_gate with measure=True")
        return out.result()
    p50, p95 = run.latency.p50_ms, run.latency.p95_ms
    lacking = [s for s in STAGES if s not in latency_ms]
    out.check(not lacking, f"latency for {', '.join(STAGES)}", f"no latency for stage(s) {lacking}")
    before = len(out.problems)
    for stage in STAGES:
        entry = latency_ms.get(stage)
        if entry is None:
            continue
        for stat, truth in (("p50", p50.get(stage)), ("p95", p95.get(stage))):
            if stat not in entry:
                out.problem(f"stage {stage} has no {stat}: record both p50 and p95", kind="missing percentiles")
                continue
            value = _number(entry[stat])
            if value is None:
                out.problem(f"stage {stage} {stat} is {entry[stat]!r}: store the number of milliseconds")
            elif truth is not None and not math.isclose(value, truth, rel_tol=1e-6, abs_tol=1e-9):
                shown, real = distinct_digits(value, truth, 3)
                other = _number(entry.get("p95" if stat == "p50" else "p50"))
                hint = _latency_hint(stage, stat, value, run.latency.samples.get(stage, ()), run, other)
                out.problem(f"stage {stage} {stat} is {shown} ms but the run measured {real} ms: {hint}",
                            kind=f"wrong {stat}")
        a, b = _number(entry.get("p50")), _number(entry.get("p95"))
        if a is not None and b is not None and a > b:
            out.problem(f"stage {stage}: p50 {a} > p95 {b}, which cannot be")
    if len(out.problems) == before:
        out.passes.append("p50 and p95 match the run's measured stage timings")
    return out.result()
