"""What ``search`` may return: the shapes teams' retrievers answer in, async searches, and the contract error.

A team gates the retriever it runs, so the gate reads what vector stores and frameworks return
(dicts, LangChain Documents, Qdrant points, LlamaIndex nodes) and awaits an ``async def search``,
instead of asking for an adapter that could itself be wrong. Each accepted shape must read to the same
observation as the ``(chunk_id, score)`` pairs it stands for; a shape the gate cannot read sets
``Observation.contract`` (the run can stop at the first search), and a bad value in one answer does not.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
from factories import make_chunk

import labsrc
from labsrc.evaluation.answers import ACCEPTED_SHAPES, CONTRACT_DOCS
from labsrc.evaluation.subject import Observation, Request, observe
from labsrc.gate.worker_loop import plain_observation, unplain_observation
from labsrc.gate.workers import IsolatedBuild

DAY = dt.date(2026, 5, 27)
ME = labsrc.Caller("me", "EU", {"t"})
PAIRS = [("a", 2.5), ("b", 1.0)]


class Returns:
    def __init__(self, value):
        self.value = value

    def search(self, query, caller, on_date, top_k):
        return self.value


def seen(value, top_k: int = 2) -> Observation:
    return observe(Returns(value), "q", ME, DAY, top_k)


class Attrs:
    """Any object with attributes, as a client library's result class is (duck typing, no import)."""

    def __init__(self, **attributes):
        self.__dict__.update(attributes)


def _generator():
    yield from PAIRS


# Every entry stands for PAIRS: the same ids, the same scores, best first.
EQUIVALENT = {
    "tuples": PAIRS,
    "lists": [list(p) for p in PAIRS],
    "generator": _generator,  # called per test: a generator is read once
    "tuple of pairs": tuple(PAIRS),
    "policy chunks": [(make_chunk("a"), 2.5), (make_chunk("b"), 1.0)],
    "dicts id score": [{"id": "a", "score": 2.5, "text": "..."}, {"id": "b", "score": 1}],
    "dicts chunk_id similarity": [{"chunk_id": "a", "similarity": 2.5}, {"chunk_id": "b", "similarity": 1.0}],
    "dicts doc_id relevance_score": [{"doc_id": "a", "relevance_score": 2.5},
                                     {"doc_id": "b", "relevance_score": 1.0}],
    "dicts chunk_id wins over id": [{"id": "x1", "chunk_id": "a", "score": 2.5},
                                    {"id": "x2", "chunk_id": "b", "score": 1}],
    "objects id score": [Attrs(id="a", score=2.5), Attrs(id="b", score=1.0)],
    "objects chunk_id score": [Attrs(chunk_id="a", score=2.5), Attrs(chunk_id="b", score=1.0)],
    "qdrant-like payload": [Attrs(id=7, score=2.5, payload={"chunk_id": "a"}),
                            Attrs(id=8, score=1.0, payload={"id": "b"})],
    # A node's metadata doc_id usually names its parent document: node_id is read first.
    "llamaindex-like node_id": [Attrs(node_id="a", score=2.5, metadata={"doc_id": "parent"}),
                                Attrs(node_id="b", score=1.0, metadata={})],
    "document-like metadata": [Attrs(page_content="x", id=None, metadata={"id": "a", "score": 2.5}),
                               Attrs(page_content="y", id=None, metadata={"chunk_id": "b", "relevance_score": 1.0})],
    # A vector store's own key (a UUID in Document.id) does not hide the chunk id kept in the metadata.
    "document-like store key beside the chunk id": [
        Attrs(page_content="x", id="uuid-1", metadata={"id": "a"}, score=2.5),
        Attrs(page_content="y", id="uuid-2", metadata={"id": "b"}, score=1.0),
    ],
    "(document-like, score) pairs": [(Attrs(page_content="x", metadata={"chunk_id": "a"}), 2.5),
                                     (Attrs(page_content="y", metadata={"chunk_id": "b"}), 1.0)],
    "(dict, score) pairs": [({"id": "a"}, 2.5), ({"id": "b"}, 1.0)],
}


@pytest.mark.parametrize("value", list(EQUIVALENT.values()), ids=list(EQUIVALENT))
def test_each_accepted_shape_reads_to_the_same_observation_as_its_pairs(value) -> None:
    expected = seen(PAIRS)
    observation = seen(value() if callable(value) else value)
    assert observation.error is None and observation.contract is None
    assert observation.lanes == expected.lanes == {"hybrid": (("a", 2.5), ("b", 1.0))}


