"""labsrc: permission-safe hybrid retrieval, built from scratch for teaching.

Data flows records → boundary → analysis → sparse and dense lanes → fusion →
retriever → gates and traces. The names below are the public API.
"""

from .analysis import LESSON_STOPWORDS, LUCENE_ENGLISH_STOPWORDS, Analyzer, english_analyzer, lesson_analyzer, tokens
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
from .fusion import (
    DEFAULT_RRF_K,
    convex_fusion,
    fuse_ranked_ids,
    min_max_normalise,
    reciprocal_rank_fusion,
    rrf_contribution,
)
from .mmr import maximal_marginal_relevance
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
from .vectordir import VectorDirectory, load_vector_dir
# Production patterns (shared/specs/production-patterns.md), built on the core above.
from .categories import search_by_category
from .chunking import chunk_markdown
from .codetokens import code_tokens
from .dropin import HybridRetriever, QueryPlan, make_snippet, rrf, tokenize
from .encoders import EmbedderLoadError, SentenceTransformerEncoder
from .enrich import enrich_content
from .expansion import SUPPORT_POLICY_EXPANSIONS, QueryExpander
from .filters import FILTER_OPERATORS, compile_filter_sql, matches_filter
from .needles import NEEDLE_THRESHOLD, load_needles, needle_accuracy, needle_gate, needle_retriever
from .persistence import load_bm25_index, save_bm25_index
from .postfilter import FilterPlacement, acl_overlay_chunks, compare_filter_placement, post_filter
from .rerank import Reranker, TermOverlapReranker, rerank_search
from .snippets import Snippet, best_snippet, min_max_normalize, with_display_scores
from .store import SQLiteStore
from .weighted_fusion import FusionParams, adaptive_fusion_params, ensemble_retriever, weighted_rrf

__version__ = "0.1.0"

__all__ = [
    "VectorDirectory",
    "convex_fusion",
    "english_analyzer",
    "load_vector_dir",
    "maximal_marginal_relevance",
    "min_max_normalise",
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
    # production patterns
    "EmbedderLoadError",
    "FILTER_OPERATORS",
    "FilterPlacement",
    "FusionParams",
    "HybridRetriever",
    "NEEDLE_THRESHOLD",
    "QueryExpander",
    "QueryPlan",
    "Reranker",
    "SQLiteStore",
    "SUPPORT_POLICY_EXPANSIONS",
    "SentenceTransformerEncoder",
    "Snippet",
    "TermOverlapReranker",
    "acl_overlay_chunks",
    "adaptive_fusion_params",
    "best_snippet",
    "chunk_markdown",
    "code_tokens",
    "compare_filter_placement",
    "compile_filter_sql",
    "enrich_content",
    "ensemble_retriever",
    "load_bm25_index",
    "load_needles",
    "make_snippet",
    "matches_filter",
    "min_max_normalize",
    "needle_accuracy",
    "needle_gate",
    "needle_retriever",
    "post_filter",
    "rerank_search",
    "rrf",
    "save_bm25_index",
    "search_by_category",
    "tokenize",
    "weighted_rrf",
    "with_display_scores",
]
