"""Retrievers that leak, or break the contract, in ways a case file alone does not catch; written outside the lab.

Plain Python and rank-bm25 only. Each module-level function is a factory for the
gate's plug-in contract: ``factory(chunks, vectors)`` returns an object whose
``search(query, caller, on_date, top_k)`` gives ``(chunk_id, score)`` pairs, best
first. ``correct`` is the sound design (filter first, then BM25 over what the
caller may see); every other class says in its docstring what it gets wrong.
They are meant for the held-out pharmacy corpus (tests/outside/pharmacy_corpus.py),
whose case file has a team's blind spots: no case asked by the caller with no tags,
no case quoting the code of a chunk hidden from its caller, no query asked by two
callers.

Ranking is deterministic: by (-score, chunk_id), scores <= 0 dropped.

The two ``helper_*`` factories start a process that outlives the worker the gate
builds them in; its command line carries :data:`HELPER_MARKER`, so a test finds
leftovers with ``pgrep -f labsrc-test-helper``. Their standard streams go to
/dev/null, so a leftover never holds the pipe of a caller that captures output.
"""

import os
import re
import subprocess
import sys

from rank_bm25 import BM25Okapi

#: On the command line of every helper process the helper_* factories start.
HELPER_MARKER = "labsrc-test-helper"
#: What a helper runs: sleeps 10 minutes (the marker is its argv[1], so ``pgrep -f`` finds it).
HELPER_ARGV = [sys.executable, "-c", "import time; time.sleep(600)", HELPER_MARKER]

#: A policy code as the pharmacy corpus writes them: CD-12, MED-7, IV-3, ABX-2.
CODE = re.compile(r"\b[A-Z]{2,4}-\d+\b")


def words(text):
    return [w.strip(".,:;()?!'\"").lower() for w in text.split() if w.strip(".,:;()?!'\"")]


def visible(chunk, caller, day):
    """The boundary: same region, a tag the caller holds, in force on ``day`` (both ends inclusive)."""
    return (
        chunk.region == caller.region
        and chunk.acl_tag in caller.acl_tags
        and chunk.effective_from <= day
        and (chunk.effective_to is None or day <= chunk.effective_to)
    )


def ranked(pairs, top_k):
    pairs = [(cid, float(s)) for cid, s in pairs if s > 0]
    return sorted(pairs, key=lambda p: (-p[1], p[0]))[:top_k]


def bm25_rank(chunks, query, top_k):
    """BM25 over ``chunks`` alone (its statistics come from them), top_k pairs."""
    if not chunks:
        return []
    scores = BM25Okapi([words(c.text) for c in chunks]).get_scores(words(query))
    return ranked(zip((c.chunk_id for c in chunks), scores), top_k)


class Correct:
    """Filter first, then rank: BM25 over the caller's visible chunks only, statistics included. Gets nothing wrong."""

    def __init__(self, chunks, vectors):
        self.chunks = list(chunks)

    def mine(self, caller, on_date):
        return [c for c in self.chunks if visible(c, caller, on_date)]

    def search(self, query, caller, on_date, top_k):
        return bm25_rank(self.mine(caller, on_date), query, top_k)


class QueryCache(Correct):
    """Correct, but answers are cached by ``(query, top_k)``: the caller and the date are not in the key.

    The commonest speed-up in the field. The first caller to ask a query fixes the
    answer every later caller gets for it, on any date: a pharmacist's answer,
    controlled-drug chunks included, is served to the ward nurse who asks the same
    words next. A case file in which no two callers share a query never sees it.
    """

    def __init__(self, chunks, vectors):
        super().__init__(chunks, vectors)
        self.cache = {}

    def search(self, query, caller, on_date, top_k):
        key = (query, top_k)
        if key not in self.cache:
            self.cache[key] = super().search(query, caller, on_date, top_k)
        return list(self.cache[key])


class FailOpenNoTags(Correct):
    """Correct, except a caller with no ACL tags counts as "no restrictions configured".

    The tag check is skipped when ``caller.acl_tags`` is empty, so an untagged
    caller (the agency contractor) sees every chunk of the region that is in force,
    controlled drugs and billing included. Region and dates are still checked.
    """

    def mine(self, caller, on_date):
        if caller.acl_tags:
            return super().mine(caller, on_date)
        return [c for c in self.chunks if c.region == caller.region and c.effective_from <= on_date
                and (c.effective_to is None or on_date <= c.effective_to)]