def test_real_langchain_documents_are_read() -> None:
    documents = pytest.importorskip("langchain_core.documents")
    Document = documents.Document
    scored = [Document(page_content="x", metadata={"chunk_id": "a", "score": 2.5}),
              Document(page_content="y", id="store-uuid", metadata={"id": "b", "score": 1.0})]
    assert seen(scored).lanes == seen(PAIRS).lanes
    with_score = [(Document(page_content="x", id="a"), 2.5), (Document(page_content="y", metadata={"id": "b"}), 1.0)]
    assert seen(with_score).lanes == seen(PAIRS).lanes
    # similarity_search returns Documents without scores: the contract error says where the score comes from.
    unscored = seen([Document(page_content="x", metadata={"id": "a"})])
    assert unscored.contract is not None and "similarity_search_with_relevance_scores" in unscored.contract


def test_real_llamaindex_nodes_with_score_are_read() -> None:
    schema = pytest.importorskip("llama_index.core.schema")
    nodes = [schema.NodeWithScore(node=schema.TextNode(id_="a", text="x"), score=2.5),
             schema.NodeWithScore(node=schema.TextNode(id_="b", text="y", metadata={"source": "f.md"}), score=1.0)]
    assert seen(nodes).lanes == seen(PAIRS).lanes
    unscored = seen([schema.NodeWithScore(node=schema.TextNode(id_="a", text="x"))])  # score=None: not scored
    assert unscored.contract is not None and "result 1 ('a') has no score" in unscored.contract


def test_real_qdrant_points_are_read_by_their_payload_id() -> None:
    models = pytest.importorskip("qdrant_client.http.models")
    points = [models.ScoredPoint(id=7, version=1, score=2.5, payload={"chunk_id": "a"}),
              models.ScoredPoint(id="b", version=1, score=1.0, payload=None)]
    assert seen(points).lanes == seen(PAIRS).lanes
    # Qdrant's own ids are integers or UUIDs: without the chunk id in the payload there is no chunk id.
    keyed = seen([models.ScoredPoint(id=7, version=1, score=2.5, payload={"text": "x"})])
    assert keyed.contract is not None and "has chunk_id 7 (int)" in keyed.contract and "payload" in keyed.contract


# --- shapes the gate cannot read: a contract error ---------------------------------------------------


class Response:
    """A pydantic-style response (Qdrant's QueryResponse): iterating it gives its fields, not its results."""

    model_fields = {"points": None}

    def __iter__(self):
        yield ("points", [])


UNUSABLE = {
    "None": (None, "search returned None"),
    "a str": ("a", "search returned str"),
    "a dict": ({"ids": [["a"]], "distances": [[0.1]]}, "search returned dict with keys ['distances', 'ids']"),
    "a set": ({("a", 1.0)}, "search returned set: a set has no order"),
    "one record": (Attrs(id="a", score=1.0), "search returned one Attrs: return a list of them"),
    "a number": (3, "search returned int"),
    "a response model": (Response(), "search returned Response: a response model is not a list of results"),
    "ids alone": (["a", "b"], "search returned a list of str: result 1 is 'a': an id alone has no score"),
    "dicts without an id": ([{"text": "x", "rank": 1}], "search returned a list of dict with keys ['rank', 'text']: "
                                                         "result 1 has no id key"),
    "dicts without a score": ([{"id": "a", "distance": 0.2}], "result 1 ('a') has no score ('score', "),
    "a triple": ([("a", 1.0, "text")], "result 1 is ('a', 1.0, 'text'), not a (chunk_id, score) pair"),
    "a number item": ([0.5], "search returned a list of float: result 1 is 0.5 (float), not a result"),
    "an object without an id": ([Attrs(score=1.0)], "result 1 is a Attrs that has no chunk id"),
    "an object without a score": ([Attrs(id="a")], "result 1 ('a') has no score (.score, "),
    "a pair whose record has no id": ([(Attrs(metadata={}), 1.0)], "result 1 is a (Attrs, score) pair whose Attrs has"),
    "an int id": ([(1, 0.5)], "result 1 has chunk_id 1 (int); expected a str"),
    "a str score": ([("a", "0.5")], "result 1 ('a') has score '0.5' (str); expected a finite number"),
    "a bool score": ([("a", True)], "result 1 ('a') has score True (bool)"),
    "a None score in a pair": ([("a", None)], "result 1 ('a') has score None (NoneType)"),
    "a later item of another shape": ([("a", 1.0), "b"], "result 2 is 'b'"),
}


@pytest.mark.parametrize(("value", "fragment"), list(UNUSABLE.values()), ids=list(UNUSABLE))
def test_an_unusable_shape_is_a_contract_error_naming_what_came_back_and_what_is_read(value, fragment) -> None:
    observation = seen(value)
    assert observation.contract is not None and fragment in observation.contract, observation.contract
    assert observation.contract.endswith(f"{ACCEPTED_SHAPES} ({CONTRACT_DOCS})")
    assert "\n" not in observation.contract
    assert observation.error == f"TypeError: {observation.contract}"  # every consumer of error still sees it
    assert observation.lanes == {"hybrid": ()}


