"""The BEIR benchmark: tune convex fusion on train, score every lane on test, write TREC runs.

``labsrc beir`` is a thin shell over :func:`run_benchmark`. Metrics come from
:func:`~labsrc.evaluation.metrics.evaluate_run` (checked against ranx in the tests).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

from labsrc.datasets.beir import Qrels, Run, load_beir
from labsrc.errors import InvalidArgument
from labsrc.evaluation.beir_lanes import BeirLanes, convex_run, rrf_run
from labsrc.evaluation.latency import Progress
from labsrc.evaluation.metrics import evaluate_run
from labsrc.evaluation.significance import (
    DEFAULT_PERMUTATIONS,
    DEFAULT_SEED,
    SignificanceReport,
    check_permutations,
    lane_significance,
)
from labsrc.fusion.convex import check_alpha
from labsrc.fusion.rrf import DEFAULT_RRF_K, check_rrf_k
from labsrc.lanes.vectordir import load_vector_dir
from labsrc.records.files import atomic_write_bytes
from labsrc.ranking import check_top_k

__all__ = [
    "ALPHA_GRID",
    "BEIR_LANES",
    "CURVE_KS",
    "DEFAULT_ALPHA",
    "REPORT_METRICS",
    "SIGNIFICANCE_METRIC",
    "AlphaSweep",
    "BenchmarkResult",
    "evaluate_lanes",
    "lane_comparison",
    "load_lanes",
    "recall_curves",
    "run_benchmark",
    "trec_scores",
    "tune_alpha",
    "write_trec_run",
]

#: The lanes ``labsrc beir`` can run, in report order.
BEIR_LANES = ("bm25", "dense", "rrf", "convex")
#: The metrics every report shows (BEIR's headline nDCG@10 plus recall and MRR).
REPORT_METRICS = ("ndcg@10", "recall@100", "mrr@10")
#: The metric the lane comparison tests (BEIR's headline).
SIGNIFICANCE_METRIC = "ndcg@10"
#: Convex fusion's alpha grid: 0.0, 0.05, ..., 1.0 (rounded so 0.15 prints as 0.15).
ALPHA_GRID = tuple(round(i * 0.05, 2) for i in range(21))
#: The alpha used when there is no train split to tune on.
DEFAULT_ALPHA = 0.5

@dataclass(frozen=True)
class AlphaSweep:
    """The result of tuning convex fusion's alpha on one split."""

    alpha: float
    metric: str
    split: str
    #: ``(alpha, metric value)`` for every grid point, in grid order.
    values: tuple[tuple[float, float], ...]


def tune_alpha(
    bm25: Run,
    dense: Run,
    qrels: Qrels,
    depth: int,
    *,
    grid: Sequence[float] = ALPHA_GRID,
    metric: str = "ndcg@10",
    split: str = "train",
) -> AlphaSweep:
    """The grid alpha that maximises ``metric`` of :func:`convex_run` on ``qrels``.

    Ties go to the smaller alpha (the first maximum in grid order). Pass the
    *train* split's runs and qrels; choosing alpha on the split you report
    overstates the result.
    """
    if not grid:
        raise InvalidArgument("the alpha grid is empty")
    values = []
    for alpha in grid:
        run = convex_run(bm25, dense, alpha, depth)
        values.append((float(alpha), float(evaluate_run(run, qrels, [metric])[metric])))
    best = max(values, key=lambda pair: pair[1])  # max keeps the first of equal values
    return AlphaSweep(alpha=best[0], metric=metric, split=split, values=tuple(values))


def evaluate_lanes(
    runs: Mapping[str, Run], qrels: Qrels, metrics: Sequence[str] = REPORT_METRICS
) -> dict[str, dict[str, float]]:
    """lane → metric → mean over the judged queries (:func:`~labsrc.evaluation.metrics.evaluate_run`)."""
    return {lane: dict(evaluate_run(run, qrels, list(metrics))) for lane, run in runs.items()}


#: The k of a Recall@k curve when none are given (notebook 09's), cut at the run's depth.
CURVE_KS = (1, 2, 3, 5, 10, 20, 30, 50, 75, 100)


def recall_curves(runs: Mapping[str, Run], qrels: Qrels, ks: Sequence[int]) -> pd.DataFrame:
    """Mean Recall@k per lane (columns, in ``runs``' order) at each k (index, ascending) over the judged queries.

    Recall@k = |relevant ∩ top k| / |relevant| (Manning, Raghavan & Schütze 2008, §8.3; trec_eval's
    ``recall_k``), read from each run's ranking, which must be at least ``max(ks)`` deep to mean
    anything at that k: the caller checks the depth it ran at. The frame is what
    :func:`labsrc.reports.plots.plot_recall_curves` draws.
    """
    import pandas as pd

    ks = sorted({check_top_k(k, "k") for k in ks})
    if not ks:
        raise InvalidArgument("recall_curves needs at least one k")
    names = [f"recall@{k}" for k in ks]
    columns = {lane: [evaluate_run(run, qrels, names)[name] for name in names] for lane, run in runs.items()}
    return pd.DataFrame(columns, index=pd.Index(ks, name="k"), dtype=float)


