"""Four retrievers as a team would write them, outside the lab: rank-bm25 and plain Python only.

Each takes the gate's plug-in contract (``factory(chunks, vectors)`` returning
an object with ``search(query, caller, on_date, top_k)`` that gives
``(chunk_id, score)`` pairs) and reads only the chunk and caller fields. Three
carry a classic mistake; ``filter_first`` is the correct design.
"""

from rank_bm25 import BM25Okapi


def words(text):
    return [w.strip(".,:;()?!").lower() for w in text.split() if w.strip(".,:;()?!")]


def allowed(chunk, caller, day, *, dates=True):
    ok = chunk.region == caller.region and chunk.acl_tag in caller.acl_tags
    if dates:
        ok = ok and chunk.effective_from <= day and (chunk.effective_to is None or day <= chunk.effective_to)
    return ok


def ranked(pairs, top_k):
    pairs = [(cid, float(s)) for cid, s in pairs if s > 0]
    return sorted(pairs, key=lambda p: (-p[1], p[0]))[:top_k]


class PostFilter:
    """Ranks every stored chunk, over-fetches 4 x top_k, drops what the caller may not see, keeps top_k."""

    def __init__(self, chunks, vectors):
        self.chunks = list(chunks)
        self.bm25 = BM25Okapi([words(c.text) for c in self.chunks]) if self.chunks else None

    def search(self, query, caller, on_date, top_k):
        if self.bm25 is None:
            return []
        scores = self.bm25.get_scores(words(query))
        fetched = ranked(((c.chunk_id, s) for c, s in zip(self.chunks, scores)), 4 * top_k)
        by_id = {c.chunk_id: c for c in self.chunks}
        return [(cid, s) for cid, s in fetched if allowed(by_id[cid], caller, on_date)][:top_k]


class FilterFirst:
    """The correct design: keep the caller's chunks, then rank only those (statistics included)."""

    dates = True

    def __init__(self, chunks, vectors):
        self.chunks = list(chunks)

    def search(self, query, caller, on_date, top_k):
        mine = [c for c in self.chunks if allowed(c, caller, on_date, dates=self.dates)]
        if not mine:
            return []
        scores = BM25Okapi([words(c.text) for c in mine]).get_scores(words(query))
        return ranked(((c.chunk_id, s) for c, s in zip(mine, scores)), top_k)


class IgnoresDates(FilterFirst):
    """Filters by region and tag first, but forgot the effective dates."""

    dates = False


class GlobalIdf:
    """Filters first, but scores with an index over every stored chunk (idf, avgdl and N from all of them)."""

    def __init__(self, chunks, vectors):
        self.chunks = list(chunks)
        self.bm25 = BM25Okapi([words(c.text) for c in self.chunks]) if self.chunks else None

    def search(self, query, caller, on_date, top_k):
        rows = [i for i, c in enumerate(self.chunks) if allowed(c, caller, on_date)]
        if not rows:
            return []
        scores = self.bm25.get_batch_scores(words(query), rows)
        return ranked(((self.chunks[i].chunk_id, s) for i, s in zip(rows, scores)), top_k)


def post_filter(chunks, vectors):
    return PostFilter(chunks, vectors)


def filter_first(chunks, vectors):
    return FilterFirst(chunks, vectors)


def ignores_dates(chunks, vectors):
    return IgnoresDates(chunks, vectors)


def global_idf(chunks, vectors):
    return GlobalIdf(chunks, vectors)
