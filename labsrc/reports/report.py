"""Release reports: the same gate run as DataFrames, JSON, Markdown, plots and JSONL.

:func:`write_report` turns a :class:`~labsrc.gate.gates.GateRun` into a folder:

========================  ===========================================================
``report.html``           one self-contained page: verdict, gates, recall, latency, failed traces
``report.json``           versioned, stable schema: config, versions, gates, cases, latency
``report.md``             a human summary with the gate table
``recall.png``            Recall@k per lane, per positive case and on average
``latency.png``           p50 / p95 per stage against the budget lines
``failed_traces.jsonl``   one compact trace per failed case (ids, lane ranks, versions, timings)
``candidates.jsonl``      per case, the fused top candidates with lane ranks and scores
========================  ===========================================================

Nothing here ever reads ``chunk.text``: reports carry ids, ranks, scores,
versions and timings only, so they can be shared without leaking a policy.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from labsrc.errors import InvalidArgument
from labsrc.gate.config import LANES
from labsrc.gate.gates import GATE_TABLE, CaseOutcome, GateRun
from labsrc.gate.generated import CASES_FILE
from labsrc.reports.html_report import dense_model_label, report_html
from labsrc.evaluation.significance import SignificanceReport, lane_significance
from labsrc.reports.traces import compact_trace
from labsrc.gate.verdicts import plural
from labsrc.records.cases import cases_digest

__all__ = [
    "REPORT_FILES",
    "REPORT_SCHEMA",
    "REPORT_SCHEMA_VERSION",
    "candidates_frame",
    "cases_frame",
    "compact_trace",
    "gates_frame",
    "latency_frame",
    "recall_frame",
    "recall_significance",
    "report_dict",
    "report_markdown",
    "significance_lines",
    "write_report",
]

#: What each build of the retriever printed (its stdout and stderr, captured per build), beside the report.
OUTPUT_FILE = "retriever_output.txt"

REPORT_SCHEMA = "labsrc.release-report"
#: Bump when a key of report.json is renamed, removed or changes meaning.
REPORT_SCHEMA_VERSION = 1

REPORT_FILES = (
    "report.html",
    "report.json",
    "report.md",
    "recall.png",
    "latency.png",
    "failed_traces.jsonl",
    "candidates.jsonl",
)


def _clean(value: Any) -> Any:
    """JSON-safe copy: NaN → None, tuples → lists, mappings → dicts."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalars
        return _clean(value.item())
    return value


# --- DataFrames ----------------------------------------------------------------------


def cases_frame(run: GateRun) -> pd.DataFrame:
    """One row per case: kind, caller, verdict, each lane's ids and Recall@k, leaks."""
    k = run.config.top_k
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
        for lane in LANES:
            row[f"recall@{k}_{lane}"] = o.recall(lane, k) if o.case.kind == "positive" else float("nan")
        row["expected"] = list(o.case.expected)
        row["forbidden"] = list(o.case.forbidden)
        row["leaked"] = list(o.leaked()) if o.case.kind != "absent" else list(o.overreach())
        rows.append(row)
    return pd.DataFrame(rows)


def recall_frame(run: GateRun) -> pd.DataFrame:
    """Recall@k per positive case (rows, in case order) and lane (columns)."""
    k = run.config.top_k
    positives = [o for o in run.outcomes if o.case.kind == "positive"]
    frame = pd.DataFrame(
        [[o.recall(lane, k) for lane in LANES] for o in positives],
        index=pd.Index([o.case.name for o in positives], name="case"),
        columns=list(LANES),
        dtype=float,
    )
    frame.attrs["k"] = k
    return frame


