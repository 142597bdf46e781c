"""Retrievers of the shapes teams run in the field, written outside the lab: rank-bm25 and plain Python only.

Each module-level function is a factory for the gate's plug-in contract:
``factory(chunks, vectors)`` returns an object whose ``search(query, caller,
on_date, top_k)`` gives ``(chunk_id, score)`` pairs, best first. ``correct``
is the sound design; every other class says in its docstring what it gets
wrong. The last six are hostile on purpose: they exercise the gate's
containment (exits, endless answers, stray threads, rewritten records).

Ranking is deterministic: by (-score, chunk_id), scores <= 0 dropped.
"""

import datetime as dt
import hashlib
import itertools
import json
import os
import threading
import time
import types

from rank_bm25 import BM25Okapi

HANG_WORD = "tokyo"  # only the field corpus case "apac-latency" asks about Tokyo


def words(text):
    return [w.strip(".,:;()?!'\"").lower() for w in text.split() if w.strip(".,:;()?!'\"")]


def visible(chunk, caller, day, *, early_days=0):
    """The boundary: same region, a tag the caller holds, in force on ``day`` (both ends inclusive)."""
    return (
        chunk.region == caller.region
        and chunk.acl_tag in caller.acl_tags
        and chunk.effective_from <= day + dt.timedelta(days=early_days)
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

    early_days = 0

    def __init__(self, chunks, vectors):
        self.chunks = list(chunks)

    def mine(self, caller, on_date):
        return [c for c in self.chunks if visible(c, caller, on_date, early_days=self.early_days)]

    def search(self, query, caller, on_date, top_k):
        return bm25_rank(self.mine(caller, on_date), query, top_k)


# The statistics table of ModuleCache, filled by the first build in this process.
_STATS_CACHE = {}


class ModuleCache(Correct):
    """Filters first, but keeps the corpus statistics (idf, avgdl) in a module-level cache.

    The first build in a process fills the cache from every chunk it was handed,
    hidden ones included; every later build in the same process reuses it, even
    over a different set of chunks. Scores therefore depend on chunks the caller
    may not see, and on what was built before in the process.
    """

    def __init__(self, chunks, vectors):
        super().__init__(chunks, vectors)
        if "bm25" not in _STATS_CACHE and self.chunks:
            _STATS_CACHE["bm25"] = BM25Okapi([words(c.text) for c in self.chunks])
        self.stats = _STATS_CACHE.get("bm25")

    def search(self, query, caller, on_date, top_k):
        mine = self.mine(caller, on_date)
        if not mine or self.stats is None:
            return []
        s, terms = self.stats, words(query)
        pairs = []
        for chunk in mine:
            doc = words(chunk.text)
            norm = s.k1 * (1 - s.b + s.b * len(doc) / s.avgdl)
            score = 0.0
            for term in terms:
                tf = doc.count(term)
                score += (s.idf.get(term) or 0.0) * tf * (s.k1 + 1) / (tf + norm)
            pairs.append((chunk.chunk_id, score))
        return ranked(pairs, top_k)


class IgnoresChunks:
    """A client of an existing search service: ignores the chunks it is handed and opens its own index.

    It reads the chunk records from the JSONL file named by ``FIELD_INDEX``,
    ranks every one of them with BM25 over all of them, and drops what the
    caller may not see afterwards (post-filter). It answers from the same index
    whatever the gate builds it over, and its scores use hidden chunks' statistics.
    """

    def __init__(self, chunks, vectors):
        path = os.environ.get("FIELD_INDEX")
        if not path:
            raise RuntimeError("ignores_chunks: set FIELD_INDEX to the chunks.jsonl file of the index to open")
        self.chunks = []
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    r = json.loads(line)
                    r["effective_from"] = dt.date.fromisoformat(r["effective_from"])
                    r["effective_to"] = r["effective_to"] and dt.date.fromisoformat(r["effective_to"])
                    self.chunks.append(types.SimpleNamespace(**r))
        self.bm25 = BM25Okapi([words(c.text) for c in self.chunks]) if self.chunks else None

    def search(self, query, caller, on_date, top_k):
        if self.bm25 is None:
            return []
        scores = self.bm25.get_scores(words(query))
        every = ranked(zip((c.chunk_id for c in self.chunks), scores), len(self.chunks))
        by_id = {c.chunk_id: c for c in self.chunks}
        return [(cid, s) for cid, s in every if visible(by_id[cid], caller, on_date)][:top_k]


class ThreadUnsafe(Correct):
    """Filters correctly, but keeps the current request's caller and date on the shared instance.

    ``search`` stores them, waits on its backend (the sleep stands for the round
    trip), ranks, then filters with whatever ``self.caller``/``self.day`` hold by
    then. One request at a time it is correct; when requests overlap, one
    caller's answer is filtered with another caller's rights.
    """

    def search(self, query, caller, on_date, top_k):
        self.caller = caller
        self.day = on_date
        time.sleep(0.002)  # a round trip to the backend
        mine = [c for c in self.chunks if visible(c, self.caller, self.day)]
        return bm25_rank(mine, query, top_k)


class Hangs(Correct):
    """Correct, except ``search`` never returns for a query holding the word ``HANG_WORD`` ("tokyo").

    In the field corpus only the case "apac-latency" asks about Tokyo: a backend
    that deadlocks on one query while answering every other.
    """

    def search(self, query, caller, on_date, top_k):
        if HANG_WORD in words(query):
            threading.Event().wait()  # blocks forever
        return super().search(query, caller, on_date, top_k)


class NoisyScores(Correct):
    """Correct ranking, but the reported scores carry noise from a per-build random seed.

    As an approximate index with a random seed does: ids and order come from the
    exact scores, then each reported score moves by up to 1e-3. The same query on
    one build gives the same scores; two builds over the same chunks do not.
    """

    def __init__(self, chunks, vectors):
        super().__init__(chunks, vectors)
        self.seed = os.urandom(16)

    def noise(self, query, chunk_id):
        digest = hashlib.sha256(self.seed + f"{query}\0{chunk_id}".encode()).digest()
        return (int.from_bytes(digest[:8], "big") / 2**64 * 2 - 1) * 1e-3

    def search(self, query, caller, on_date, top_k):
        return [(cid, s + self.noise(query, cid)) for cid, s in super().search(query, caller, on_date, top_k)]


class OffByOneDate(Correct):
    """Correct, except the date check admits a chunk the day before it takes effect (from <= on_date + 1)."""

    early_days = 1


class ExitInSearch(Correct):
    """Hostile: ``search`` raises SystemExit(0) for every query, as a library calling sys.exit would."""

    def search(self, query, caller, on_date, top_k):
        raise SystemExit(0)


class Endless(Correct):
    """Hostile: ``search`` returns an endless generator of pairs (unique ids, finite scores), whatever top_k."""

    def search(self, query, caller, on_date, top_k):
        return ((f"endless-{i}", 1.0 / (i + 1)) for i in itertools.count())


class MillionPairs(Correct):
    """Hostile: ``search`` returns a list of 1,000,000 pairs, the same few ids over and over, whatever top_k."""

    def search(self, query, caller, on_date, top_k):
        ids = [c.chunk_id for c in self.chunks[:3]] or ["none"]
        return [(ids[i % len(ids)], 1.0) for i in range(1_000_000)]


class StartsThread(Correct):
    """Hostile: correct answers, but the factory starts a non-daemon thread that loops forever.

    A process that waits for its threads at exit never ends after building it.
    """

    def __init__(self, chunks, vectors):
        super().__init__(chunks, vectors)
        threading.Thread(target=self._heartbeat, name="field-heartbeat", daemon=False).start()

    @staticmethod
    def _heartbeat():
        while True:
            time.sleep(0.5)


class RewritesChunks(Correct):
    """Hostile: the factory rewrites the chunk records it was handed, then filters "correctly" on them.

    Every chunk's window is widened to "always in force" (effective_from =
    date.min, effective_to = None) through ``object.__setattr__`` on the frozen
    records, so superseded and not-yet-effective chunks come back. In a forked
    worker the rewrite changes the worker's copy only.
    """

    def __init__(self, chunks, vectors):
        for chunk in chunks:
            object.__setattr__(chunk, "effective_from", dt.date.min)
            object.__setattr__(chunk, "effective_to", None)
        super().__init__(chunks, vectors)


def correct(chunks, vectors):
    return Correct(chunks, vectors)


def module_cache(chunks, vectors):
    return ModuleCache(chunks, vectors)


def ignores_chunks(chunks, vectors):
    return IgnoresChunks(chunks, vectors)


def thread_unsafe(chunks, vectors):
    return ThreadUnsafe(chunks, vectors)


def hangs(chunks, vectors):
    return Hangs(chunks, vectors)


def noisy_scores(chunks, vectors):
    return NoisyScores(chunks, vectors)


def off_by_one_date(chunks, vectors):
    return OffByOneDate(chunks, vectors)


def exit_in_search(chunks, vectors):
    return ExitInSearch(chunks, vectors)


def exit_in_factory(chunks, vectors):
    """Hostile: the factory itself raises SystemExit(0) before building anything."""
    raise SystemExit(0)


def endless(chunks, vectors):
    return Endless(chunks, vectors)


def million_pairs(chunks, vectors):
    return MillionPairs(chunks, vectors)


def starts_thread(chunks, vectors):
    return StartsThread(chunks, vectors)


def rewrites_chunks(chunks, vectors):
    return RewritesChunks(chunks, vectors)
