"""Check for step 3: the dense lane uses a real, versioned bi-encoder whose vectors cover every case query."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from labsrc.course.checks.result import CheckResult, Collector
from labsrc.lanes.coverage import missing_query_vectors, no_vector_hint
from labsrc.records.cases import Case

__all__ = ["check_dense_source"]


def check_dense_source(source: Any, cases: Sequence[Case] = (), *, cases_path: str = "my-submission/cases.jsonl") -> CheckResult:
    """Step 3: the dense lane uses a real, versioned bi-encoder whose vectors cover every case query.

    ``source`` is the dense source handed to the retriever, for example
    :func:`labsrc.lanes.embed.load_embeddings`'s result; ``cases`` are the
    learner's cases, whose queries must each have a stored vector.
    """
    from labsrc.lanes.embed import (
        missing_model_fields,  # embed imports vectordir; keep checks importable on its own
    )

    out = Collector("step 3, real encoder")
    version = str(getattr(source, "version", ""))
    model = dict(getattr(source, "model", None) or {})
    frozen = version.startswith(("fixture-", "hashing-"))
    out.check(
        bool(version) and not frozen,
        f"dense version {version!r}",
        f"the dense lane still uses {version or 'an unversioned source'!r}, not a real bi-encoder: "
        "load the MiniLM vectors with labsrc.lanes.embed.load_embeddings",
    )
    if not model:
        out.problem("the dense source carries no model record (MODEL.json): its version cannot be audited")
    else:
        missing = missing_model_fields(model)
        out.check(
            not missing,
            f"MODEL.json records {model.get('model')} ({model.get('packaged_by')}, "
            f"sentence-transformers {model.get('sentence_transformers')}, torch {model.get('torch')})",
            f"MODEL.json lacks {missing}",
        )
        dimension = getattr(source, "dimension", None)
        out.check(
            model.get("dim") == dimension,
            f"dimension {dimension} as recorded",
            f"MODEL.json says dim {model.get('dim')} but the vectors have {dimension}",
        )
        out.check(model.get("normalized") is True, "vectors are L2-normalised", "MODEL.json does not say normalized: true")
    if cases:
        lacking = missing_query_vectors(source, cases)
        if lacking is not None:
            out.check(
                not lacking,
                f"all {len(cases)} case queries have a stored vector",
                f"{no_vector_hint(len(lacking), cases_path=cases_path)} (case(s) {list(lacking)})",
            )
    return out.result()
