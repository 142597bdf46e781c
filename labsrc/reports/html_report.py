"""``report.html``: one self-contained page for a gate run, for a CI artifact or a person's browser.

The page needs nothing but itself: plots are embedded as base64 PNG ``data:``
URIs, styles are inline, there is no JavaScript and no network request. It
shows, top to bottom: the verdict, the gate table (PASS / FAIL / NOT TESTED),
Recall@k per lane and per positive case, stage latency against the budgets,
the failed cases with their compact traces, and the versions that ran.

Like every report file it carries ids, ranks, scores, versions and timings,
never ``chunk.text``; the only free text is the case queries and notes the
case file already holds. Every value is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from labsrc.errors import InvalidArgument
from labsrc.gate.config import LANES
from labsrc.gate.gates import GATE_TABLE, GateRun
from labsrc.gate.verdicts import plural
from labsrc.reports.frames import curve_frame, gates_frame, lane_note, omitted_lines, reported_lanes, untested_reasons

#: The Recall@k curves' PNG beside the report (written only for a run with ``recall_at``).
CURVE_FILE = "recall_curve.png"

__all__ = ["dense_model_label", "report_html"]

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2rem auto;
       max-width: 72rem; padding: 0 1rem; color: #1f2328; background: #ffffff; }
h1 { margin-bottom: 0.25rem; }
h2 { border-bottom: 1px solid #d0d7de; padding-bottom: 0.25rem; margin-top: 2rem; }
.verdict { font-size: 1.4rem; font-weight: 700; padding: 0.75rem 1rem; border-radius: 6px; color: #ffffff; }
.PASS { background: #1a7f37; } .FAIL { background: #cf222e; } .NOT-TESTED { background: #9a6700; }
td.status { font-weight: 700; color: #ffffff; text-align: center; white-space: nowrap; }
table { border-collapse: collapse; margin: 0.5rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #d0d7de; padding: 0.3rem 0.6rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f6f8fa; padding: 0.75rem; overflow-x: auto; font-size: 0.8rem; }
img { max-width: 100%; border: 1px solid #d0d7de; }
.muted { color: #59636e; }
"""


