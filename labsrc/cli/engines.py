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
from labsrc.evaluation.subject import name_factory
from labsrc.lanes.dense import DenseSource, Encoder
from labsrc.records.policy import PolicyChunk
from labsrc.retriever.policy import PolicyRetriever

__all__ = [
    "ENGINES",
    "START_REPLICA",
    "add_engine_options",
    "add_replica_option",
    "close_engines",
    "engine_factory",
    "make_retriever",
    "serve_from_replica",
]

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
        # Its errors name the engine as the user chose it, not the class inside the lab that builds it.
        return name_factory(partial(PolicyRetriever, **kwargs), "the memory engine"), "memory"
    from labsrc.audit.pgvector_hnsw import SharedServerFactory

    factory = name_factory(SharedServerFactory(dsn, **kwargs), "the postgres engine")
    _OPEN.callback(factory.close)
    return factory, "postgres"


#: ``--replica start``: start a streaming replica of the engine's server for this command.
START_REPLICA = "start"


def add_replica_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--replica DSN|start`` (search on a read replica) to a command that has the engine options."""
    parser.add_argument(
        "--replica", metavar="DSN|start",
        help="with --engine postgres: load on the primary, search on a streaming read replica of it: the replica's "
             "DSN (of --dsn's server), or 'start' to start one of the server on this machine (pg_basebackup)",
    )  # fmt: skip


def serve_from_replica(args: argparse.Namespace, retriever: Any) -> tuple[Any, str | None]:
    """``(retriever, where)``: with ``--replica``, a view of ``retriever`` that searches on the replica, and its name."""
    replica = getattr(args, "replica", None)
    if replica is None:
        return retriever, None
    if (getattr(args, "engine", None) or "memory") != "postgres":
        raise InvalidArgument("--replica applies to --engine postgres only (the primary loads, the replica serves)")
    if replica == START_REPLICA:
        from labsrc.engines.replica import StreamingReplica

        started = StreamingReplica(retriever.dsn)
        _OPEN.callback(started.stop)  # after the view closes, before the primary's store and server
        replica = started.dsn
    view = retriever.on_replicas(replica)
    _OPEN.callback(view.close)
    return view, view.store.replicas[0].server_name


def close_engines() -> None:
    """Close every engine :func:`make_retriever` opened (stops embedded servers)."""
    _OPEN.close()