def lane_comparison(
    runs: Mapping[str, Run],
    qrels: Qrels,
    *,
    metric: str = SIGNIFICANCE_METRIC,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = DEFAULT_SEED,
) -> SignificanceReport:
    """Every pair of lanes tested on per-query ``metric`` (:func:`~labsrc.evaluation.significance.lane_significance`).

    The pairs follow the lanes' order, the earlier lane as the baseline (bm25
    first), over every judged query (a query a lane missed scores 0 there).
    """
    per_query = {lane: evaluate_run(run, qrels, [metric], per_query=True)[metric] for lane, run in runs.items()}
    return lane_significance(per_query, metric, unit="judged query", permutations=permutations, seed=seed)


def trec_scores(ranked: Sequence[tuple[str, float]]) -> list[float]:
    """Scores that are *strictly decreasing* in rank order, even as trec_eval reads them, and otherwise unchanged.

    trec_eval (and pytrec_eval, and tools copying it) ignores the rank column: it
    re-sorts each query's lines by score, which it stores as a 32-bit ``float``,
    and breaks exact ties by document id *descending*, the opposite of the lab's
    rule (id ascending). RRF produces many exact ties, so a run file with the true
    scores is scored on a different ranking than the one labsrc evaluated (SciFact
    RRF: 0.7132 nDCG@10 by trec_eval against labsrc's 0.7147).

    So a score whose float32 value does not fall below its predecessor's is
    replaced by the next float32 below that value (one float32 ulp, about 2e-9 for
    an RRF score near 1/61). Every other score is written exactly as computed.
    Float32 order implies float64 order, so trec_eval, pytrec_eval and ranx all
    rank the file exactly as labsrc does.
    """
    out: list[float] = []
    previous = None
    for _, score in ranked:
        value = float(score)
        if previous is not None and np.float32(value) >= previous:
            value = float(np.nextafter(previous, np.float32(-np.inf)))
        previous = np.float32(value)
        out.append(value)
    return out


def write_trec_run(run: Run, path: str | Path, tag: str) -> Path:
    """Write ``qid Q0 docid rank score tag`` lines in the lab's order (score desc, id asc; 1-based ranks).

    Scores are made strictly decreasing in rank order (:func:`trec_scores`), so
    trec_eval, pytrec_eval and ranx, which re-sort by score and break ties their
    own way, rank exactly as labsrc does and reproduce its printed figures.
    Scores are written with ``repr`` so they round-trip exactly. The file is replaced atomically.
    """
    if not tag or any(c.isspace() for c in tag):
        raise InvalidArgument(f"a run tag must be one word, not {tag!r}")
    path = Path(path)
    lines = []
    for qid in sorted(run):
        ranked = sorted(run[qid].items(), key=lambda pair: (-pair[1], pair[0]))
        for rank, ((doc, _), score) in enumerate(zip(ranked, trec_scores(ranked)), start=1):
            lines.append(f"{qid} Q0 {doc} {rank} {score!r} {tag}\n")
    # Atomic: an interrupted run leaves the old file or the whole new one, never half a run.
    return atomic_write_bytes(path, "".join(lines).encode("utf-8"))


# --- the whole benchmark ---------------------------------------------------------------------


@dataclass(frozen=True)
class BenchmarkResult:
    """Runs, metrics and provenance of one ``labsrc beir`` invocation."""

    runs: Mapping[str, Run]
    metrics: Mapping[str, Mapping[str, float]]
    config: Mapping[str, Any]
    versions: Mapping[str, Any]
    sweep: AlphaSweep | None = None
    significance: SignificanceReport | None = None

    def to_json(self) -> dict[str, Any]:
        """``{lane: {metric: value}, ..., "config": {...}, "versions": {...}, "alpha_sweep", "significance"}``."""
        out: dict[str, Any] = {lane: dict(values) for lane, values in self.metrics.items()}
        out["config"] = dict(self.config)
        out["versions"] = dict(self.versions)
        if self.sweep is not None:
            out["alpha_sweep"] = {
                "split": self.sweep.split,
                "metric": self.sweep.metric,
                "chosen": self.sweep.alpha,
                "values": [[alpha, value] for alpha, value in self.sweep.values],
            }
        if self.significance is not None:
            out["significance"] = self.significance.to_dict()
        return out


def _check_lanes(lanes: Sequence[str]) -> tuple[str, ...]:
    unknown = [lane for lane in lanes if lane not in BEIR_LANES]
    if unknown or not lanes:
        raise InvalidArgument(f"unknown lane(s) {unknown}; valid lanes: {', '.join(BEIR_LANES)}")
    return tuple(lane for lane in BEIR_LANES if lane in lanes)


