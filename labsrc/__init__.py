"""labsrc: permission-safe hybrid retrieval, built from scratch for teaching.

Data flows records → boundary → lanes → fusion → retriever → engines →
evaluation → gate → reports, with
the production patterns, the course and the CLI on top; each stage is a
subpackage, in that order, and ``pyproject.toml`` states the order as an
import-linter contract. The names below are the lesson's; everything else is
imported from its subpackage (``from labsrc.lanes import english_analyzer``).
"""

from labsrc.boundary import (
    BlockReason,
    BoundaryIndex,
    block_reasons,
    is_current,
    is_permitted,
    permitted_chunks,
)
from labsrc.datasets import EVAL_DATE, Lesson, lesson
from labsrc.errors import InvalidArgument, InvalidRecord, LabError, MissingDependency
from labsrc.evaluation import (
    RETRIEVAL_BUDGET_MS,
    STAGES,
    exceeded_retrieval_budgets,
    percentile_ms,
    recall_at_k,
)
from labsrc.fusion import (
    DEFAULT_RRF_K,
    fuse_ranked_ids,
    reciprocal_rank_fusion,
    rrf_contribution,
)
from labsrc.lanes import (
    Analyzer,
    BM25Index,
    DenseSource,
    Encoder,
    FixtureVectors,
    HashingEncoder,
    bm25_rank,
    brute_force_bm25,
    cosine_similarity,
    dense_rank,
    explain,
    idf_lucene,
    lesson_analyzer,
    load_vectors,
    tokens,
)
from labsrc.gate import (
    CaseOutcome,
    GateConfig,
    GateResult,
    GateRun,
    gate_retriever,
    load_gate_config,
    release_gate,
)
from labsrc.patterns import HybridRetriever
from labsrc.reports import write_report
from labsrc.records import (
    CASE_KINDS,
    Caller,
    Case,
    PolicyChunk,
    load_callers,
    load_cases,
    load_chunks,
)
from labsrc.retriever import (
    PolicyRetriever,
    RetrievalResult,
    hybrid_rank,
    trace_hybrid_request,
)
from labsrc.trace import RetrievalTrace
from labsrc.version import __version__ as __version__

__all__ = [
    # records
    "CASE_KINDS",
    "Caller",
    "Case",
    "PolicyChunk",
    "load_callers",
    "load_cases",
    "load_chunks",
    "load_vectors",
    # errors
    "InvalidArgument",
    "InvalidRecord",
    "LabError",
    "MissingDependency",
    # boundary
    "BlockReason",
    "BoundaryIndex",
    "block_reasons",
    "is_current",
    "is_permitted",
    "permitted_chunks",
    # lanes
    "Analyzer",
    "BM25Index",
    "DenseSource",
    "Encoder",
    "FixtureVectors",
    "HashingEncoder",
    "bm25_rank",
    "brute_force_bm25",
    "cosine_similarity",
    "dense_rank",
    "explain",
    "idf_lucene",
    "lesson_analyzer",
    "tokens",
    # fusion
    "DEFAULT_RRF_K",
    "fuse_ranked_ids",
    "reciprocal_rank_fusion",
    "rrf_contribution",
    # retriever
    "PolicyRetriever",
    "RetrievalResult",
    "RetrievalTrace",
    "hybrid_rank",
    "trace_hybrid_request",
    # the lesson's data
    "EVAL_DATE",
    "Lesson",
    "lesson",
    # evaluation, the gate and its reports
    "RETRIEVAL_BUDGET_MS",
    "STAGES",
    "CaseOutcome",
    "GateConfig",
    "GateResult",
    "GateRun",
    "exceeded_retrieval_budgets",
    "gate_retriever",
    "load_gate_config",
    "percentile_ms",
    "recall_at_k",
    "release_gate",
    "write_report",
    # production patterns
    "HybridRetriever",
]
