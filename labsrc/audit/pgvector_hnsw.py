"""The lab's PostgreSQL engine as an audit subject: exact (a control) and pgvector HNSW, iterative scan off and on.

The gate builds a subject several times (every stored chunk, each caller's
permitted chunks, bait). :class:`SharedServerFactory` starts one embedded
server (or uses ``dsn``) and loads each build into a schema of its own, so a
gate run starts one server, not one per build. Needs the ``postgres`` extra.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from labsrc.lanes.dense import DenseSource, Encoder
from labsrc.records.policy import PolicyChunk

__all__ = ["SharedServerFactory"]


class SharedServerFactory:
    """``factory(chunks, vectors)`` → a ``PostgresRetriever``; every build shares one server.

    Keyword arguments go to ``PostgresRetriever`` (``dense_index``,
    ``iterative_scan``, ``rrf_k``, ...); ``progress`` is used for the first
    build only. :meth:`close` stops the embedded server, if one was started.
    """

    def __init__(self, dsn: str | None = None, **kwargs: Any) -> None:
        self.dsn = dsn
        self.kwargs = kwargs
        self.server: Any = None
        if dsn is None:
            # Started here, in the gate's process: every build runs in a worker process of its own
            # (labsrc.gate.workers) and reaches this one server through its DSN.
            from labsrc.engines.server import EmbeddedServer, require_psycopg

            require_psycopg()
            self.server = EmbeddedServer()

    def __call__(self, chunks: Sequence[PolicyChunk], vectors: DenseSource | Encoder | None) -> Any:
        from labsrc.engines.postgres import PostgresRetriever
        from labsrc.engines.server import EmbeddedServer, require_psycopg

        require_psycopg()
        dsn = self.dsn
        if dsn is None:
            if self.server is None:
                self.server = EmbeddedServer()
            dsn = self.server.dsn
        kwargs = dict(self.kwargs)
        self.kwargs.pop("progress", None)
        return PostgresRetriever(chunks, vectors, dsn=dsn, **kwargs)

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
