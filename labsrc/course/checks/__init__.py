"""Checks for the coursework: each one looks at a learner's work and says specifically what is wrong.

The lesson ends with six "Build it yourself" steps. Each step has a check here.
A check never says only "wrong": every problem names the case, chunk, lane or
field and says what to change, for example::

    case 'vip-refund' expects merchant-vip-refurb, which caller luna-48291 cannot
    see on 2026-05-27 (restricted): a positive case may only expect permitted evidence

A check returns a :class:`CheckResult` (what passed, what did not).
``result.require()`` raises :class:`CheckFailed` with every problem listed, so a
notebook cell stops on the first step that does not hold yet.

The checks reuse the library's own rules (the boundary's :func:`~labsrc.boundary.block_reasons`,
the lesson analyzer, the gate run's outcomes); they re-implement nothing.
"""

from labsrc.course.checks.cases import (
    ADVERSARIAL_KINDS,
    COPY_MIN_WORDS,
    DENSE_REACH_DEPTH,
    DENSE_REACH_MIN_COSINE,
    QUERY_STYLES,
    check_adversarial_cases,
    check_positive_cases,
    copied_words,
    id_hint,
)
from labsrc.course.checks.comparison import (
    PERCENTILE_METHOD,
    check_lane_comparison,
    distinct_digits,
)
from labsrc.course.checks.encoder import (
    COPIED_VECTOR_COSINE,
    ENCODER_REPORT_KEYS,
    copied_query_vectors,
    check_dense_source,
    check_encoder_report,
)
from labsrc.course.checks.files import (
    ENCODER_DTYPE,
    check_vector_folder,
    installed_encoder_version,
    model_revision,
    package_problems,
    stored_arrays,
    vector_file_problems,
)
from labsrc.course.checks.model_rows import (
    SAME_ROW_COSINE,
    SAMPLE,
    RowCheck,
    check_rows,
    model_encoder,
    reference_dir,
)
from labsrc.course.checks.evidence import (
    QUESTION_WORDS,
    chunk_text_by_field,
    chunk_text_in,
    chunk_titles_by_field,
    content_words,
    hidden_ids_in,
    policy_codes,
    query_style,
)
from labsrc.course.checks.precision import (
    ROUNDED_DECIMALS,
    SCORE_KEYS,
    TIE_NOTE,
    UNIT_RATIO_TOLERANCE,
    check_trace_scores,
    check_trace_timings,
    lane_score,
    rounded_decimals,
    timing_scale,
)
from labsrc.course.checks.result import (
    NOT_VERIFIED,
    CheckFailed,
    CheckResult,
    SHOWN_PER_KIND,
)
from labsrc.course.checks.runs import (
    TRACE_VERSION_KEYS,
    check_candidates_artifact,
    check_failed_traces,
    rank_problem,
    rrf_of_ranks,
)
from labsrc.course.checks.stopwords import empty_query_message, stop_words_in

__all__ = [
    "ADVERSARIAL_KINDS",
    "COPIED_VECTOR_COSINE",
    "COPY_MIN_WORDS",
    "DENSE_REACH_DEPTH",
    "DENSE_REACH_MIN_COSINE",
    "ENCODER_DTYPE",
    "ENCODER_REPORT_KEYS",
    "PERCENTILE_METHOD",
    "QUERY_STYLES",
    "QUESTION_WORDS",
    "ROUNDED_DECIMALS",
    "SAME_ROW_COSINE",
    "SAMPLE",
    "SCORE_KEYS",
    "NOT_VERIFIED",
    "SHOWN_PER_KIND",
    "TIE_NOTE",
    "TRACE_VERSION_KEYS",
    "UNIT_RATIO_TOLERANCE",
    "CheckFailed",
    "CheckResult",
    "RowCheck",
    "check_adversarial_cases",
    "check_candidates_artifact",
    "check_dense_source",
    "check_encoder_report",
    "check_failed_traces",
    "check_lane_comparison",
    "check_positive_cases",
    "check_rows",
    "check_trace_scores",
    "check_trace_timings",
    "check_vector_folder",
    "chunk_text_by_field",
    "chunk_text_in",
    "chunk_titles_by_field",
    "content_words",
    "copied_query_vectors",
    "copied_words",
    "distinct_digits",
    "empty_query_message",
    "hidden_ids_in",
    "id_hint",
    "installed_encoder_version",
    "lane_score",
    "model_encoder",
    "model_revision",
    "package_problems",
    "policy_codes",
    "query_style",
    "rank_problem",
    "reference_dir",
    "rounded_decimals",
    "rrf_of_ranks",
    "stop_words_in",
    "stored_arrays",
    "timing_scale",
    "vector_file_problems",
]
