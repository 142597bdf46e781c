"""Course: the self-checking exercises and the rubric grader.

Takes a learner's cases, traces and artifacts; returns check results with
hints, and a graded level with its evidence.
"""

from labsrc.course.answers import (
    BLANK_ANSWERS,
    BlankAnswer,
    is_blank,
    require_answer,
)
from labsrc.course.checks import (
    ADVERSARIAL_KINDS,
    CheckFailed,
    CheckResult,
    ENCODER_REPORT_KEYS,
    PERCENTILE_METHOD,
    QUERY_STYLES,
    QUESTION_WORDS,
    SHOWN_PER_KIND,
    TRACE_VERSION_KEYS,
    check_adversarial_cases,
    check_candidates_artifact,
    check_dense_source,
    check_encoder_report,
    check_failed_traces,
    check_lane_comparison,
    check_positive_cases,
    chunk_text_in,
    content_words,
    distinct_digits,
    hidden_ids_in,
    policy_codes,
    query_style,
    rank_problem,
    rrf_of_ranks,
)
from labsrc.course.criteria import (
    applied,
    foundational,
    production,
    strong,
)
from labsrc.course.grades import (
    Evidence,
    Grade,
    LEVELS,
    LevelVerdict,
    parse_level,
)
from labsrc.course.rubric import (
    grade,
    grade_json,
    read_report,
)
from labsrc.course.submission import (
    Submission,
    find_submission,
)
from labsrc.course.thresholds import (
    HYBRID_RULE_STRENGTH,
    describe_config,
    relaxed_settings,
)

__all__ = [
    "ADVERSARIAL_KINDS",
    "BLANK_ANSWERS",
    "BlankAnswer",
    "CheckFailed",
    "CheckResult",
    "ENCODER_REPORT_KEYS",
    "Evidence",
    "Grade",
    "HYBRID_RULE_STRENGTH",
    "LEVELS",
    "LevelVerdict",
    "PERCENTILE_METHOD",
    "QUERY_STYLES",
    "QUESTION_WORDS",
    "SHOWN_PER_KIND",
    "Submission",
    "TRACE_VERSION_KEYS",
    "applied",
    "check_adversarial_cases",
    "check_candidates_artifact",
    "check_dense_source",
    "check_encoder_report",
    "check_failed_traces",
    "check_lane_comparison",
    "check_positive_cases",
    "chunk_text_in",
    "content_words",
    "describe_config",
    "distinct_digits",
    "find_submission",
    "foundational",
    "grade",
    "grade_json",
    "hidden_ids_in",
    "is_blank",
    "parse_level",
    "policy_codes",
    "production",
    "query_style",
    "rank_problem",
    "read_report",
    "relaxed_settings",
    "require_answer",
    "rrf_of_ranks",
    "strong",
]
