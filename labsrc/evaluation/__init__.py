"""Evaluation: judge a retriever.

Takes a retriever, cases and a gate config; returns metrics, latency
percentiles, gate verdicts (:class:`GateRun`), reports and plots. The BEIR
benchmark runner lives here too.
"""

from labsrc.evaluation.beir_lanes import (
    BeirLanes,
    convex_run,
    rrf_run,
)
from labsrc.evaluation.benchmark import (
    ALPHA_GRID,
    AlphaSweep,
    BEIR_LANES,
    BenchmarkResult,
    DEFAULT_ALPHA,
    REPORT_METRICS,
    evaluate_lanes,
    load_lanes,
    run_benchmark,
    trec_scores,
    tune_alpha,
    write_trec_run,
)
from labsrc.evaluation.budgets import (
    RETRIEVAL_BUDGET_MS,
    STAGES,
    exceeded_retrieval_budgets,
)
from labsrc.evaluation.case_rules import (
    CaseProblem,
    OWN_REASONS,
    case_problems,
    cases_problems,
    check_cases,
)
from labsrc.evaluation.config import (
    GateConfig,
    HYBRID_RULES,
    LANES,
    load_gate_config,
)
from labsrc.evaluation.gates import (
    CaseOutcome,
    GATE_TABLE,
    GateRun,
    evaluate_gates,
    lane_recall,
    release_gate,
    run_cases,
)
from labsrc.evaluation.html_report import (
    dense_model_label,
    report_html,
)
from labsrc.evaluation.junit import (
    GATE_CLASSNAME,
    junit_xml,
    write_junit,
)
from labsrc.evaluation.latency import (
    LatencyReport,
    Progress,
    measure_latency,
    percentile_ms,
)
from labsrc.evaluation.metrics import (
    METRICS,
    evaluate_run,
    hit_at_k,
    ndcg_at_k,
    precision_at_k,
    rank_run,
    recall_at_k,
    reciprocal_rank,
)
from labsrc.evaluation.plots import (
    LANE_COLORS,
    plot_latency,
    plot_recall,
    save_figure,
)
from labsrc.evaluation.report import (
    REPORT_FILES,
    REPORT_SCHEMA,
    REPORT_SCHEMA_VERSION,
    candidates_frame,
    cases_frame,
    compact_trace,
    gates_frame,
    latency_frame,
    recall_frame,
    report_dict,
    report_markdown,
    write_report,
)
from labsrc.evaluation.verdicts import (
    GateResult,
    NOT_TESTED,
    not_tested,
    plural,
)

__all__ = [
    "ALPHA_GRID",
    "AlphaSweep",
    "BEIR_LANES",
    "BeirLanes",
    "BenchmarkResult",
    "CaseOutcome",
    "CaseProblem",
    "DEFAULT_ALPHA",
    "GATE_CLASSNAME",
    "GATE_TABLE",
    "GateConfig",
    "GateResult",
    "GateRun",
    "HYBRID_RULES",
    "LANES",
    "LANE_COLORS",
    "LatencyReport",
    "METRICS",
    "NOT_TESTED",
    "OWN_REASONS",
    "Progress",
    "REPORT_FILES",
    "REPORT_METRICS",
    "REPORT_SCHEMA",
    "REPORT_SCHEMA_VERSION",
    "RETRIEVAL_BUDGET_MS",
    "STAGES",
    "candidates_frame",
    "case_problems",
    "cases_frame",
    "cases_problems",
    "check_cases",
    "compact_trace",
    "convex_run",
    "dense_model_label",
    "evaluate_gates",
    "evaluate_lanes",
    "evaluate_run",
    "exceeded_retrieval_budgets",
    "gates_frame",
    "hit_at_k",
    "junit_xml",
    "lane_recall",
    "latency_frame",
    "load_gate_config",
    "load_lanes",
    "measure_latency",
    "ndcg_at_k",
    "not_tested",
    "percentile_ms",
    "plot_latency",
    "plot_recall",
    "plural",
    "precision_at_k",
    "rank_run",
    "recall_at_k",
    "recall_frame",
    "reciprocal_rank",
    "release_gate",
    "report_dict",
    "report_html",
    "report_markdown",
    "rrf_run",
    "run_benchmark",
    "run_cases",
    "save_figure",
    "trec_scores",
    "tune_alpha",
    "write_junit",
    "write_report",
    "write_trec_run",
]
