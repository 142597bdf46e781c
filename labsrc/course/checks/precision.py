"""Full precision: a score or a timing compared with the run it came from, to the last digit.

A float64 carries about 16 significant digits, and JSON keeps every one of
them (``repr`` round-trips), so a trace copied from a run equals it exactly.
A value that differs is either rounded (it equals the run's value rounded to
some number of decimals, which :func:`rounded_decimals` finds) or from
another run; each is named as what it is. Rounding is not cosmetic: RRF gives
``1/61 = 0.016393...`` and ``1/62 = 0.016129...``, both ``0.02`` at two
decimals, so a rounded trace hides the tie that decides a fused list.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from labsrc.course.checks.result import Collector
from labsrc.evaluation.budgets import STAGES
from labsrc.gate.config import LANES
from labsrc.gate.outcomes import CaseOutcome

__all__ = [
    "ROUNDED_DECIMALS",
    "SCORE_KEYS",
    "TIE_NOTE",
    "UNIT_RATIO_TOLERANCE",
    "check_trace_scores",
    "check_trace_timings",
    "lane_score",
    "rounded_decimals",
    "timing_scale",
]

#: The decimals a value rounded to fewer of is caught at (a float64 score or duration carries ~16 significant digits).
ROUNDED_DECIMALS = range(0, 12)


def rounded_decimals(value: Any, truth: float) -> int | None:
    """The fewest decimals ``d`` with ``value == round(truth, d)`` when ``value`` is ``truth`` rounded, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value == truth:
        return None
    return next((d for d in ROUNDED_DECIMALS if value == round(truth, d)), None)


def lane_score(outcome: CaseOutcome, chunk_id: str, lane: str) -> float | None:
    ids, scores = outcome.ids.get(lane, ()), outcome.scores.get(lane, ())
    return scores[ids.index(chunk_id)] if chunk_id in ids and len(scores) == len(ids) else None


#: Candidate keys that hold a lane's score, and the lane: ``bm25_score``, ``dense_score``, ``hybrid_score``, ``rrf_score``.
SCORE_KEYS = {**{f"{lane}_score": lane for lane in LANES}, "rrf_score": "hybrid"}

#: Why a rounded score is wrong, in the words of exercise 5.
TIE_NOTE = "rounding to 2 decimals turns 1/61 and 1/62 into the same 0.02 and hides the tie the notebook teaches"


def check_trace_scores(out: Collector, label: str, trace: Mapping[str, Any], outcome: CaseOutcome) -> int:
    """Every score in the trace against the run's, at full precision; returns how many were compared."""
    compared = 0
    candidates = trace.get("candidates")
    shown: dict[tuple[str, Any], list[tuple[str, float]]] = {}
    for entry in candidates if isinstance(candidates, list) else ():
        if not isinstance(entry, Mapping) or not isinstance(entry.get("chunk_id"), str):
            continue
        chunk_id = entry["chunk_id"]
        for key in (k for k in entry if isinstance(k, str) and k.endswith("score")):
            lane = SCORE_KEYS.get(key)
            value = entry[key]
            if lane is None:
                out.problem(f"{label}: candidate {chunk_id} has {key!r}, which names no lane: a score key is one of "
                            f"{sorted(SCORE_KEYS)}", kind="scores of no lane")
                continue
            truth = lane_score(outcome, chunk_id, lane)
            compared += truth is not None
            if truth is None:
                if value is not None:
                    out.problem(f"{label}: candidate {chunk_id} {key} is {value!r}, but the {lane} lane did not "
                                "return it: store None", kind="scores of chunks a lane did not return")
                continue
            shown.setdefault((key, value), []).append((chunk_id, truth))
            places = rounded_decimals(value, truth)
            if places is not None:
                out.problem(f"{label}: candidate {chunk_id} {key} is {value!r}, the run's {truth!r} rounded to "
                            f"{places} decimals: store the full float; {TIE_NOTE}", kind="rounded scores")
            elif isinstance(value, bool) or not isinstance(value, (int, float)):
                out.problem(f"{label}: candidate {chunk_id} {key} is {value!r}: store the run's score, a float "
                            f"({truth!r})", kind="scores that are not numbers")
            elif value != truth:
                out.problem(f"{label}: candidate {chunk_id} {key} is {value!r}, the run has {truth!r}: copy the score "
                            f"from the run (o.scores[{lane!r}])", kind="scores that differ from the run")
    for (key, value), holders in shown.items():
        truths = sorted({t for _, t in holders})
        if len(truths) > 1:
            ids = sorted(cid for cid, _ in holders)
            out.problem(f"{label}: rounding made {ids} tie at {key} {value!r}, where the run has "
                        f"{', '.join(repr(t) for t in truths)}", kind="ties made by rounding")
    scores = trace.get("scores")
    if isinstance(scores, Mapping):
        for lane, values in scores.items():
            truth = outcome.scores.get(lane)
            compared += 1
            if truth is None or not isinstance(values, (list, tuple)):
                out.problem(f"{label}: scores[{lane!r}] names no lane of the run, or is not a list", kind="scores of no lane")
            elif list(values) != list(truth):
                places = {rounded_decimals(v, t) for v, t in zip(values, truth)} - {None}
                how = (f"rounded to {min(places)} decimals: store the full floats; {TIE_NOTE}" if places and
                       len(values) == len(truth) else "copy o.scores as the run has it")
                out.problem(f"{label}: scores[{lane!r}] {list(values)} differ from the run's {list(truth)}: {how}",
                            kind="scores that differ from the run")
    return compared


