"""``report.md``: a short human summary of a gate run, with the gate table."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from labsrc.gate.config import LANES
from labsrc.gate.gates import GateRun
from labsrc.gate.verdicts import plural
from labsrc.reports.frames import (
    cases_frame,
    curve_frame,
    gates_frame,
    lane_note,
    latency_frame,
    omitted_lines,
    recall_significance,
    significance_lines,
    untested_reasons,
)
from labsrc.reports.html_report import CURVE_FILE, dense_model_label

__all__ = ["report_markdown"]


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
    lines += [f"| {lane} | {lane_note(run, lane) or f'{run.recall[lane]:.2f}'} |" for lane in LANES]
    lines += ["", *significance_lines(recall_significance(run))]
    lines += ["", "![recall](recall.png)"]
    curve = curve_frame(run)
    if curve is not None:
        lines += ["", f"### Recall@k at each k ({plural(curve.attrs['cases'], 'positive case')})", ""]
        table = curve.reset_index()
        table["k"] = table["k"].astype(str)
        lines += [_md_table(table), *[f"- {line}" for line in curve.attrs["errors"]], "", f"![recall@k]({CURVE_FILE})"]
    lines += ["", "## Gates", ""]
    lines.append(_md_table(gates_frame(run)[["gate", "status", "detail", "failing", "what a failure means"]]))
    lines += [f"- {line}" for line in omitted_lines(run)]
    untested = untested_reasons(run)
    if untested:
        lines += ["", "NOT TESTED, each for its own reason:", "", *[f"- {line}" for line in untested]]
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
