"""The needle-question accuracy check: can the pipeline find one specific fact?

``fixtures/needles/`` ships a small support-policy corpus (``docs/*.md``) and
questions whose answers are exact sentences of it (``questions.jsonl``: ``id``,
``question``, ``doc_id``, ``answer``). A question passes when a chunk holding
its answer is among the top ``k`` results. The loader checks that every answer
really occurs in its document, so an edited document cannot silently turn a
question unanswerable.

The pass threshold is 85 %: a regression check for the chunk → index →
expand → fuse pipeline, reported as a :class:`~labsrc.gate.gates.GateResult`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from labsrc.datasets.lesson import fixtures_dir
from labsrc.errors import InvalidArgument, InvalidRecord
from labsrc.gate.verdicts import GateResult
from labsrc.patterns.chunking import chunk_markdown
from labsrc.patterns.dropin import HybridRetriever
from labsrc.patterns.expansion import QueryExpander
from labsrc.ranking import check_top_k
from labsrc.records.loading import Field, iter_jsonl, read_text

__all__ = [
    "NEEDLE_THRESHOLD",
    "NeedleCorpus",
    "NeedleOutcome",
    "NeedleQuestion",
    "NeedleReport",
    "load_needles",
    "needle_accuracy",
    "needle_chunks",
    "needle_gate",
    "needle_retriever",
]

#: The share of needle questions that must be answered in the top k.
NEEDLE_THRESHOLD = 0.85
#: Chunk size used for the needle corpus.
NEEDLE_MAX_CHARS = 500


@dataclass(frozen=True)
class NeedleQuestion:
    id: str
    question: str
    doc_id: str
    answer: str  # an exact substring of the document


@dataclass(frozen=True)
class NeedleCorpus:
    documents: Mapping[str, str]  # doc_id -> markdown
    questions: tuple[NeedleQuestion, ...]


def load_needles(path: str | Path | None = None) -> NeedleCorpus:
    """Read ``docs/*.md`` (doc_id = file stem) and ``questions.jsonl`` from ``path``.

    ``path`` defaults to the repository's ``fixtures/needles``.
    """
    root = Path(path) if path is not None else fixtures_dir() / "needles"
    files = sorted((root / "docs").glob("*.md"))
    if not files:
        raise InvalidRecord("no markdown documents in docs/", path=root)
    documents = {file.stem: read_text(file) for file in files}  # a regular UTF-8 file each, or an InvalidRecord naming it
    questions: list[NeedleQuestion] = []
    seen: set[str] = set()
    source = root / "questions.jsonl"
    for line, record in iter_jsonl(source):
        f = Field(record, path=source, line=line)
        f.require_known({"id", "question", "doc_id", "answer"})
        question = NeedleQuestion(f.text("id"), f.text("question"), f.text("doc_id"), f.text("answer"))  # type: ignore[arg-type]
        if question.id in seen:
            raise f.error("id", f"duplicate question id {question.id!r}")
        seen.add(question.id)
        if question.doc_id not in documents:
            raise f.error("doc_id", f"no document {question.doc_id!r}; documents are {sorted(documents)}")
        if question.answer not in documents[question.doc_id]:
            raise f.error("answer", f"does not occur in docs/{question.doc_id}.md")
        questions.append(question)
    if not questions:
        raise InvalidRecord("no questions", path=source)
    return NeedleCorpus(MappingProxyType(documents), tuple(questions))


def needle_chunks(corpus: NeedleCorpus, max_chars: int = NEEDLE_MAX_CHARS) -> list[dict[str, Any]]:
    """Every document chunked with :func:`~labsrc.patterns.chunking.chunk_markdown`, in doc_id order."""
    chunks: list[dict[str, Any]] = []
    for doc_id in sorted(corpus.documents):
        chunks.extend(chunk_markdown(doc_id, corpus.documents[doc_id], max_chars=max_chars))
    return chunks


def needle_retriever(corpus: NeedleCorpus, *, expander: QueryExpander | None = None) -> HybridRetriever:
    """The pipeline under test: heading-aware chunks, headings indexed as titles, query expansion.

    ``expander=None`` uses the default support-policy table.
    """
    return HybridRetriever.from_chunks(
        needle_chunks(corpus), title_key="heading", expander=QueryExpander() if expander is None else expander
    )


@dataclass(frozen=True)
class NeedleOutcome:
    question: NeedleQuestion
    rank: int | None  # 1-based rank of the first result holding the answer, None if not in the top k
    top_ids: tuple[str, ...]

    @property
    def found(self) -> bool:
        return self.rank is not None


@dataclass(frozen=True)
class NeedleReport:
    k: int
    outcomes: tuple[NeedleOutcome, ...]

    @property
    def accuracy(self) -> float:
        """answered / asked."""
        return sum(o.found for o in self.outcomes) / len(self.outcomes)

    @property
    def missed(self) -> tuple[str, ...]:
        return tuple(o.question.id for o in self.outcomes if not o.found)


def needle_accuracy(retriever: HybridRetriever, questions: Sequence[NeedleQuestion], *, k: int = 3) -> NeedleReport:
    """Ask every question; a question is answered when a top-``k`` chunk contains its answer."""
    k = check_top_k(k, "k")
    if not questions:
        raise InvalidArgument("needle_accuracy needs at least one question")
    outcomes = []
    for question in questions:
        hits = retriever.search(question.question, k=k)
        rank = None
        for position, hit in enumerate(hits, start=1):
            if question.answer in retriever.get(hit["chunk_id"])["text"]:  # type: ignore[index]
                rank = position
                break
        outcomes.append(NeedleOutcome(question, rank, tuple(hit["chunk_id"] for hit in hits)))
    return NeedleReport(k, tuple(outcomes))


def needle_gate(report: NeedleReport, threshold: float = NEEDLE_THRESHOLD) -> GateResult:
    """Pass when ``report.accuracy >= threshold``; the failing cases are the missed question ids."""
    if not 0 <= threshold <= 1:
        raise InvalidArgument(f"threshold must be in [0, 1], not {threshold!r}")
    answered = sum(o.found for o in report.outcomes)
    return GateResult(
        name=f"needle accuracy@{report.k} >= {threshold:.0%}",
        passed=report.accuracy >= threshold,
        detail=f"{answered}/{len(report.outcomes)} answered ({report.accuracy:.1%})",
        failing_cases=report.missed,
    )