#: How far (relative) each timing's ratio to the run's may be from 1000 or 1/1000 for :func:`timing_scale`.
UNIT_RATIO_TOLERANCE = 0.01


def timing_scale(timings: Mapping[str, float], truth: Mapping[str, float]) -> float | None:
    """``1000`` or ``1 / 1000`` when ``timings`` are the run's ``truth`` in another unit, uniformly; else None.

    Uniform means: every stage both time is compared, at least one of the trace's timings is nonzero, each
    nonzero timing ``t`` of a stage the run timed as ``r`` has ``|t / r - s| <= UNIT_RATIO_TOLERANCE * s`` for
    one scale ``s`` (1/1000: seconds stored for milliseconds; 1000: microseconds), and each zero timing is a
    stage the run timed as zero too. The 1% absorbs a value rounded after the division (0.000123 for
    0.12345 ms), and nothing else: a new search's timings differ stage by stage by far more.
    """
    pairs = [(timings[stage], truth[stage]) for stage in timings if stage in truth]
    if not any(t != 0 for t, _ in pairs):
        return None
    for scale in (1 / 1000, 1000.0):
        if all((t == 0 and r == 0) or (t != 0 and r != 0 and abs(t / r - scale) <= UNIT_RATIO_TOLERANCE * scale)
               for t, r in pairs):
            return scale
    return None


def check_trace_timings(out: Collector, label: str, trace: Mapping[str, Any], outcome: CaseOutcome, same_run: bool) -> str:
    """The stage timings against the run's (``same_run``) or for full precision; returns what was verified.

    Timings that are the run's in another unit at every stage (:func:`timing_scale`: seconds or
    microseconds for milliseconds) are one problem naming the unit, not one per stage.
    """
    timings = trace.get("timings_ms")
    if not isinstance(timings, Mapping):
        if "timings_ms" in trace:
            out.problem(f"{label}: timings_ms is {timings!r}: a dict of stage → milliseconds (o.trace.timings_ms)")
        return ""
    absent = [s for s in STAGES if s not in timings]
    if absent:
        out.problem(f"{label}: timings_ms lack {absent}")
    numbers: dict[str, float] = {}
    for stage, ms in timings.items():
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not math.isfinite(ms):
            out.problem(f"{label}: timings_ms[{stage!r}] is {ms!r}: store the stage's duration in "
                        "milliseconds as a number (o.trace.timings_ms)", kind="timings that are not numbers")
        elif ms < 0:
            out.problem(f"{label}: timings_ms[{stage!r}] is {ms!r}: a duration cannot be negative; "
                        "copy the run's o.trace.timings_ms", kind="negative timings")
        else:
            numbers[stage] = ms
    truth = outcome.trace.timings_ms
    scale = timing_scale(numbers, truth) if same_run else None
    if scale is not None:
        stage = next(s for s in numbers if s in truth and numbers[s] != 0)
        unit, fix = ("seconds", "multiply by 1000") if scale < 1 else ("microseconds", "divide by 1000")
        out.problem(f"{label}: timings_ms are 1000 times {'smaller' if scale < 1 else 'larger'} than the run's at every "
                    f"stage (timings_ms[{stage!r}] is {numbers[stage]!r}, the run has {truth[stage]!r}): {unit}, not "
                    f"milliseconds; {fix}, or copy o.trace.timings_ms as it is", kind=f"timings in {unit}")
        return ""
    if same_run:
        for stage, ms in numbers.items():
            if stage not in truth or ms == truth[stage]:
                continue
            places = rounded_decimals(ms, truth[stage])
            if places is not None:
                out.problem(f"{label}: timings_ms[{stage!r}] is {ms!r}, the run's {truth[stage]!r} rounded to {places} "
                            "decimals: copy o.trace.timings_ms as it is", kind="rounded timings")
            else:
                out.problem(f"{label}: timings_ms[{stage!r}] is {ms!r}, the run has {truth[stage]!r}: take the timings "
                            "of the failed run's trace (o.trace.timings_ms), not of a new search",
                            kind="timings of another run")
        return f"timings_ms for {', '.join(numbers)} equal the run's to the last digit" if numbers else ""
    # Another run's timings cannot equal this one's; a rounded copy still shows: every stage a whole number of 1/10,000 ms.
    places = [next((d for d in range(0, 5) if ms == round(ms, d)), None) for ms in numbers.values()]
    if len(numbers) >= 2 and all(p is not None for p in places):
        out.problem(f"{label}: timings_ms {dict(numbers)} are rounded to {max(places)} decimals: store the measured "
                    "milliseconds at full precision", kind="rounded timings")
    return f"timings_ms for {', '.join(numbers)} at full precision" if numbers else ""