def dense_model_label(dense_model: Mapping[str, Any]) -> str:
    """The dense model's name with what it is, e.g. ``all-MiniLM-L6-v2 (384-d, float32)``; never a raw dict."""
    if not dense_model:
        return "none recorded"
    name = str(dense_model.get("name") or dense_model.get("model") or "unnamed model")
    extras = []
    dim = dense_model.get("dim")
    if dim is None and isinstance(dense_model.get("dimensions"), (list, tuple)):
        dim = len(dense_model["dimensions"])
    if dim is not None:
        extras.append(f"{dim}-d")
    for key in ("kind", "dtype"):
        if dense_model.get(key):
            extras.append(str(dense_model[key]))
    return f"{name} ({', '.join(extras)})" if extras else name


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(value: Any, digits: int = 3) -> str:
    if isinstance(value, float):
        return "—" if math.isnan(value) else f"{value:.{digits}f}"
    return _e(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A table from already-escaped cells (a cell may carry its own ``<td ...>``)."""
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _status_cell(status: str) -> str:
    return f'<td class="status {status.replace(" ", "-")}">{_e(status)}</td>'


def _image(name: str, images: Mapping[str, bytes], alt: str) -> str:
    data = images.get(name)
    if not data:
        return f'<p class="muted">({_e(name)} not rendered)</p>'
    encoded = base64.b64encode(data).decode("ascii")
    return f'<p><img alt="{_e(alt)}" src="data:image/png;base64,{encoded}"></p>'


def _verdict(run: GateRun) -> str:
    tested = [g for g in run.gates if g.tested]
    passing = sum(g.passed for g in tested)
    untested = run.untested_gates
    status = "PASS" if run.passed else "FAIL"
    text = f"{status}: {passing} of {plural(len(tested), 'tested gate' if untested else 'gate')} pass"
    if untested:
        failing = sum(not g.passed for g in untested)
        effect = ("and do not fail the run" if not failing else "and fail the run" if failing == len(untested)
                  else f"({failing} fail the run)")
        text += f"; {plural(len(untested), 'gate')} NOT TESTED {effect}"
    config = run.config
    reasons = "".join(f"<li>{_e(line)}</li>" for line in untested_reasons(run))
    omitted = "".join(f"<li>{_e(line)}</li>" for line in omitted_lines(run))
    return (
        f'<p class="verdict {status}">{_e(text)}</p>'
        + (f"<p>NOT TESTED, each for its own reason:</p><ul>{reasons}</ul>" if reasons else "")
        + (f"<ul>{omitted}</ul>" if omitted else "")
        + f"<p>Evaluated on {_e(run.on_date.isoformat())}"
        + (f" for retriever <code>{_e(run.subject)}</code>" if run.subject else "")
        + f": top_k {config.top_k}, rrf_k {_e(config.to_dict()['rrf_k'])}, "
        f"hybrid rule {_e(config.hybrid_rule)}, {plural(len(run.outcomes), 'case')}.</p>"
    )


def _gates(run: GateRun) -> str:
    rows = []
    frame = gates_frame(run)
    for g, failing in zip(run.gates, frame["failing"]):
        rows.append([_status_cell(g.status), _e(g.name), _e(g.detail), _e(failing if not g.passed and failing else "—"),
                     _e(GATE_TABLE.get(g.family, ("", ""))[1])])
    table = _table(["status", "gate", "detail", "failing", "what a failure means"], rows)
    findings = [(g, line) for g in run.gates if not g.passed for line in g.findings]
    if findings:
        items = "".join(f"<li><b>{_e(g.name)}</b>: {_e(line)}</li>" for g, line in findings)
        table += f"<h3>Findings</h3><ul>{items}</ul>"
    return table


def _recall(run: GateRun, frame: pd.DataFrame, images: Mapping[str, bytes], significance: Sequence[str]) -> str:
    k = run.config.top_k
    reported = reported_lanes(run)
    lanes = _table(
        ["lane", f"mean Recall@{k}", "gate threshold"],
        [[_e(lane), f'<td class="num">{_num(run.recall[lane], 2)}</td>' if lane in reported
          else _e(lane_note(run, lane)), _num(run.config.min_recall.get(lane, "reported only"), 2)]
         for lane in LANES],
    )
    if frame.empty:
        per_case = '<p class="muted">No positive cases: recall was not measured.</p>'
    else:
        per_case = _table(
            ["positive case", *frame.columns],
            [[_e(name), *(f'<td class="num">{_num(float(v), 2)}</td>' for v in row)]
             for name, row in zip(frame.index, frame.to_numpy())],
        )
    tested = "".join(f"<p>{_e(line)}</p>" for line in significance)
    return (f"<h3>Per lane</h3>{lanes}{tested}<h3>Per positive case</h3>{per_case}"
            + _image("recall.png", images, f"Recall@{k} per lane and positive case") + _curves(run, images))


def _curves(run: GateRun, images: Mapping[str, bytes]) -> str:
    """Recall@k at each k of the run's ``recall_at``: the table and the curves (nothing without ``recall_at``)."""
    curve = curve_frame(run)
    if curve is None:
        return ""
    table = _table(["lane", *(f"Recall@{k}" for k in curve.index)],
                   [[_e(lane), *(f'<td class="num">{_num(float(v), 2)}</td>' for v in curve[lane])]
                    for lane in curve.columns])
    left_out = "".join(f"<li>{_e(line)}</li>" for line in curve.attrs["errors"])
    return (f"<h3>Recall@k at each k ({_e(plural(curve.attrs['cases'], 'positive case'))})</h3>{table}"
            + (f"<ul>{left_out}</ul>" if left_out else "") + _image(CURVE_FILE, images, "Recall@k curves per lane"))


def _latency(run: GateRun, frame: pd.DataFrame, images: Mapping[str, bytes]) -> str:
    if run.latency is None:
        return '<p class="muted">Latency was not measured.</p>'
    rows = []
    for record in frame.to_dict("records"):
        within = record.get("within_budget")
        status = "—" if within is None else ("PASS" if within else "FAIL")
        rows.append([
            _e(record["stage"]),
            *(f'<td class="num">{_num(record.get(c, float("nan")))}</td>'
              for c in ("p50_ms", "p95_ms", "p50_budget_ms", "p95_budget_ms")),
            _status_cell(status) if status != "—" else "—",
        ])
    summary = (f"<p>{run.latency.requests} timed requests after {run.latency.warmup} warm-up round(s) of the case "
               f"set; {run.latency.repetitions} timed round(s).</p>")
    table = _table(["stage", "p50 ms", "p95 ms", "p50 budget", "p95 budget", "within budget"], rows)
    return summary + table + _image("latency.png", images, "stage latency p50 and p95 against budgets")


def _failed(run: GateRun, traces: Sequence[Mapping[str, Any]]) -> str:
    failed = run.failed_outcomes
    if not failed:
        return "<p>None.</p>"
    parts = []
    for o, record in zip(failed, traces):
        trace = json.dumps(record, indent=2, sort_keys=True, default=str)
        parts.append(f"<h3>{_e(o.case.name)} <span class=\"muted\">({_e(o.case.kind)}, caller "
                     f"{_e(o.case.caller)})</span></h3><p>query: <code>{_e(o.case.query)}</code></p>"
                     f"<pre>{_e(trace)}</pre>")
    return "".join(parts)


def _versions(run: GateRun) -> str:
    rows = [[_e(name), f"<code>{_e(value)}</code>"] for name, value in run.versions.items()]
    rows.append(["dense model", f"<code>{_e(dense_model_label(run.dense_model))}</code>"])
    return _table(["component", "version"], rows)


def report_html(
    run: GateRun,
    *,
    recall: pd.DataFrame,
    latency: pd.DataFrame,
    traces: Sequence[Mapping[str, Any]],
    images: Mapping[str, bytes] | None = None,
    significance: Sequence[str] = (),
) -> str:
    """The whole page, from the pieces :func:`~labsrc.reports.report.write_report` already made.

    ``recall`` is :func:`~labsrc.reports.report.recall_frame`, ``latency``
    :func:`~labsrc.reports.report.latency_frame`, ``traces`` one
    :func:`~labsrc.reports.report.compact_trace` per failed case (in
    :attr:`GateRun.failed_outcomes` order), and ``images`` maps ``recall.png`` /
    ``latency.png`` to the PNG bytes to embed. ``significance`` is
    :func:`~labsrc.reports.report.significance_lines`: the paired tests of the
    hybrid against each lane, or why there are none.
    """
    from labsrc.version import __version__

    if len(traces) != len(run.failed_outcomes):
        raise InvalidArgument(f"{len(traces)} traces for {len(run.failed_outcomes)} failed cases; pass one per failed case")
    images = images or {}
    k = run.config.top_k
    sections = [
        ("Gates", _gates(run)),
        (f"Permitted Recall@{k}", _recall(run, recall, images, significance)),
        ("Latency against budgets", _latency(run, latency, images)),
        (f"Failed cases ({len(run.failed_outcomes)})", _failed(run, traces)),
        ("Versions", _versions(run)),
    ]
    body = "".join(f"<h2>{_e(title)}</h2>{content}" for title, content in sections)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>Release gate report: {'PASS' if run.passed else 'FAIL'}</title><style>{_STYLE}</style></head>"
        f"<body><h1>Release gate report</h1>{_verdict(run)}{body}"
        f"<p class=\"muted\">Generated by labsrc {_e(__version__)}. Ids, ranks, scores and timings only; "
        "no policy text.</p></body></html>\n"
    )
