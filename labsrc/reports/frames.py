"""A gate run as DataFrames and the lines every report format shares: the cases, recall, gates, latency.

:mod:`~labsrc.reports.report` (JSON, files), :mod:`~labsrc.reports.markdown`,
:mod:`~labsrc.reports.html_report` and ``labsrc gate``'s printed table read a run
through these, so each format says the same thing, and only what was measured: a
lane the retriever did not report has no recall column, no significance test and
no gate (:mod:`~labsrc.gate.lane_rules`).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from labsrc.evaluation.significance import DEFAULT_PERMUTATIONS, DEFAULT_SEED, SignificanceReport, lane_significance
from labsrc.gate.config import LANES
from labsrc.gate.gates import GATE_TABLE, CaseOutcome, GateRun
from labsrc.gate.lane_rules import measured_lanes
from labsrc.gate.verdicts import plural

__all__ = ["candidates_frame", "candidates_of", "cases_frame", "curve_frame", "curve_lines", "gates_frame",
           "lane_note", "latency_frame", "omitted_lines", "recall_frame", "recall_significance", "reported_lanes",
           "significance_lines", "untested_reasons"]


def cases_frame(run: GateRun) -> pd.DataFrame:
    """One row per case: kind, caller, verdict, each lane's ids and Recall@k, leaks."""
    k = run.config.top_k
    lanes = reported_lanes(run)
    rows = []
    for o in run.outcomes:
        row: dict[str, Any] = {
            "case": o.case.name,
            "kind": o.case.kind,
            "caller": o.case.caller,
            "on_date": (o.case.on_date or run.on_date).isoformat(),
            "passed": o.passed,
        }
        for lane in LANES:
            row[f"{lane}_ids"] = list(o.ids[lane])
        for lane in LANES:  # a lane the retriever did not report was not measured: NaN, never 0
            measured = o.case.kind == "positive" and lane in lanes
            row[f"recall@{k}_{lane}"] = o.recall(lane, k) if measured else float("nan")
        row["expected"] = list(o.case.expected)
        row["forbidden"] = list(o.case.forbidden)
        row["leaked"] = list(o.leaked()) if o.case.kind != "absent" else list(o.overreach())
        rows.append(row)
    columns = ["case", "kind", "caller", "on_date", "passed", *(f"{lane}_ids" for lane in LANES),
               *(f"recall@{k}_{lane}" for lane in LANES), "expected", "forbidden", "leaked"]
    return pd.DataFrame(rows, columns=columns)


def reported_lanes(run: GateRun) -> tuple[str, ...]:
    """The lanes the run measured (:func:`~labsrc.gate.lane_rules.measured_lanes`)."""
    return measured_lanes(run.outcomes)


def lane_note(run: GateRun, lane: str) -> str | None:
    """Why ``lane`` has no measured recall in ``run`` (``None`` when it has one): the words every report prints."""
    if lane in reported_lanes(run):
        return None
    return "not measured (no case was asked)" if not run.outcomes else "not reported (fused list only)"


def recall_frame(run: GateRun) -> pd.DataFrame:
    """Recall@k per positive case (rows, in case order) and lane (columns: the lanes the retriever reported)."""
    k = run.config.top_k
    lanes = reported_lanes(run)
    positives = [o for o in run.outcomes if o.case.kind == "positive"]
    frame = pd.DataFrame(
        [[o.recall(lane, k) for lane in lanes] for o in positives],
        index=pd.Index([o.case.name for o in positives], name="case"),
        columns=list(lanes),
        dtype=float,
    )
    frame.attrs["k"] = k
    return frame


def recall_significance(run: GateRun) -> SignificanceReport:
    """The hybrid against each lane on per-case Recall@k, with a paired randomization test.

    Only with enough positive cases
    (:data:`~labsrc.evaluation.significance.MIN_PAIRED_QUERIES`); below that,
    and so on the lesson's 3, the report says that no test is meaningful. A retriever
    that returns only its fused list has no lane to test the hybrid against: the note says so.
    """
    frame = recall_frame(run)
    metric = f"recall@{run.config.top_k}"
    if list(frame.columns) == ["hybrid"]:
        return SignificanceReport(metric, len(frame), DEFAULT_PERMUTATIONS, DEFAULT_SEED,
                                  note="no significance test: the retriever returns only its fused list, so there is "
                                       "no lane to compare it with")
    per_case = {lane: dict(zip(frame.index, frame[lane].tolist())) for lane in frame.columns}
    pairs = [(lane, "hybrid") for lane in frame.columns if lane != "hybrid"]
    return lane_significance(per_case, metric, pairs=pairs, unit="positive case")


