"""Is one lane really better than another? A paired two-sided randomization test on per-query scores.

Fisher's randomization test, as Smucker, Allan & Carterette (2007), "A
comparison of statistical significance tests for information retrieval
evaluation" (CIKM '07), recommend for IR: two lanes ran the same queries, so
each query gives a pair of scores. Under the null hypothesis the lanes are
interchangeable, so the label of each pair could be swapped, i.e. the sign of
each per-query difference ``d_q = lane_q - baseline_q`` flipped, without
changing anything. The p-value is the share of sign assignments whose mean
difference is at least as far from zero as the observed one (two-sided)::

    p = #{s in S : |Σ_q s_q d_q| >= |Σ_q d_q|} / |S|

With ``n`` queries there are ``2**n`` assignments. When ``2**n`` is at most
the permutation budget the test enumerates them all (exact); otherwise it
draws ``permutations`` random assignments from a seeded generator
(``numpy.random.default_rng(seed)``), so the same inputs always give the same
p-value. Like ranx's ``fisher_randomization_test`` (which ``ranx.compare``
uses with ``stat_test="fisher"``) it divides by the number of permutations.

**Too few queries.** With ``n`` pairs the smallest p-value the two-sided test
can give is ``2 / 2**n`` (the observed signs and their mirror image): 0.25 for
the lesson's 3 positive cases, so no difference there can ever be called
significant. Below :data:`MIN_PAIRED_QUERIES` pairs the lab reports that no test
is meaningful instead of printing a p-value (:func:`too_few_pairs_note`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from labsrc.errors import InvalidArgument

__all__ = [
    "DEFAULT_PERMUTATIONS",
    "DEFAULT_SEED",
    "MAX_PERMUTATIONS",
    "MIN_PAIRED_QUERIES",
    "SIGNIFICANCE_TEST",
    "LaneComparison",
    "SignificanceReport",
    "check_permutations",
    "compare_lanes",
    "lane_significance",
    "paired_differences",
    "randomization_test",
    "smallest_p_value",
    "too_few_pairs_note",
]

#: Random sign assignments drawn when the exact test is too large (ranx's default is 1,000).
DEFAULT_PERMUTATIONS = 10_000
#: The most random sign assignments a test draws: p-values resolve to 1e-6 there, and 10**6 draws over
#: 300 queries take about 5 s per comparison on a 2-core machine; more would only make a run seem to hang.
MAX_PERMUTATIONS = 1_000_000
#: The generator's seed: the same runs always give the same p-values.
DEFAULT_SEED = 42
#: Below this many paired queries the lab prints no p-value (see the module docstring).
MIN_PAIRED_QUERIES = 20
SIGNIFICANCE_TEST = "paired two-sided randomization test (Fisher; Smucker, Allan & Carterette 2007)"

#: Sign assignments scored per matrix product, bounding memory to ~32 MB of float64 signs.
_BATCH_CELLS = 1 << 22


def paired_differences(baseline: Mapping[str, float], lane: Mapping[str, float]) -> tuple[tuple[str, ...], np.ndarray]:
    """Query ids (sorted) and ``lane[q] - baseline[q]`` for each; both must score the same queries."""
    if set(baseline) != set(lane):
        only_base, only_lane = sorted(set(baseline) - set(lane)), sorted(set(lane) - set(baseline))
        raise InvalidArgument(
            f"a paired test needs the same queries on both sides; only in the baseline: {only_base[:3]}, "
            f"only in the lane: {only_lane[:3]}"
        )
    qids = tuple(sorted(baseline))
    return qids, np.array([float(lane[q]) - float(baseline[q]) for q in qids], dtype=np.float64)


def smallest_p_value(pairs: int) -> float:
    """``2 / 2**n``: the smallest p-value the two-sided test can reach with ``n`` pairs (1.0 for n <= 1)."""
    if pairs < 0:
        raise InvalidArgument(f"pairs must be >= 0, not {pairs}")
    return min(1.0, 2.0 / 2.0**pairs)


def check_permutations(permutations: int, name: str = "permutations") -> int:
    """``permutations`` as an int, or :class:`~labsrc.errors.InvalidArgument` naming ``name`` unless
    it is from 1 to :data:`MAX_PERMUTATIONS`."""
    if isinstance(permutations, bool) or not isinstance(permutations, (int, np.integer)) or permutations < 1:
        raise InvalidArgument(f"{name} must be a positive integer, not {permutations!r}")
    if permutations > MAX_PERMUTATIONS:
        raise InvalidArgument(
            f"{name} must be at most {MAX_PERMUTATIONS:,} (p-values resolve to 1e-06 there), not {int(permutations):,}"
        )
    return int(permutations)


def _at_least_as_extreme(sums: np.ndarray, observed: float, slack: float) -> int:
    # Sign flips that are mathematically equal to the observed |sum| may differ in the last bits.
    return int(np.count_nonzero(np.abs(sums) >= observed - slack))


def randomization_test(
    baseline: Sequence[float],
    lane: Sequence[float],
    *,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = DEFAULT_SEED,
) -> float:
    """Two-sided p-value of the paired randomization test (see the module docstring).

    ``baseline`` and ``lane`` are per-query scores in the same query order.
    Exact (all ``2**n`` sign assignments) when ``2**n <= permutations``,
    otherwise Monte Carlo with ``permutations`` seeded draws.
    """
    permutations = check_permutations(permutations)
    a, b = np.asarray(baseline, dtype=np.float64), np.asarray(lane, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise InvalidArgument(f"paired scores must be two 1-D sequences of one length, not {a.shape} and {b.shape}")
    if a.size == 0:
        raise InvalidArgument("a paired test needs at least one query")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise InvalidArgument("paired scores must be finite numbers")
    d = b - a
    n = d.size
    observed = abs(float(d.sum()))
    slack = 1e-9 * float(np.abs(d).sum())
    batch = max(1, _BATCH_CELLS // n)
    count = 0
    if n < 63 and 2**n <= permutations:
        total = 2**n
        bits = np.arange(n, dtype=np.int64)
        for start in range(0, total, batch):
            codes = np.arange(start, min(start + batch, total), dtype=np.int64)
            signs = 1.0 - 2.0 * ((codes[:, None] >> bits) & 1)  # bit q set: flip query q
            count += _at_least_as_extreme(signs @ d, observed, slack)
        return count / total
    rng = np.random.default_rng(seed)
    for start in range(0, permutations, batch):
        size = min(batch, permutations - start)
        signs = 1.0 - 2.0 * rng.integers(0, 2, size=(size, n), dtype=np.int8)
        count += _at_least_as_extreme(signs @ d, observed, slack)
    return count / permutations


@dataclass(frozen=True)
class LaneComparison:
    """One paired test of ``lane`` against ``baseline`` on ``metric``; ``difference`` is lane − baseline."""

    metric: str
    baseline: str
    lane: str
    queries: int
    baseline_mean: float
    lane_mean: float
    difference: float
    p_value: float
    #: Sign assignments scored: ``2**queries`` when exact, else the Monte-Carlo draws.
    permutations: int
    exact: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "lane": self.lane,
            "baseline_mean": self.baseline_mean,
            "lane_mean": self.lane_mean,
            "difference": self.difference,
            "p_value": self.p_value,
            "permutations": self.permutations,
            "exact": self.exact,
        }


def compare_lanes(
    per_query: Mapping[str, Mapping[str, float]],
    metric: str,
    *,
    pairs: Sequence[tuple[str, str]] | None = None,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = DEFAULT_SEED,
) -> tuple[LaneComparison, ...]:
    """Test each ``(baseline, lane)`` pair of ``per_query`` (lane → query id → score).

    ``pairs`` defaults to every pair of lanes, the earlier lane (in mapping
    order) as the baseline. Every test uses the same ``seed``.
    """
    permutations = check_permutations(permutations)
    lanes = list(per_query)
    if pairs is None:
        pairs = [(lanes[i], lanes[j]) for i in range(len(lanes)) for j in range(i + 1, len(lanes))]
    unknown = sorted({name for pair in pairs for name in pair} - set(lanes))
    if unknown:
        raise InvalidArgument(f"unknown lane(s) {unknown} in the pairs; lanes with scores: {lanes}")
    out = []
    for baseline, lane in pairs:
        qids, d = paired_differences(per_query[baseline], per_query[lane])
        base = np.array([float(per_query[baseline][q]) for q in qids])
        other = np.array([float(per_query[lane][q]) for q in qids])
        exact = len(qids) < 63 and 2 ** len(qids) <= permutations
        out.append(
            LaneComparison(
                metric=metric,
                baseline=baseline,
                lane=lane,
                queries=len(qids),
                baseline_mean=float(base.mean()),
                lane_mean=float(other.mean()),
                difference=float(d.mean()),
                p_value=randomization_test(base, other, permutations=permutations, seed=seed),
                permutations=2 ** len(qids) if exact else permutations,
                exact=exact,
            )
        )
    return tuple(out)


def _count(n: int, unit: str) -> str:
    """``1 query``, ``3 queries``, ``3 positive cases``."""
    if n == 1:
        return f"1 {unit}"
    return f"{n} {unit[:-1]}ies" if unit.endswith("y") else f"{n} {unit}s"


def too_few_pairs_note(pairs: int, unit: str = "query", minimum: int = MIN_PAIRED_QUERIES) -> str | None:
    """Why no p-value is printed for ``pairs`` paired scores (``unit`` in the singular), or None when there are enough."""
    if pairs >= minimum:
        return None
    if pairs == 0:
        return f"no significance test: there are no paired {_count(2, unit)[2:]} to compare"
    text = f"no significance test: with {_count(pairs, unit)} none is meaningful (the lab asks for at least {minimum})"
    floor = smallest_p_value(pairs)
    if floor >= 0.01:  # worth saying: no outcome at all could be significant
        text += f"; with {_count(pairs, 'pair')} the smallest two-sided p-value possible is 2/2^{pairs} = {floor:.3g}"
    return text


@dataclass(frozen=True)
class SignificanceReport:
    """The lane comparisons behind a claim, or the reason there are none (``note``)."""

    metric: str
    queries: int
    permutations: int
    seed: int
    comparisons: tuple[LaneComparison, ...] = ()
    note: str | None = None
    test: str = SIGNIFICANCE_TEST

    def to_dict(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "metric": self.metric,
            "queries": self.queries,
            "permutations": self.permutations,
            "seed": self.seed,
            "comparisons": [c.to_dict() for c in self.comparisons],
            "note": self.note,
        }


def lane_significance(
    per_query: Mapping[str, Mapping[str, float]],
    metric: str,
    *,
    pairs: Sequence[tuple[str, str]] | None = None,
    unit: str = "query",
    minimum: int = MIN_PAIRED_QUERIES,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = DEFAULT_SEED,
) -> SignificanceReport:
    """:func:`compare_lanes` when there are at least ``minimum`` paired queries, else only the note why not."""
    permutations = check_permutations(permutations)
    queries = len(next(iter(per_query.values()), {}))
    note = too_few_pairs_note(queries, unit, minimum)
    if note is None and len(per_query) < 2:
        note = "no significance test: only one lane ran, so there is nothing to compare"
    comparisons = () if note else compare_lanes(per_query, metric, pairs=pairs, permutations=permutations, seed=seed)
    return SignificanceReport(
        metric=metric, queries=queries, permutations=permutations, seed=seed, comparisons=comparisons, note=note
    )