def recall_significance(run: GateRun) -> SignificanceReport:
    """The hybrid against each lane on per-case Recall@k, with a paired randomization test.

    Only with enough positive cases
    (:data:`~labsrc.evaluation.significance.MIN_PAIRED_QUERIES`); below that,
    and so on the lesson's 3, the report says that no test is meaningful.
    """
    frame = recall_frame(run)
    per_case = {lane: dict(zip(frame.index, frame[lane].tolist())) for lane in LANES}
    pairs = [(lane, "hybrid") for lane in LANES if lane != "hybrid"]
    return lane_significance(per_case, f"recall@{run.config.top_k}", pairs=pairs, unit="positive case")


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
        rows.append(
            {
                "gate": g.name,
                "status": g.status,
                "passed": g.passed,
                "detail": g.detail,
                "failing": ", ".join(g.failing_cases or g.failing_stages),
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


def _candidates(o: CaseOutcome) -> list[dict[str, Any]]:
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
    rows = [{"case": o.case.name, **row} for o in run.outcomes for row in _candidates(o)]
    frame = pd.DataFrame(rows, columns=columns)
    for lane in ("bm25", "dense"):
        frame[f"{lane}_rank"] = frame[f"{lane}_rank"].astype("Int64")  # nullable: absent from a lane
    return frame


# --- records ---------------------------------------------------------------------------


def report_dict(run: GateRun) -> dict[str, Any]:
    """The report.json document (see :data:`REPORT_SCHEMA_VERSION`)."""
    from labsrc.version import __version__

    k = run.config.top_k
    cases = []
    for o in run.outcomes:
        entry: dict[str, Any] = {
            "name": o.case.name,
            "kind": o.case.kind,
            "caller": o.case.caller,
            "query": o.case.query,
            "on_date": (o.case.on_date or run.on_date).isoformat(),
            "passed": o.passed,
            "expected": list(o.case.expected),
            "forbidden": list(o.case.forbidden),
            "ids": {lane: list(o.ids[lane]) for lane in LANES},
            "returned": list(o.returned),
        }
        if o.case.kind == "positive":
            entry["recall"] = {lane: o.recall(lane, k) for lane in LANES}
        else:
            entry["leaked"] = list(o.leaked()) if o.case.kind != "absent" else list(o.overreach())
        entry["lanes_reported"] = o.lanes_reported
        entry["error"] = o.error
        entry["hidden_returned"] = [v.to_dict() for v in o.violations]
        entry["rebuild"] = None if o.rebuild is None else o.rebuild.to_dict()
        entry["bait"] = None if o.bait is None else o.bait.to_dict()
        entry["concurrency"] = None if o.concurrency is None else o.concurrency.to_dict()
        cases.append(entry)
    latency = None
    if run.latency is not None:
        latency = run.latency.to_dict(run.config.p50_budget_ms, run.config.p95_budget_ms)
    return _clean(
        {
            "schema": REPORT_SCHEMA,
            "schema_version": REPORT_SCHEMA_VERSION,
            "generator": f"labsrc {__version__}",
            "passed": run.passed,
            "on_date": run.on_date.isoformat(),
            "subject": run.subject,
            "noninterference": run.noninterference,
            # The canary, repeat and concurrency probes, and how many builds (worker processes) the run made.
            "probes": None if run.probes is None else run.probes.to_dict(),
            "config": run.config.to_dict(),
            "versions": {**dict(run.versions), "dense_model": dict(run.dense_model)},
            "recall": {"k": k, "lanes": dict(run.recall)},
            "significance": recall_significance(run).to_dict(),
            "gates": [g.to_dict() for g in run.gates],
            "cases": cases,
            "latency": latency,
            # The rubric compares it with the cases file it grades: a report of other cases is stale.
            "cases_sha256": cases_digest([o.case for o in run.outcomes]),
        }
    )


def _md_table(frame: pd.DataFrame) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return "—" if math.isnan(value) else f"{value:.3f}"
        if isinstance(value, list):
            return ", ".join(value) or "—"
        if isinstance(value, bool):
            return "PASS" if value else "FAIL"
        text = str(value).replace("|", "\\|")
        return text or "—"

    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def _gate_count(run: GateRun) -> str:
    tested = [g for g in run.gates if g.tested]
    untested = len(run.gates) - len(tested)
    noun = "tested gate" if untested else "gate"
    text = f"{sum(g.passed for g in tested)} of {plural(len(tested), noun)} pass"
    return text + (f", {plural(untested, 'gate')} NOT TESTED" if untested else "")


def report_markdown(run: GateRun) -> str:
    """A short human summary: verdict, versions, recall, gates, failed cases, latency."""
    k = run.config.top_k
    lines = [
        "# Release gate report",
        "",
        f"**{'PASS' if run.passed else 'FAIL'}**: {_gate_count(run)} "
        + (f"for retriever `{run.subject}` " if run.subject else "")
        + f"on {run.on_date.isoformat()} (top_k {k}, rrf_k {run.config.to_dict()['rrf_k']}, "
        f"hybrid rule {run.config.hybrid_rule!r}).",
        "",
        "## Versions",
        "",
        *[f"- {name}: `{value}`" for name, value in run.versions.items()],
    ]
    if run.dense_model:
        lines.append(f"- dense model: `{dense_model_label(run.dense_model)}`")
    lines += ["", f"## Permitted Recall@{k}", "", "| lane | recall |", "|---|---|"]
    lines += [f"| {lane} | {run.recall[lane]:.2f} |" for lane in LANES]
    lines += ["", *significance_lines(recall_significance(run))]
    lines += ["", "![recall](recall.png)", "", "## Gates", ""]
    lines.append(_md_table(gates_frame(run)[["gate", "status", "detail", "failing", "what a failure means"]]))
    findings = [(g.name, line) for g in run.gates if not g.passed for line in g.findings]
    if findings:
        lines += ["", "### Findings", ""]
        lines += [f"- **{name}**: {line}" for name, line in findings]
    failed = run.failed_outcomes
    lines += ["", "## Failed cases", ""]
    if failed:
        lines += [f"- `{o.case.name}` ({o.case.kind}): see failed_traces.jsonl" for o in failed]
    else:
        lines.append("None.")
    lines += ["", "## Cases", ""]
    frame = cases_frame(run)[["case", "kind", "caller", "passed", "hybrid_ids", "leaked"]]
    lines.append(_md_table(frame))
    lines += ["", "## Latency", ""]
    if run.latency is None:
        lines.append("Not measured.")
    else:
        lines.append(
            f"{run.latency.requests} timed requests after {run.latency.warmup} warm-up "
            f"round(s) of the case set; {run.latency.repetitions} timed round(s)."
        )
        lines += ["", _md_table(latency_frame(run)), "", "![latency](latency.png)"]
    return "\n".join(lines) + "\n"


def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(_clean(record), ensure_ascii=False, allow_nan=False) + "\n")


def write_report(run: GateRun, out_dir: str | Path) -> dict[str, Path]:
    """Write every report file into ``out_dir`` (created if needed); returns name → path."""
    from labsrc.reports.plots import plot_latency, plot_recall, save_figure

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InvalidArgument(f"report output {out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / name for name in REPORT_FILES}
    paths["report.json"].write_text(
        json.dumps(report_dict(run), indent=2, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8"
    )
    paths["report.md"].write_text(report_markdown(run), encoding="utf-8")
    traces = [compact_trace(o, run) for o in run.failed_outcomes]
    _write_jsonl(paths["failed_traces.jsonl"], traces)
    _write_jsonl(
        paths["candidates.jsonl"],
        [
            {
                "case": o.case.name,
                "kind": o.case.kind,
                "caller": o.case.caller,
                "query": o.case.query,
                "on_date": (o.case.on_date or run.on_date).isoformat(),
                "candidates": _candidates(o),
            }
            for o in run.outcomes
        ],
    )
    # The cases the generated probes hand back, queries included (a hidden chunk's words are never printed in a
    # report, so this is where a team finds them); a file left by an earlier run would hand back stale cases.
    generated = run.probes.generated if run.probes is not None else None
    handed = generated.cases_to_add() if generated is not None else []
    if handed:
        paths[CASES_FILE] = out / CASES_FILE
        _write_jsonl(paths[CASES_FILE], handed)
    else:
        (out / CASES_FILE).unlink(missing_ok=True)
    printed = run.probes.output if run.probes is not None else ()
    if printed:
        paths[OUTPUT_FILE] = out / OUTPUT_FILE
        paths[OUTPUT_FILE].write_text("".join(f"--- build {what!r} ---\n{text.rstrip()}\n" for what, text in printed),
                                      encoding="utf-8")
    else:
        (out / OUTPUT_FILE).unlink(missing_ok=True)
    thresholds = {lane: run.config.min_recall[lane] for lane in run.config.min_recall}
    recall, latency = recall_frame(run), latency_frame(run)
    save_figure(plot_recall(recall, run.config.top_k, thresholds=thresholds), paths["recall.png"])
    save_figure(plot_latency(latency), paths["latency.png"])
    images = {name: paths[name].read_bytes() for name in ("recall.png", "latency.png")}
    html = report_html(
        run, recall=recall, latency=latency, traces=traces, images=images,
        significance=significance_lines(recall_significance(run)),
    )
    paths["report.html"].write_text(html, encoding="utf-8")
    return paths
