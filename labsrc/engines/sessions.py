"""Which requests a pooled session may serve: only those that see exactly the rows its earlier requests saw.

A request can leave something in its session that no reset removes and no
catalog lists. A placeholder setting is one: inside Luna's request,
``SELECT count(set_config('leak.' || chunk_id, '', false)) FROM lab_chunks``
spells each of her ids into a setting *name*. ``RESET ALL`` and
``DISCARD ALL`` reset the values but keep the names, and PostgreSQL hides
placeholders from ``pg_settings`` and ``SHOW ALL`` (they carry the
``NO_SHOW_ALL`` flag), so the pool's check (:func:`~labsrc.engines.pool.leftover_state`)
cannot find them to close the session. The next request on that backend tests
``current_setting('leak.eu_carrier_loss_v1', true) IS NOT NULL``: one bit per
name, any content spelled out.

Whatever a request leaves can hold only what that request could read: the rows
its boundary lets through. The boundary is a function of the caller's region,
ACL tags and the request's date (:func:`boundary_key`), so two requests with the
same key see the same rows. A session therefore keeps serving requests with the
key of its first one, and is closed when a request with another key draws it
(:class:`SessionBoundaries`); the pool opens a fresh one in its place. A
workload of one permission set loses nothing; one that alternates permission
sets pays a new, cold session per switch (connecting, the catalog caches, the
statements psycopg had prepared). Measured with ``benchmarks/bench_sessions.py``
(SciFact cycled to 100,000 chunks, 384-d, 40 permission sets, 420 requests per
row, against the pool as it was, in one run, the pools taking turns to go first):
every request a switch, p50 / p95 80.3 / 163.5 ms against 68.0 / 135.7 (1.18× /
1.20×); each set's requests one after another, 10 a set, 75.5 / 148.7 against
60.9 / 125.9 (1.24× / 1.18×).

The caller's ``actor_id`` is not part of the key: two actors with the same region
and tags see the same rows on the same day.

Same key, same rows holds only while the rows stay as they are. When the owner
re-tags a chunk away from Luna, her next request would reuse a session whose
placeholder names that chunk. So a session is also bound to the *corpus
version* its first request saw (:func:`corpus_version`): every boundary group
(:mod:`labsrc.engines.groups`) carries a version drawn at random whenever one
of its chunks, postings or vectors is written, and a request reads, through
row-level security, the count and the sum of the versions of the groups it may
see. Any write to a row the caller sees (a load, an update, a delete, a
re-tag away from or into the caller's groups) changes that pair; a write to
rows the caller does not see does not, and the random versions say nothing
about it. A request whose pair differs from its session's first one closes the
session (:meth:`SessionBoundaries.same_corpus`) before it runs anything else,
and takes a fresh one. It costs one statement per request, sent with the
authorization, and no extra pass over the groups: the same statement reads
BM25's N and total length, which the sparse lane would read anyway.
"""

from __future__ import annotations

import datetime as dt
import threading
import weakref
from typing import Any

from labsrc.records.policy import Caller

__all__ = [
    "CORPUS_VERSION",
    "BoundaryKey",
    "SessionBoundaries",
    "boundary_key",
    "corpus_version",
    "forget_totals",
    "request_totals",
]

#: The version of the rows an authorized request sees: how many boundary groups and the sum of their versions,
#: read through the same row-level security as every lane (the caller fills in ``{schema}``). The same scan
#: yields BM25's N and total length, which the sparse lane then takes instead of reading them again
#: (:func:`request_totals`): the check costs no extra pass over the groups.
CORPUS_VERSION = (
    'SELECT count(*), sum(version), coalesce(sum(n_docs), 0)::int8, coalesce(sum(total_len), 0)::int8 FROM "{schema}".lab_group_stats'
)

# N and total length of each pooled session's current request, from its corpus version (same transaction).
_TOTALS: weakref.WeakKeyDictionary[Any, tuple[int, int]] = weakref.WeakKeyDictionary()
_TOTALS_LOCK = threading.Lock()

#: What decides the rows a request sees: region, sorted ACL tags, ISO date.
BoundaryKey = tuple[str, tuple[str, ...], str]


def corpus_version(conn: Any, schema: str) -> tuple[int, int]:
    """The version of the rows ``conn``'s authorized transaction sees (:data:`CORPUS_VERSION`); N and the total
    length of the same rows are kept for :func:`request_totals` until :func:`forget_totals`."""
    count, total, n_docs, total_len = conn.execute(CORPUS_VERSION.format(schema=schema)).fetchone()
    with _TOTALS_LOCK:
        _TOTALS[conn] = (int(n_docs), int(total_len))
    return int(count), int(total or 0)


def request_totals(conn: Any) -> tuple[int, int] | None:
    """BM25's N and total length as ``conn``'s current request's corpus version read them (None: not read)."""
    with _TOTALS_LOCK:
        return _TOTALS.get(conn)


def forget_totals(conn: Any) -> None:
    """The request on ``conn`` ended: its totals no longer hold."""
    with _TOTALS_LOCK:
        _TOTALS.pop(conn, None)


def boundary_key(caller: Caller, on_date: dt.date) -> BoundaryKey:
    """The key of the rows ``caller`` may see on ``on_date``: equal keys, equal rows."""
    return caller.region, tuple(sorted(caller.acl_tags)), on_date.isoformat()


class SessionBoundaries:
    """The boundary each pooled session first served, so a session never serves another (thread-safe).

    Sessions are held weakly: a connection the pool closes and drops is forgotten with it.
    """

    def __init__(self) -> None:
        self._served: weakref.WeakKeyDictionary[Any, BoundaryKey] = weakref.WeakKeyDictionary()
        self._versions: weakref.WeakKeyDictionary[Any, tuple[int, int]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        #: Sessions closed because a request of another boundary drew them.
        self.closed = 0
        #: Sessions closed because the rows of their boundary changed since their first request.
        self.stale = 0

    def claim(self, conn: Any, key: BoundaryKey) -> bool:
        """Whether ``conn`` may serve a request with ``key`` (a new session may, and is bound to ``key``)."""
        with self._lock:
            served = self._served.setdefault(conn, key)
            if served == key:
                return True
            self.closed += 1
            return False

    def same_corpus(self, conn: Any, version: tuple[int, int]) -> bool:
        """Whether ``conn``'s rows are still those of its first request (a new session is bound to ``version``)."""
        with self._lock:
            seen = self._versions.setdefault(conn, version)
            if seen == version:
                return True
            self.stale += 1
            return False
