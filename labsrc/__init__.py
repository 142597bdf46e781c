"""labsrc: permission-safe hybrid retrieval, built from scratch for teaching.

Data flows records → boundary → analysis → sparse and dense lanes → fusion →
retriever → gates and traces. The names below are the public API.
"""

from .analysis import LESSON_STOPWORDS, LUCENE_ENGLISH_STOPWORDS, Analyzer, lesson_analyzer, tokens
from .boundary import BlockReason, BoundaryIndex, block_reasons, is_current, is_permitted, permitted_chunks
from .budgets import RETRIEVAL_BUDGET_MS, STAGES, exceeded_retrieval_budgets
from .cases import CASE_KINDS, Case, load_cases
from .dense import (
    DenseSource,
    Encoder,
    EncoderVectors,
    FixtureVectors,
    HashingEncoder,
    cosine_similarity,
    dense_rank,
)
from .errors import InvalidArgument, InvalidRecord, LabError, MissingDependency
from .fixtures import EVAL_DATE, Lesson, lesson
from .fusion import DEFAULT_RRF_K, fuse_ranked_ids, reciprocal_rank_fusion, rrf_contribution
from .config import HYBRID_RULES, load_gate_config
from .gates import (
    GATE_TABLE,
    CaseOutcome,
    GateConfig,
    GateResult,
    GateRun,
    evaluate_gates,
    lane_recall,
    release_gate,
    run_cases,
)
from .latency import LatencyReport, measure_latency, percentile_ms
from .loading import load_callers, load_chunks, load_vectors
from .metrics import recall_at_k
from .records import Caller, PolicyChunk
from .report import (
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
from .retriever import PolicyRetriever, RetrievalResult, hybrid_rank, trace_hybrid_request
from .sparse import BM25Index, TermExplanation, bm25_rank, brute_force_bm25, explain, idf_lucene
from .trace import RetrievalTrace
__version__ = "0.1.0"

__all__ = [
    "BM25Index",
    "BlockReason",
    "BoundaryIndex",
    "CASE_KINDS",
    "Caller",
    "Case",
    "CaseOutcome",
    "DEFAULT_RRF_K",
    "DenseSource",
    "EVAL_DATE",
    "Encoder",
    "EncoderVectors",
    "FixtureVectors",
    "GateConfig",
    "GATE_TABLE",
    "GateResult",
    "GateRun",
    "HYBRID_RULES",
    "HashingEncoder",
    "InvalidArgument",
    "InvalidRecord",
    "LESSON_STOPWORDS",
    "LUCENE_ENGLISH_STOPWORDS",
    "LabError",
    "LatencyReport",
    "Lesson",
    "MissingDependency",
    "PolicyChunk",
    "PolicyRetriever",
    "REPORT_SCHEMA_VERSION",
    "RETRIEVAL_BUDGET_MS",
    "RetrievalResult",
    "RetrievalTrace",
    "STAGES",
    "TermExplanation",
    "Analyzer",
    "block_reasons",
    "bm25_rank",
    "brute_force_bm25",
    "candidates_frame",
    "cases_frame",
    "compact_trace",
    "cosine_similarity",
    "dense_rank",
    "evaluate_gates",
    "exceeded_retrieval_budgets",
    "gates_frame",
    "explain",
    "fuse_ranked_ids",
    "hybrid_rank",
    "idf_lucene",
    "is_current",
    "is_permitted",
    "lane_recall",
    "latency_frame",
    "lesson",
    "lesson_analyzer",
    "load_callers",
    "load_cases",
    "load_chunks",
    "load_gate_config",
    "measure_latency",
    "percentile_ms",
    "load_vectors",
    "permitted_chunks",
    "recall_at_k",
    "recall_frame",
    "reciprocal_rank_fusion",
    "release_gate",
    "report_dict",
    "report_markdown",
    "rrf_contribution",
    "run_cases",
    "tokens",
    "trace_hybrid_request",
    "write_report",
]
