"""``--engine`` and ``--dsn``: which retriever a command judges, in memory or inside PostgreSQL.

``report``, ``gate`` and ``search`` build their retriever with
:func:`make_retriever`, so the gate table, the report and the exit codes are
the same for both engines; only the versions and the timings differ. An engine
that holds a server is closed when the command ends (:func:`close_engines`,
called by :func:`labsrc.cli.main.main`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from contextlib import ExitStack
from functools import partial
from typing import Any

from labsrc.errors import InvalidArgument
from labsrc.lanes.dense import DenseSource, Encoder
from labsrc.records.policy import PolicyChunk
from labsrc.retriever.policy import PolicyRetriever

__all__ = ["ENGINES", "add_engine_options", "close_engines", "engine_factory", "make_retriever"]

#: The engines a command can run on.
ENGINES = ("memory", "postgres")

_OPEN = ExitStack()


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--engine {memory,postgres}`` and ``--dsn URL`` to a command."""
    parser.add_argument(
        "--engine", choices=ENGINES, default=None,
        help="where retrieval runs: in memory (default) or inside PostgreSQL (RLS boundary, BM25 in SQL, pgvector); "
             "postgres needs: pip install 'hybrid-retrieval-lab[postgres]'",
    )  # fmt: skip
    parser.add_argument(
        "--dsn", metavar="URL",
        help="with --engine postgres: an existing server, e.g. postgresql://user@host/db "
             "(default: a throwaway embedded server)",
    )  # fmt: skip


def make_retriever(
    args: argparse.Namespace, chunks: Sequence[PolicyChunk], vectors: DenseSource | Encoder, **kwargs: Any
) -> Any:
    """The retriever ``args.engine`` names, over ``chunks``; keyword arguments go to its constructor.

    ``progress`` (a loading progress callback) is used by the postgres engine only.
    """
    factory, _ = engine_factory(args, **kwargs)
    retriever = factory(chunks, vectors)
    if callable(getattr(retriever, "close", None)):
        _OPEN.callback(retriever.close)  # before the shared server stops (an ExitStack unwinds last-in first)
    return retriever


def engine_factory(args: argparse.Namespace, **kwargs: Any) -> tuple[Any, str]:
    """``(factory, label)`` for ``--engine``: what the gate builds, once per corpus it needs.

    ``progress`` (a loading progress callback) is used by the postgres engine only.
    """
    engine = getattr(args, "engine", None) or "memory"
    dsn = getattr(args, "dsn", None)
    if engine == "memory":
        if dsn is not None:
            raise InvalidArgument("--dsn applies to --engine postgres only")
        kwargs.pop("progress", None)
        return partial(PolicyRetriever, **kwargs), "memory"
    from labsrc.audit.pgvector_hnsw import SharedServerFactory

    factory = SharedServerFactory(dsn, **kwargs)
    _OPEN.callback(factory.close)
    return factory, "postgres"


def close_engines() -> None:
    """Close every engine :func:`make_retriever` opened (stops embedded servers)."""
    _OPEN.close()
