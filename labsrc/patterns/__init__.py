"""Production patterns: the capabilities of existing hybrid-retrieval systems, rebuilt on the lab's core.

Takes plain dicts, files or a SQLite store; returns ranked hits. Every
retriever here sits behind the same evidence boundary as :class:`PolicyRetriever`
(see ``shared/specs/production-patterns.md``).
"""

from labsrc.patterns.categories import (
    category_values,
    search_by_category,
)
from labsrc.patterns.chunking import (
    DEFAULT_MAX_CHARS,
    chunk_markdown,
    markdown_sections,
)
from labsrc.patterns.codetokens import (
    code_tokens,
    split_identifier,
)
from labsrc.patterns.documents import (
    PAGE_FIELDS,
    PAGE_SUFFIXES,
    REQUIRED_PAGE_FIELDS,
    chunk_documents,
    chunk_record,
    page_paths,
    write_chunks_jsonl,
)
from labsrc.patterns.dropin import (
    HybridRetriever,
    QueryPlan,
    make_snippet,
    rrf,
    tokenize,
)
from labsrc.patterns.dropin_records import (
    DropinRecord,
    POLICY_FIELDS,
    record_from_dict,
    request_date,
)
from labsrc.patterns.dropin_text import (
    DROPIN_ANALYZER,
)
from labsrc.patterns.enrich import (
    MAX_ENTITIES,
    MAX_ENTITIES_PER_TYPE,
    MAX_KEYWORDS,
    enrich_content,
)
from labsrc.patterns.ensemble import (
    ENSEMBLE_B,
    ENSEMBLE_K1,
    ENSEMBLE_WEIGHTS,
    ensemble_retriever,
)
from labsrc.patterns.expansion import (
    QueryExpander,
    SUPPORT_POLICY_EXPANSIONS,
)
from labsrc.patterns.filters import (
    FIELD_OPERATORS,
    FILTER_OPERATORS,
    LOGICAL_OPERATORS,
    check_filter,
    compile_filter_sql,
    matches_filter,
)
from labsrc.patterns.frontmatter import (
    FrontMatter,
    parse_front_matter,
)
from labsrc.patterns.keywords import (
    DEFAULT_DEDUP_LIMIT,
    DEFAULT_MAX_NGRAM,
    INSTALL_KEYWORDS,
    enrich_with_keywords,
    extract_keywords,
)
from labsrc.patterns.needles import (
    NEEDLE_THRESHOLD,
    NeedleCorpus,
    NeedleOutcome,
    NeedleQuestion,
    NeedleReport,
    load_needles,
    needle_accuracy,
    needle_chunks,
    needle_gate,
    needle_retriever,
)
from labsrc.patterns.postfilter import (
    FilterPlacement,
    acl_overlay_chunks,
    compare_filter_placement,
    post_filter,
)
from labsrc.patterns.rerank import (
    DEFAULT_OVERFETCH,
    Reranker,
    TermOverlapReranker,
    rerank_search,
)
from labsrc.patterns.snippets import (
    Snippet,
    best_snippet,
    min_max,
    min_max_normalize,
    with_display_scores,
)
from labsrc.patterns.store import (
    EMBEDDING_DTYPE,
    SQLiteStore,
)

__all__ = [
    "DEFAULT_DEDUP_LIMIT",
    "DEFAULT_MAX_CHARS",
    "DEFAULT_MAX_NGRAM",
    "DEFAULT_OVERFETCH",
    "DROPIN_ANALYZER",
    "DropinRecord",
    "EMBEDDING_DTYPE",
    "ENSEMBLE_B",
    "ENSEMBLE_K1",
    "ENSEMBLE_WEIGHTS",
    "FIELD_OPERATORS",
    "FILTER_OPERATORS",
    "FilterPlacement",
    "FrontMatter",
    "HybridRetriever",
    "INSTALL_KEYWORDS",
    "LOGICAL_OPERATORS",
    "MAX_ENTITIES",
    "MAX_ENTITIES_PER_TYPE",
    "MAX_KEYWORDS",
    "NEEDLE_THRESHOLD",
    "NeedleCorpus",
    "NeedleOutcome",
    "NeedleQuestion",
    "NeedleReport",
    "PAGE_FIELDS",
    "PAGE_SUFFIXES",
    "POLICY_FIELDS",
    "QueryExpander",
    "QueryPlan",
    "REQUIRED_PAGE_FIELDS",
    "Reranker",
    "SQLiteStore",
    "SUPPORT_POLICY_EXPANSIONS",
    "Snippet",
    "TermOverlapReranker",
    "acl_overlay_chunks",
    "best_snippet",
    "category_values",
    "check_filter",
    "chunk_documents",
    "chunk_markdown",
    "chunk_record",
    "code_tokens",
    "compare_filter_placement",
    "compile_filter_sql",
    "enrich_content",
    "enrich_with_keywords",
    "ensemble_retriever",
    "extract_keywords",
    "load_needles",
    "make_snippet",
    "markdown_sections",
    "matches_filter",
    "min_max",
    "min_max_normalize",
    "needle_accuracy",
    "needle_chunks",
    "needle_gate",
    "needle_retriever",
    "page_paths",
    "parse_front_matter",
    "post_filter",
    "record_from_dict",
    "request_date",
    "rerank_search",
    "rrf",
    "search_by_category",
    "split_identifier",
    "tokenize",
    "with_display_scores",
    "write_chunks_jsonl",
]
