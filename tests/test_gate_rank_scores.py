"""Documents in rank order without scores (LangChain's ``EnsembleRetriever``): the five-line adapter of
``docs/gating.md#documents-in-rank-order-without-scores``, gated through ``gate_retriever`` on the starter folder.

The ensemble is real (``BM25Retriever`` and FAISS, fused by ``EnsembleRetriever``), built per request over the
caller's permitted chunks: filtered first, so the gate must pass it, with scores that carry only the order.
The same ensemble filtered after ranking must fail the rebuild gate, so the pass is not the adapter hiding
everything from the gate.
"""

from __future__ import annotations

import datetime as dt
import warnings
from pathlib import Path

import pytest

from labsrc.audit.gate_files import gate_from_files
from labsrc.boundary import block_reasons
from labsrc.evaluation.subject import observe
from labsrc.gate.config import GateConfig
from labsrc.lanes.dense import HashingEncoder
from labsrc.records.loading import load_chunks
from labsrc.records.policy import Caller
from labsrc.testing.starter import write_starter

with warnings.catch_warnings():  # langchain-community announces its sunset on import
    warnings.simplefilter("ignore")
    pytest.importorskip("rank_bm25", reason="rank-bm25 (the audit extra)")
    pytest.importorskip("faiss", reason="faiss-cpu (the audit extra)")
    EnsembleRetriever = pytest.importorskip("langchain_classic.retrievers").EnsembleRetriever
    community = pytest.importorskip("langchain_community.retrievers")
    FAISS = pytest.importorskip("langchain_community.vectorstores").FAISS
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings


class Hashed(Embeddings):
    """The lab's hashing encoder as LangChain embeddings (no model to download)."""

    encoder = HashingEncoder()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[float(x) for x in v] for v in self.encoder.encode(texts)]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def ensemble_over(chunks, top_k: int):
    """LangChain's hybrid how-to: BM25 and FAISS in an EnsembleRetriever; returns Documents without scores."""
    documents = [Document(page_content=c.text, metadata={"chunk_id": c.chunk_id}) for c in chunks]
    bm25 = community.BM25Retriever.from_documents(documents, k=top_k)
    dense = FAISS.from_documents(documents, Hashed()).as_retriever(search_kwargs={"k": top_k})
    return EnsembleRetriever(retrievers=[bm25, dense], weights=[0.5, 0.5], id_key="chunk_id")


class FilteredEnsemble:
    """Filter first, then the ensemble over what is left, then the adapter of docs/gating.md."""

    def __init__(self, chunks, vectors) -> None:
        self.chunks = tuple(chunks)

    def search(self, query, caller, on_date, top_k):
        mine = [c for c in self.chunks if not block_reasons(caller, c, on_date)]
        if not mine:  # BM25 cannot index nothing: a caller who may see nothing gets nothing
            return []
        # The adapter, as docs/gating.md gives it: Documents in rank order, scored by their rank.
        docs = ensemble_over(mine, top_k).invoke(query)[:top_k]
        return [(doc.metadata["chunk_id"], 1.0 / rank) for rank, doc in enumerate(docs, start=1)]


class PostFiltered(FilteredEnsemble):
    """The ensemble over every stored chunk, hidden ones removed from its answer: short lists, other orders."""

    def search(self, query, caller, on_date, top_k):
        stored = {c.chunk_id: c for c in self.chunks}
        docs = ensemble_over(self.chunks, top_k).invoke(query)
        kept = [d for d in docs if not block_reasons(caller, stored[d.metadata["chunk_id"]], on_date)][:top_k]
        return [(doc.metadata["chunk_id"], 1.0 / rank) for rank, doc in enumerate(kept, start=1)]


@pytest.fixture(scope="module")
def starter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("rank-scores")
    write_starter(folder)
    return folder


def gate(folder: Path, factory):
    # The starter's cases and dates; its lane and latency budgets are the starter retriever's (an ensemble
    # reports no lanes), so the config holds what this test is about: the boundary and noninterference gates.
    config = GateConfig(top_k=2, on_date=dt.date(2026, 6, 15), min_recall={"hybrid": 0.9}, hybrid_rule="off",
                        probe_budget=20, repetitions=1, warmup=0, concurrency=4)
    data = folder / "data"
    return gate_from_files(str(data / "chunks.jsonl"), str(data / "callers.json"), str(data / "cases.jsonl"),
                           factory, config=config)


def statuses(run) -> dict[str, str]:
    return {g.name: g.status for g in run.gates}


def test_an_ensembles_documents_without_scores_are_refused_pointing_to_the_adapter(starter) -> None:
    class Unscored(FilteredEnsemble):
        def search(self, query, caller, on_date, top_k):
            return ensemble_over(self.chunks, top_k).invoke(query)[:top_k]  # Documents, no scores

    chunks = load_chunks(starter / "data" / "chunks.jsonl")
    dana = Caller("dana", "emea", ("it:staff",))
    observation = observe(Unscored(chunks, None), "VPN from home", dana, dt.date(2026, 6, 15), 2)
    assert observation.contract is not None
    assert "similarity_search_with_relevance_scores returns (Document, score) pairs" in observation.contract
    assert "in rank order without scores (LangChain's EnsembleRetriever" in observation.contract
    assert "docs/gating.md#documents-in-rank-order-without-scores" in observation.contract


def test_a_pre_filtered_ensemble_with_rank_scores_passes_and_its_scores_compare_exactly(starter) -> None:
    run = gate(starter, FilteredEnsemble)
    verdicts = statuses(run)
    assert run.passed, [(g.name, g.status, g.detail) for g in run.gates if not g.passed]
    for name in ("boundary on every returned id", "factory indexes what it is handed", "repeatable builds",
                 "noninterference by rebuild", "noninterference by bait", "same answers under concurrent requests",
                 "generated probes", "recall@2 hybrid"):
        assert verdicts[name] == "PASS", name
    # Rank scores reproduce exactly when ids and order do: the rebuild compared them, not ids and order only.
    assert run.noninterference == "exact"
    rebuild = next(g for g in run.gates if g.name == "noninterference by rebuild")
    assert "(exact): 0 differ" in rebuild.detail
    # Every answer's scores are 1/rank: the order, and nothing the ranking knew.
    answered = [o for o in run.outcomes if o.ids["hybrid"]]
    assert answered and all(o.scores["hybrid"] == tuple(1.0 / r for r in range(1, len(o.ids["hybrid"]) + 1))
                            for o in answered)


def test_the_same_ensemble_filtered_after_ranking_fails_the_rebuild_gate(starter) -> None:
    run = gate(starter, PostFiltered)
    rebuild = next(g for g in run.gates if g.name == "noninterference by rebuild")
    assert rebuild.status == "FAIL" and rebuild.findings
    assert not run.passed
