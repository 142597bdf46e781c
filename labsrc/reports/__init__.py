"""Reports of a gate run: the same run as DataFrames, JSON, Markdown, HTML,
JUnit XML, compact traces and plots."""

from labsrc.reports.html_report import (
    dense_model_label,
    report_html,
)
from labsrc.reports.junit import (
    GATE_CLASSNAME,
    junit_xml,
    write_junit,
)
from labsrc.reports.plots import (
    LANE_COLORS,
    plot_latency,
    plot_recall,
    plot_recall_curves,
    save_figure,
)
from labsrc.reports.frames import curve_frame
from labsrc.reports.report import (
    candidates_frame,
    cases_frame,
    compact_trace,
    gates_frame,
    latency_frame,
    recall_frame,
    recall_significance,
    report_dict,
    REPORT_FILES,
    report_markdown,
    REPORT_SCHEMA,
    REPORT_SCHEMA_VERSION,
    significance_lines,
    write_report,
)

__all__ = [
    "candidates_frame",
    "cases_frame",
    "compact_trace",
    "curve_frame",
    "dense_model_label",
    "GATE_CLASSNAME",
    "gates_frame",
    "junit_xml",
    "LANE_COLORS",
    "latency_frame",
    "plot_latency",
    "plot_recall",
    "plot_recall_curves",
    "recall_frame",
    "recall_significance",
    "report_dict",
    "REPORT_FILES",
    "report_html",
    "report_markdown",
    "REPORT_SCHEMA",
    "REPORT_SCHEMA_VERSION",
    "save_figure",
    "significance_lines",
    "write_junit",
    "write_report",
]
