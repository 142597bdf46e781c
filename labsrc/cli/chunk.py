"""``labsrc chunk DOCS_DIR --out FILE``: a folder of a team's own pages becomes ``chunks.jsonl`` in one command.

Example::

    labsrc chunk wiki/ --out data/chunks.jsonl                      # fields from each page's front matter
    labsrc chunk wiki/ --out data/chunks.jsonl --metadata pages.csv # or from a table naming the pages

Every ``.md``, ``.markdown`` and ``.txt`` file under ``DOCS_DIR`` is cut at its
headings and given its page's record fields (:mod:`labsrc.patterns.documents`
says from where, the defaults and every error). The file is written atomically,
and only when every page is valid. Exit status: 0 written, 2 bad input (one
line naming the file, line, field and value; nothing is written).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from labsrc.cli.outputs import check_out_file
from labsrc.errors import InvalidArgument
from labsrc.patterns.chunking import DEFAULT_MAX_CHARS
from labsrc.patterns.documents import PAGE_SUFFIXES, chunk_documents, write_chunks_jsonl
from labsrc.ranking import check_top_k

__all__ = ["register", "run"]


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def run(args: argparse.Namespace) -> int:
    max_chars = check_top_k(args.max_chars, "--max-chars")
    out = Path(args.out)
    if out.name.lower().endswith(PAGE_SUFFIXES):
        raise InvalidArgument(
            f"--out {out}: a chunks file is JSONL, and a name ending {out.suffix} would be read as a page "
            "(or overwrite one); give a path such as data/chunks.jsonl"
        )
    if out.is_dir():
        raise InvalidArgument(f"--out {out}: this is a folder; give a file path such as {out / 'chunks.jsonl'}")
    if args.metadata is not None and out.resolve() == Path(args.metadata).resolve():
        raise InvalidArgument(f"--out {out} is the --metadata table; give another path for the chunks")
    check_out_file(out, "--out")  # before reading: a bad --out costs nothing
    chunks = chunk_documents(args.folder, metadata=args.metadata, max_chars=max_chars)
    write_chunks_jsonl(chunks, out)
    pages = len({chunk.path for chunk in chunks})  # every page gives at least one chunk (an empty one is an error)
    documents = len({chunk.document_id for chunk in chunks})
    print(f"chunked {_plural(pages, 'page')} of {_plural(documents, 'document')} into {_plural(len(chunks), 'chunk')}: {out}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "chunk",
        help="turn a folder of markdown and text pages into chunks.jsonl (fields from front matter or a CSV)",
        description=(
            "Read every .md, .markdown and .txt page under DOCS_DIR (recursively, sorted; names starting with '.' "
            "skipped), cut each at its headings into chunks of at most --max-chars characters, and write them to "
            "FILE in the lab's chunks.jsonl format. Each page needs region, acl_tag and effective_from, from its "
            "front matter (a leading '---' block of flat 'key: value' lines) or from the --metadata table; "
            "document_id, parent_id, version, effective_to and title are optional (docs/records.md has the defaults). "
            "Chunk ids are '<page path without suffix>#chunk-<i>'. "
            "Exit status: 0 written, 2 bad input (one line naming the file, line, field and value; nothing written)."
        ),
    )
    parser.add_argument("folder", metavar="DOCS_DIR", help="the folder of pages")
    parser.add_argument("--out", metavar="FILE", required=True, help="the chunks.jsonl to write (replaced atomically)")
    parser.add_argument(
        "--metadata",
        metavar="CSV",
        help="a table with a 'path' column (each page relative to DOCS_DIR) and any of the record fields as columns",
    )
    parser.add_argument(
        "--max-chars",
        type=int,
        default=DEFAULT_MAX_CHARS,
        metavar="N",
        help=f"the longest chunk, in characters (default: {DEFAULT_MAX_CHARS})",
    )
    parser.set_defaults(func=run)