def test_the_contract_names_every_accepted_shape() -> None:
    for shape in ("RetrievalResult", "(chunk_id, score) pairs", "'chunk_id'", "'id'", "'score'", ".id and .score",
                  "LangChain Documents", "(Document, score) pairs"):
        assert shape in ACCEPTED_SHAPES
    assert CONTRACT_DOCS == "docs/gating.md#what-search-may-return"


VALUE_ERRORS = {
    "nan score": ([("a", math.nan)], "result 1 ('a') has score nan; expected a finite number"),
    "infinite score in a dict": ([{"id": "a", "score": math.inf}], "has score inf"),
    "repeated id in dicts": ([{"id": "a", "score": 2}, {"chunk_id": "a", "score": 1}], "'a' again at rank 2"),
    "repeated id in objects": ([Attrs(id="a", score=2), Attrs(id="a", score=1)], "'a' again at rank 2"),
    "too many": ([{"id": c, "score": 1.0} for c in "abc"], "search returned 3 results for top_k=2"),
    "endless": (({"id": f"c{i}", "score": 1.0} for i in range(10**9)), "search returned more results for top_k=2"),
}


@pytest.mark.parametrize(("value", "fragment"), list(VALUE_ERRORS.values()), ids=list(VALUE_ERRORS))
def test_a_bad_value_in_one_answer_is_an_error_not_a_contract_error(value, fragment) -> None:
    observation = seen(value)
    assert observation.error is not None and fragment in observation.error
    assert observation.contract is None


def test_a_search_that_raises_is_an_error_not_a_contract_error() -> None:
    class Raises:
        def search(self, query, caller, on_date, top_k):
            raise TypeError("search returned nothing useful")  # even a TypeError: it raised, the shape is unknown

    observation = observe(Raises(), "q", ME, DAY, 2)
    assert observation.error is not None and observation.error.startswith("TypeError: search returned nothing")
    assert observation.contract is None


# --- async searches ---------------------------------------------------------------------------------


class AsyncPairs:
    """An async retriever: answers ``query`` with a pair naming it, after a real suspension."""

    def __init__(self, pause_s: float = 0.0):
        self.pause_s = pause_s

    async def search(self, query, caller, on_date, top_k):
        await asyncio.sleep(self.pause_s)
        return [(query, 1.0)]


def test_an_async_search_is_awaited_and_timed_with_its_await() -> None:
    observation = observe(AsyncPairs(pause_s=0.05), "a", ME, DAY, 2)
    assert observation.error is None and observation.lanes == {"hybrid": (("a", 1.0),)}
    assert observation.timings_ms["request"] >= 50.0


def test_a_sync_search_returning_an_awaitable_is_awaited() -> None:
    class Future:
        def __await__(self):
            yield from asyncio.sleep(0).__await__()
            return PAIRS

    class ReturnsAwaitable:
        def search(self, query, caller, on_date, top_k):
            return Future()

    assert observe(ReturnsAwaitable(), "q", ME, DAY, 2).lanes == seen(PAIRS).lanes


def test_an_awaited_retrieval_result_keeps_its_lanes_and_trace(data: labsrc.Lesson) -> None:
    inner = labsrc.PolicyRetriever(data.chunks, data.vectors)

    class AsyncWrapper:
        async def search(self, query, caller, on_date, top_k):
            return inner.search(query, caller, on_date, top_k)

    expected = observe(inner, "RPL-14", data.luna, data.eval_date, 2)
    awaited = observe(AsyncWrapper(), "RPL-14", data.luna, data.eval_date, 2)
    assert awaited.lanes_reported and awaited.lanes == expected.lanes and awaited.trace == expected.trace


def test_an_awaited_search_that_raises_is_its_cases_error_with_the_users_line() -> None:
    class Raises:
        async def search(self, query, caller, on_date, top_k):
            await asyncio.sleep(0)
            raise KeyError("missing")

    observation = observe(Raises(), "q", ME, DAY, 2)
    assert observation.error is not None and observation.error.startswith("KeyError: 'missing' (")
    assert "test_subject_shapes.py:" in observation.error and observation.contract is None


def test_an_awaited_unusable_shape_is_a_contract_error() -> None:
    class Dicts:
        async def search(self, query, caller, on_date, top_k):
            return [{"text": "x"}]

    assert "result 1 has no id key" in (observe(Dicts(), "q", ME, DAY, 2).contract or "")