def curve_frame(run: GateRun) -> pd.DataFrame | None:
    """Mean permitted Recall@k per lane (columns) at each k of the run's ``recall_at`` (index), or None.

    ``attrs`` holds ``top_k``, ``cases`` (the positive cases every point averages) and ``errors``.
    """
    curve = run.recall_curve
    if curve is None:
        return None
    frame = pd.DataFrame(curve.means(), index=pd.Index(curve.ks, name="k"), columns=list(curve.lanes), dtype=float)
    frame.attrs.update(top_k=curve.top_k, cases=curve.cases, errors=list(curve.errors))
    return frame


def curve_lines(run: GateRun) -> list[str]:
    """The curve as text: a header of k, one row per lane, and who was left out (nothing without ``recall_at``)."""
    frame = curve_frame(run)
    if frame is None:
        return []
    ks = "".join(f"{f'@{k}':>7}" for k in frame.index)
    lines = [f"Recall@k over {plural(frame.attrs['cases'], 'positive case')}", f"{'lane':<8}{ks}"]
    lines += [f"{lane:<8}" + "".join(f"{v:>7.2f}" for v in frame[lane]) for lane in frame.columns]
    lines += [f"  {line}" for line in frame.attrs["errors"]]
    return lines


def omitted_lines(run: GateRun) -> list[str]:
    """One line per reason lane gates were not made, naming them (nothing when every gate was made)."""
    by_reason: dict[str, list[str]] = {}
    for name, reason in run.omitted:
        by_reason.setdefault(reason, []).append(name)
    return [f"not made: {', '.join(names)} ({reason})" for reason, names in by_reason.items()]


def untested_reasons(run: GateRun) -> list[str]:
    """Each NOT TESTED gate with its own reason: ``"recall@2 bm25: no positive cases to replay; ..."``."""
    return [f"{g.name}: {g.detail.removeprefix('not tested: ')}" for g in run.untested_gates]


def significance_lines(report: SignificanceReport) -> list[str]:
    """The report's words on significance: the reason there is no test, or one line per comparison."""
    if report.note:
        return [report.note + "."]
    return [
        f"{c.lane} vs {c.baseline}: mean {report.metric} {c.lane_mean:.2f} vs {c.baseline_mean:.2f} "
        f"(difference {c.difference:+.2f}), p = {c.p_value:.4f} over {report.queries} positive cases "
        f"({report.test}, {c.permutations} permutations, seed {report.seed})"
        for c in report.comparisons
    ]


def gates_frame(run: GateRun) -> pd.DataFrame:
    """One row per gate: verdict, detail, failing cases/stages, and what it freezes and means."""
    rows = []
    for g in run.gates:
        freeze, meaning = GATE_TABLE.get(g.family, ("", ""))
        failing = ", ".join(g.failing_cases or g.failing_stages)
        if not failing and not g.passed:  # a failure always says where to look
            failing = f"{plural(len(g.findings), 'finding')} (listed below)" if g.findings else g.detail
        rows.append(
            {
                "gate": g.name,
                "status": g.status,
                "passed": g.passed,
                "detail": g.detail,
                "failing": failing,
                "what to freeze": freeze,
                "what a failure means": meaning,
            }
        )
    return pd.DataFrame(rows)


def latency_frame(run: GateRun) -> pd.DataFrame:
    """p50/p95/mean/max per stage with budgets and verdicts (empty if latency was not measured)."""
    if run.latency is None:
        return pd.DataFrame(columns=["stage", "p50_ms", "p95_ms", "p50_budget_ms", "p95_budget_ms", "within_budget"])
    return run.latency.to_frame(run.config.p50_budget_ms, run.config.p95_budget_ms)


def candidates_of(o: CaseOutcome) -> list[dict[str, Any]]:
    out = []
    for rank, (chunk_id, score) in enumerate(zip(o.ids["hybrid"], o.scores.get("hybrid", ())), start=1):
        row: dict[str, Any] = {"rank": rank, "chunk_id": chunk_id, "rrf_score": score}
        for lane in ("bm25", "dense"):
            lane_rank = o.lane_rank(chunk_id, lane)
            row[f"{lane}_rank"] = lane_rank
            row[f"{lane}_score"] = None if lane_rank is None else o.scores[lane][lane_rank - 1]
        out.append(row)
    return out


def candidates_frame(run: GateRun) -> pd.DataFrame:
    """Per case, the fused top-k candidates: rank (1-based), RRF score, and each lane's rank and score."""
    columns = ["case", "rank", "chunk_id", "rrf_score", "bm25_rank", "bm25_score", "dense_rank", "dense_score"]
    rows = [{"case": o.case.name, **row} for o in run.outcomes for row in candidates_of(o)]
    frame = pd.DataFrame(rows, columns=columns)
    for lane in ("bm25", "dense"):
        frame[f"{lane}_rank"] = frame[f"{lane}_rank"].astype("Int64")  # nullable: absent from a lane
    return frame
