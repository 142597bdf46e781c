"""labsrc: permission-safe hybrid retrieval, built from scratch for teaching.

Data flows records → boundary → lanes → fusion → retriever → engines →
evaluation → gate → reports, with
the production patterns, the course and the CLI on top; each stage is a
subpackage, in that order, and ``pyproject.toml`` states the order as an
import-linter contract. The names below are the lesson's; everything else is
imported from its subpackage (``from labsrc.lanes import english_analyzer``).
"""

import importlib
from typing import TYPE_CHECKING, Any

from labsrc.version import __version__ as __version__

#: Where each of the names below lives. ``import labsrc`` imports none of it: a name is
#: imported from its subpackage the first time it is used (PEP 562), so ``labsrc --version``
#: and a CLI call that never plots load no matplotlib, pandas or NumPy.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "labsrc.boundary": (
        "BlockReason",
        "BoundaryIndex",
        "block_reasons",
        "is_current",
        "is_permitted",
        "permitted_chunks",
    ),
    "labsrc.datasets": (
        "EVAL_DATE",
        "Lesson",
        "lesson",
    ),
    "labsrc.errors": (
        "InvalidArgument",
        "InvalidRecord",
        "LabError",
        "MissingDependency",
    ),
    "labsrc.evaluation": (
        "RETRIEVAL_BUDGET_MS",
        "STAGES",
        "exceeded_retrieval_budgets",
        "percentile_ms",
        "recall_at_k",
    ),
    "labsrc.fusion": (
        "DEFAULT_RRF_K",
        "fuse_ranked_ids",
        "reciprocal_rank_fusion",
        "rrf_contribution",
    ),
    "labsrc.lanes": (
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
        "load_vectors",
        "tokens",
    ),
    "labsrc.gate": (
        "CaseOutcome",
        "GateConfig",
        "GateResult",
        "GateRun",
        "gate_retriever",
        "load_gate_config",
        "release_gate",
    ),
    "labsrc.patterns": (
        "HybridRetriever",
    ),
    "labsrc.reports": (
        "write_report",
    ),
    "labsrc.records": (
        "CASE_KINDS",
        "Caller",
        "Case",
        "PolicyChunk",
        "load_callers",
        "load_cases",
        "load_chunks",
    ),
    "labsrc.retriever": (
        "PolicyRetriever",
        "RetrievalResult",
        "hybrid_rank",
        "trace_hybrid_request",
    ),
    "labsrc.trace": (
        "RetrievalTrace",
    ),
}
_HOME = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        value = getattr(importlib.import_module(_HOME[name]), name)
    elif not name.startswith("_"):  # a stage, as an attribute too: ``labsrc.lanes`` after ``import labsrc``
        try:
            value = importlib.import_module(f"labsrc.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"labsrc.{name}":
                raise
            raise AttributeError(f"module 'labsrc' has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module 'labsrc' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # what type checkers and editors see: the same names, imported eagerly
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