def test_system_exit_from_an_awaited_search_reaches_the_caller_and_the_loop_survives() -> None:
    class Exits:
        async def search(self, query, caller, on_date, top_k):
            raise SystemExit(3)

    with pytest.raises(SystemExit):  # as from a sync search; the worker turns it into the case's error
        observe(Exits(), "q", ME, DAY, 2)
    assert observe(AsyncPairs(), "a", ME, DAY, 2).lanes == {"hybrid": (("a", 1.0),)}


class LockedAsync:
    """Async state bound to the loop of its first call: a lock made then, held across an await."""

    def __init__(self):
        self.lock: asyncio.Lock | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.holders = 0
        self.most_holders = 0

    async def search(self, query, caller, on_date, top_k):
        if self.lock is None:
            self.lock, self.loop = asyncio.Lock(), asyncio.get_running_loop()
        if asyncio.get_running_loop() is not self.loop:
            raise RuntimeError("called on another event loop than its client's")
        async with self.lock:
            self.holders += 1
            self.most_holders = max(self.most_holders, self.holders)
            await asyncio.sleep(0.001)
            self.holders -= 1
        return [(query, float(len(query)))]


def test_an_async_search_answers_correctly_from_16_threads_at_once() -> None:
    subject = LockedAsync()
    queries = [f"q{i}" for i in range(64)]
    answers: dict[str, Observation] = {}
    barrier = threading.Barrier(16)

    def serve(mine: list[str]) -> None:
        barrier.wait()
        for query in mine:
            answers[query] = observe(subject, query, ME, DAY, 2)

    threads = [threading.Thread(target=serve, args=(queries[i::16],)) for i in range(16)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert {q: a.lanes["hybrid"] for q, a in answers.items()} == {q: ((q, float(len(q))),) for q in queries}
    assert all(a.error is None for a in answers.values())
    assert subject.most_holders == 1  # the lock held: one loop served every thread
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]


def test_an_async_search_works_when_observe_is_called_inside_a_running_loop() -> None:
    async def notebook_cell() -> Observation:
        return observe(AsyncPairs(), "a", ME, DAY, 2)

    assert asyncio.run(notebook_cell()).lanes == {"hybrid": (("a", 1.0),)}


def test_no_coroutine_is_left_unawaited_even_with_warnings_as_errors() -> None:
    script = (
        "import asyncio, datetime as dt, gc, labsrc\n"
        "from labsrc.evaluation.subject import observe\n"
        "class R:\n"
        "    async def search(self, q, c, d, k):\n"
        "        await asyncio.sleep(0)\n"
        "        return [(q, 1.0)]\n"
        "o = observe(R(), 'a', labsrc.Caller('me', 'EU', {'t'}), dt.date(2026, 5, 27), 2)\n"
        "gc.collect()\n"
        "assert o.error is None and o.ids('hybrid') == ('a',), o\n"
    )
    done = subprocess.run([sys.executable, "-W", "error", "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_an_async_retriever_in_a_forked_worker_gets_a_loop_of_its_own(data: labsrc.Lesson) -> None:
    """The gate forks its workers from a process whose loop thread the fork does not copy."""
    assert observe(LockedAsync(), "warm", ME, DAY, 2).error is None  # this process's loop exists before the fork
    requests = [Request(f"q{i}", ME, DAY, 2) for i in range(32)]
    with IsolatedBuild(lambda chunks, vectors: LockedAsync(), (), None, search_timeout_s=60) as build:
        alone = build.search(requests[0])
        together, why_not = build.concurrently(requests, 16)
    assert alone.lanes == {"hybrid": (("q0", 2.0),)} and why_not is None and together is not None
    assert [o.lanes["hybrid"] for o in together] == [((r.query, float(len(r.query))),) for r in requests]


# --- the contract across the worker's pipe --------------------------------------------------------


def test_plain_and_unplain_keep_the_contract() -> None:
    broken = seen([{"text": "x"}])
    assert broken.contract is not None
    assert unplain_observation(plain_observation(broken)) == broken
    fine = seen(PAIRS)
    assert unplain_observation(plain_observation(fine)) == fine and fine.contract is None
    lanes, trace, timings, error, *_ = plain_observation(broken)  # the earlier fields keep their places
    assert unplain_observation((lanes, trace, timings, error)).contract is None


def test_a_contract_error_crosses_from_a_forked_worker() -> None:
    with IsolatedBuild(lambda chunks, vectors: Returns([{"text": "x", "rank": 1}]), (), None) as build:
        observation = build.search(Request("q", ME, DAY, 2))
    assert observation.contract is not None and "a list of dict with keys ['rank', 'text']" in observation.contract
    assert observation.error == f"TypeError: {observation.contract}"