class CodeLookup(Correct):
    """Correct ranking, but a policy code in the query is looked up first and its chunk returned unchecked.

    Teams add an exact-match shortcut for codes ("what does CD-33 say"): a table
    from code to chunk, built from every chunk handed over. When the query names a
    code in the table, that chunk comes first (score: the best ranked score + 1),
    with no boundary check; the correct ranking fills the rest up to ``top_k``,
    without duplicates. Anyone who knows or guesses a hidden chunk's code gets the
    chunk. When two chunks name the same code, the table keeps the first
    (``keep="first"``) or the last (``keep="last"``) in the order handed.
    """

    keep = "first"

    def __init__(self, chunks, vectors):
        super().__init__(chunks, vectors)
        self.by_code = {}
        for chunk in self.chunks:
            for code in CODE.findall(chunk.text):
                if self.keep == "last" or code not in self.by_code:
                    self.by_code[code] = chunk

    def search(self, query, caller, on_date, top_k):
        hits = []
        for code in CODE.findall(query):
            chunk = self.by_code.get(code)
            if chunk is not None and chunk.chunk_id not in hits:
                hits.append(chunk.chunk_id)
        rest = super().search(query, caller, on_date, top_k + len(hits))
        if not hits:
            return rest[:top_k]
        best = rest[0][1] if rest else 0.0
        out = [(cid, best + 1.0) for cid in hits]
        out += [(cid, s) for cid, s in rest if cid not in hits]
        return out[:top_k]


class CodeLookupFirst(CodeLookup):
    """:class:`CodeLookup` whose code table keeps the FIRST chunk per code in the order handed (unchecked lookup)."""

    keep = "first"


class CodeLookupLast(CodeLookup):
    """:class:`CodeLookup` whose code table keeps the LAST chunk per code in the order handed (unchecked lookup)."""

    keep = "last"


class AsyncSearch(Correct):
    """Correct, but ``search`` is ``async def``: calling it returns a coroutine, never the pairs.

    Written for an asyncio service; called synchronously it gives a coroutine
    object, which nobody awaits (Python warns "coroutine ... was never awaited").
    """

    async def search(self, query, caller, on_date, top_k):
        return Correct.search(self, query, caller, on_date, top_k)


class DictResults(Correct):
    """Correct ranking, but returned as a list of dicts ``{"id": chunk_id, "score": score}``, not pairs.

    The shape a JSON API hands back; the contract asks for ``(chunk_id, score)`` pairs.
    """

    def search(self, query, caller, on_date, top_k):
        return [{"id": cid, "score": s} for cid, s in super().search(query, caller, on_date, top_k)]


class HelperNewSession(Correct):
    """Correct answers, but the factory starts a helper process in a new session and never stops it.

    As a local embedding server would be started: ``subprocess.Popen(...,
    start_new_session=True)``. The helper is in its own session and process group,
    so killing the worker's process group does not reach it; no ``close`` stops it.
    """

    def __init__(self, chunks, vectors):
        super().__init__(chunks, vectors)
        self.helper = subprocess.Popen(HELPER_ARGV, start_new_session=True, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _double_fork_daemon():
    """Classic daemonisation: fork; the child setsid()s, forks again and exits; the grandchild execs the helper.

    Returns in the calling process once the child has exited; the grandchild is
    re-parented to init (or the nearest subreaper) and sleeps 600 s.
    """
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.setsid()
            if os.fork() == 0:  # grandchild: the daemon
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.execv(sys.executable, HELPER_ARGV)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


class HelperDoubleFork(Correct):
    """Correct answers, but the factory double-forks a daemon (its own session, re-parented) and never stops it.

    Neither the worker's process group nor its children list holds the daemon:
    it outlives the worker, and the gate, until its 600 s sleep ends.
    """

    def __init__(self, chunks, vectors):
        super().__init__(chunks, vectors)
        _double_fork_daemon()


def correct(chunks, vectors):
    return Correct(chunks, vectors)


def query_cache(chunks, vectors):
    return QueryCache(chunks, vectors)


def fail_open_no_tags(chunks, vectors):
    return FailOpenNoTags(chunks, vectors)


def code_lookup_first(chunks, vectors):
    return CodeLookupFirst(chunks, vectors)


def code_lookup_last(chunks, vectors):
    return CodeLookupLast(chunks, vectors)


def async_search(chunks, vectors):
    return AsyncSearch(chunks, vectors)


def dict_results(chunks, vectors):
    return DictResults(chunks, vectors)


def helper_new_session(chunks, vectors):
    return HelperNewSession(chunks, vectors)


def helper_double_fork(chunks, vectors):
    return HelperDoubleFork(chunks, vectors)
