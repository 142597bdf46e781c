"""``labsrc search``: one ad-hoc query as one caller, with each candidate's lane ranks.

Defaults to the lesson fixtures (and the lesson's evaluation date), so
``labsrc search RPL-14 --as luna-48291`` works out of the box.
"""

from __future__ import annotations

import argparse
import datetime as dt

import numpy as np

from labsrc.boundary import permitted_chunks
from labsrc.cli.engines import (
    add_engine_options,
    add_replica_option,
    make_retriever,
    serve_from_replica,
)
from labsrc.cli.gate import iso_date, load_dense_source
from labsrc.datasets.lesson import lesson
from labsrc.errors import InvalidArgument
from labsrc.lanes.coverage import no_vector_hint
from labsrc.records.loading import load_callers, load_chunks

__all__ = ["register", "run"]


def _fmt(value: int | None) -> str:
    return "-" if value is None else str(value)


def run(args: argparse.Namespace) -> int:
    if not args.query.strip():
        raise InvalidArgument(
            f"QUERY is blank ({args.query!r}); give the question to search for, e.g. labsrc search \"RPL-14\" --as ACTOR_ID"
        )
    if args.chunks and not args.callers:
        raise InvalidArgument(
            f"--chunks {args.chunks} needs --callers FILE: the lesson's callers hold the lesson's ACL tags and regions, "
            "not yours (pass fixtures/lesson/callers.json explicitly if you do mean them)"
        )
    data = lesson()
    chunks = load_chunks(args.chunks) if args.chunks else list(data.chunks)
    callers = load_callers(args.callers) if args.callers else list(data.callers)
    by_id = {c.actor_id: c for c in callers}
    if args.actor not in by_id:
        where = args.callers or "the lesson's callers"
        raise InvalidArgument(f"unknown caller {args.actor!r} in {where}; known callers: {sorted(by_id)}")
    on_date = args.date or (dt.date.today() if args.chunks else data.eval_date)
    if args.vectors or args.chunks:
        vectors = load_dense_source(args.vectors, permitted_chunks(by_id[args.actor], chunks, on_date))
    else:
        vectors = data.vectors
    retriever, replica = serve_from_replica(args, make_retriever(args, chunks, vectors))
    result = retriever.search(args.query, by_id[args.actor], on_date, args.top_k)
    trace = result.trace
    print(f"query {args.query!r} as {args.actor} on {on_date}, top {args.top_k}")
    print(f"callers from {args.callers or 'the lesson fixtures (fixtures/lesson/callers.json)'}")
    if replica is not None:
        print(f"loaded on the primary, searched on the read replica at {replica}")
    print("versions: " + ", ".join(f"{k}={v}" for k, v in trace.versions.items()))
    if args.query.strip() and not np.any(retriever.vectors.query_vector(args.query)):
        print("note: no vector for this query, so the dense lane is empty; " + no_vector_hint(
            1, chunks_path=args.chunks or "CHUNKS.jsonl", cases_path="CASES.jsonl", out=args.vectors or "vectors/all-MiniLM-L6-v2"))
    if not result.fused:
        print("no permitted evidence matched (0 results)")
        return 0
    width = max(len("chunk_id"), *(len(c.chunk_id) for c, _ in result.fused))
    print(f"{'rank':>4}  {'chunk_id':<{width}}  {'rrf':>8}  {'bm25':>4}  {'dense':>5}")
    for rank, (chunk, score) in enumerate(result.fused, start=1):
        ranks = result.lane_ranks(chunk.chunk_id)
        print(f"{rank:>4}  {chunk.chunk_id:<{width}}  {score:>8.6f}  {_fmt(ranks['bm25']):>4}  {_fmt(ranks['dense']):>5}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "search",
        help="run one query as a caller and print the fused ids with their lane ranks",
        description=(
            "Run QUERY through the evidence boundary, both lanes and RRF as caller ACTOR_ID, and print "
            "the fused ranking with each id's 1-based rank in the bm25 and dense lanes ('-' = not in that "
            "lane's top k). Without --chunks/--callers/--vectors it uses the lesson fixtures and date."
        ),
    )
    parser.add_argument("query", metavar="QUERY", help="the query text (quote it if it has spaces)")
    parser.add_argument("--as", dest="actor", required=True, metavar="ACTOR_ID", help="the caller's actor_id")
    parser.add_argument("--chunks", metavar="FILE", help="policy chunks JSONL (default: the lesson's)")
    parser.add_argument("--callers", metavar="FILE", help="callers JSON (default: the lesson's; required with --chunks)")
    parser.add_argument(
        "--vectors", metavar="FILE_OR_DIR",
        help="fixture vectors JSON or a vectors/<model>/ folder (default: the lesson's, or a hashing encoder with --chunks)",
    )
    parser.add_argument("--date", type=iso_date, metavar="YYYY-MM-DD", help="evaluation date (default: the lesson's, or today with --chunks)")
    parser.add_argument("--top-k", type=int, default=2, metavar="N", help="results per lane and fused (default 2)")
    add_engine_options(parser)
    add_replica_option(parser)
    parser.set_defaults(func=run)
