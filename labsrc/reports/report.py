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

from labsrc.errors import InvalidArgument
from labsrc.gate.config import LANES
from labsrc.gate.gates import GateRun
from labsrc.gate.generated import CASES_FILE
from labsrc.gate.verdicts import plural
from labsrc.records.cases import cases_digest
from labsrc.reports.frames import (
    candidates_frame,
    candidates_of,
    cases_frame,
    curve_frame,
    gates_frame,
    latency_frame,
    recall_frame,
    recall_significance,
    reported_lanes,
    significance_lines,
)
from labsrc.reports.html_report import CURVE_FILE, report_html
from labsrc.reports.markdown import report_markdown
from labsrc.reports.traces import compact_trace

__all__ = [
    "CURVE_FILE",
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

# --- records ---------------------------------------------------------------------------


def report_dict(run: GateRun) -> dict[str, Any]:
    """The report.json document (see :data:`REPORT_SCHEMA_VERSION`)."""
    from labsrc.version import __version__

    k = run.config.top_k
    lanes = reported_lanes(run)
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
            entry["recall"] = {lane: o.recall(lane, k) if lane in lanes else None for lane in LANES}
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
            # A lane the retriever did not report is null: not measured, never 0. "curve": Recall@k at each k
            # of recall_at (labsrc.gate.recall_curve), or null.
            "recall": {"k": k, "lanes": {lane: run.recall[lane] if lane in lanes else None for lane in LANES},
                       "curve": None if run.recall_curve is None else run.recall_curve.to_dict()},
            "significance": recall_significance(run).to_dict(),
            "gates": [g.to_dict() for g in run.gates],
            # Lane gates the run did not make (a fused-list-only retriever), each with the reason.
            "omitted_gates": [{"name": name, "reason": reason} for name, reason in run.omitted],
            "cases": cases,
            "latency": latency,
            # The rubric compares it with the cases file it grades: a report of other cases is stale.
            "cases_sha256": cases_digest([o.case for o in run.outcomes]),
        }
    )

def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(_clean(record), ensure_ascii=False, allow_nan=False) + "\n")


def write_report(run: GateRun, out_dir: str | Path) -> dict[str, Path]:
    """Write every report file into ``out_dir`` (created if needed); returns name → path."""
    from labsrc.reports.plots import plot_latency, plot_recall, plot_recall_curves, save_figure

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
                "candidates": candidates_of(o),
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
    recall, latency, curve = recall_frame(run), latency_frame(run), curve_frame(run)
    save_figure(plot_recall(recall, run.config.top_k, thresholds=thresholds), paths["recall.png"])
    save_figure(plot_latency(latency), paths["latency.png"])
    images = {name: paths[name].read_bytes() for name in ("recall.png", "latency.png")}
    if curve is not None:
        paths[CURVE_FILE] = out / CURVE_FILE
        title = f"Permitted Recall@k, {plural(curve.attrs['cases'], 'positive case')}" + (
            f", retriever {run.subject}" if run.subject else "")
        save_figure(plot_recall_curves(curve, title=title, mark_k=run.config.top_k), paths[CURVE_FILE])
        images[CURVE_FILE] = paths[CURVE_FILE].read_bytes()
    else:
        (out / CURVE_FILE).unlink(missing_ok=True)
    html = report_html(
        run, recall=recall, latency=latency, traces=traces, images=images,
        significance=significance_lines(recall_significance(run)),
    )
    paths["report.html"].write_text(html, encoding="utf-8")
    return paths