def run_benchmark(
    lanes_source: BeirLanes,
    *,
    split: str = "test",
    lanes: Sequence[str] = BEIR_LANES,
    depth: int = 100,
    rrf_k: float = DEFAULT_RRF_K,
    alpha: float | None = None,
    tune_split: str = "train",
    ignore_identical_ids: bool = False,
    progress: Progress | None = None,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = DEFAULT_SEED,
) -> BenchmarkResult:
    """Run the chosen lanes on ``split``, score them with :data:`REPORT_METRICS`, and test them pairwise.

    ``convex`` uses ``alpha`` when given. Otherwise alpha is tuned on
    ``tune_split`` (train) over :data:`ALPHA_GRID`, maximising nDCG@10, and then
    applied to ``split``; with no ``tune_split`` qrels (or when ``split`` *is*
    the tune split) the fixed :data:`DEFAULT_ALPHA` is used. The test split is
    never used for tuning. Every pair of lanes gets a paired randomization test
    on nDCG@10 (:func:`lane_comparison`, ``permutations`` draws from ``seed``).
    """
    chosen = _check_lanes(lanes)
    depth = check_top_k(depth, "depth")
    permutations = check_permutations(permutations)
    rrf_k = check_rrf_k(rrf_k)
    if alpha is not None:
        alpha = check_alpha(alpha)
    dataset = lanes_source.dataset
    queries = dataset.split_queries(split)
    qrels = dataset.split_qrels(split)
    need_bm25 = bool({"bm25", "rrf", "convex"} & set(chosen))
    need_dense = bool({"dense", "rrf", "convex"} & set(chosen))
    options = {"ignore_identical_ids": ignore_identical_ids, "progress": progress}

    base: dict[str, Run] = {}
    if need_bm25:
        base["bm25"] = lanes_source.bm25_run(queries, depth, **options)
    if need_dense:
        base["dense"] = lanes_source.dense_run(list(queries), depth, **options)
    runs: dict[str, Run] = {lane: base[lane] for lane in ("bm25", "dense") if lane in chosen}
    if "rrf" in chosen:
        runs["rrf"] = rrf_run({"bm25": base["bm25"], "dense": base["dense"]}, depth, rrf_k)

    sweep = None
    alpha_source = None
    if "convex" in chosen:
        if alpha is not None:
            alpha_source = "given"
        elif tune_split in dataset.qrels and tune_split != split:
            tune_queries = dataset.split_queries(tune_split)
            tune_options = {"ignore_identical_ids": ignore_identical_ids, "progress": _relabel(progress, tune_split)}
            sweep = tune_alpha(
                lanes_source.bm25_run(tune_queries, depth, **tune_options),
                lanes_source.dense_run(list(tune_queries), depth, **tune_options),
                dataset.split_qrels(tune_split),
                depth,
                split=tune_split,
            )
            alpha, alpha_source = sweep.alpha, f"tuned on {tune_split} (nDCG@10, grid 0.0-1.0 step 0.05)"
        else:
            alpha, alpha_source = DEFAULT_ALPHA, f"default (no {tune_split} split to tune on)"
        runs["convex"] = convex_run(base["bm25"], base["dense"], alpha, depth)

    config: dict[str, Any] = {
        "collection": dataset.name,
        "data": str(dataset.path),
        "split": split,
        "queries": len(queries),
        "lanes": list(chosen),
        "depth": depth,
        "rrf_k": rrf_k,
        "alpha": alpha,
        "alpha_source": alpha_source,
        "ignore_identical_ids": ignore_identical_ids,
        "k1": lanes_source.index.k1,
        "b": lanes_source.index.b,
    }
    return BenchmarkResult(
        runs=runs,
        metrics=evaluate_lanes(runs, qrels),
        config=config,
        versions=lanes_source.versions(),
        sweep=sweep,
        significance=lane_comparison(runs, qrels, permutations=permutations, seed=seed),
    )


def _relabel(progress: Progress | None, split: str) -> Progress | None:
    if progress is None:
        return None
    return lambda stage, done, total: progress(f"{stage} ({split})", done, total)


def load_lanes(
    path: str | Path,
    *,
    model: str | None = None,
    splits: Sequence[str] | None = None,
) -> BeirLanes:
    """Load a collection and (if present) its vectors, and build both lanes.

    ``model`` names the ``vectors/<model>/`` folder; by default the only one there.
    """
    dataset = load_beir(path, splits=splits)
    vectors_root = dataset.path / "vectors"
    models = sorted(p.name for p in vectors_root.iterdir() if p.is_dir()) if vectors_root.is_dir() else []
    if model is None and len(models) > 1:
        raise InvalidArgument(f"several vector sets in {vectors_root}: {models}; choose one")
    if model is not None and model not in models:
        raise InvalidArgument(f"no vectors/{model} in {dataset.path}; available: {models}")
    name = model or (models[0] if models else None)
    vectors = None
    if name is not None:
        vectors = load_vector_dir(vectors_root / name, corpus_ids=dataset.corpus, queries=dataset.queries)
    return BeirLanes(dataset, vectors)
