"""``labsrc data fetch``: download a BEIR collection with its checksum verified, unzipped atomically.

Example::

    labsrc data fetch scifact      # into $LABSRC_BEIR_DIR, else the per-user cache (~/.cache/labsrc/beir)
    labsrc embed --beir scifact    # the MiniLM vectors the dense lanes need (the 'embed' extra)
    labsrc beir                    # finds scifact in the same place
"""

from __future__ import annotations

import argparse
import sys

from labsrc.datasets.fetch import BEIR_REGISTRY, default_fetch_dir, fetch_beir
from labsrc.errors import InvalidArgument

__all__ = ["register", "run_fetch"]


def run_fetch(args: argparse.Namespace) -> int:
    if args.dir is not None and not args.dir.strip():
        raise InvalidArgument(f"--dir {args.dir!r} is blank; give a folder, or leave --dir out for {default_fetch_dir()}")
    dest = args.dir or default_fetch_dir()
    progress = not args.no_progress and sys.stderr.isatty()
    path = fetch_beir(args.name, dest_dir=dest, url=args.url, md5=args.md5, progress=progress)
    print(f"{args.name} is in {path}")
    if any((path / "vectors").glob("*/MODEL.json")):
        print(f"next: labsrc beir --data {path}")
    else:
        print(f"next: labsrc embed --beir {path}   (the dense lanes' vectors; the 'embed' extra), "
              f"then labsrc beir --data {path}; or labsrc beir --data {path} --lanes bm25 now")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "data",
        help="fetch BEIR collections (checksum-verified, unzipped atomically)",
        description="Manage the real data the benchmark commands and notebooks 08, 09 and 11 read.",
    )
    sub = parser.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    fetch = sub.add_parser(
        "fetch",
        help="download and unzip one BEIR collection",
        description=(
            "Download a BEIR collection, verify its MD5, and unzip it into DIR/NAME (nothing half-written on "
            f"failure). Known names: {', '.join(BEIR_REGISTRY)}. A --url whose file does not match the "
            "registry checksum is refused unless --md5 is given; an unknown NAME needs --url and --md5."
        ),
    )
    fetch.add_argument("name", metavar="NAME", help=f"collection name ({', '.join(BEIR_REGISTRY)}, or any with --url/--md5)")
    fetch.add_argument("--dir", metavar="DIR", help="where to put NAME/ (default: $LABSRC_BEIR_DIR, else a per-user cache folder)")
    fetch.add_argument("--url", metavar="URL", help="download from here instead of BEIR's server")
    fetch.add_argument("--md5", metavar="HEX", help="the archive's expected MD5 (overrides the registry's)")
    fetch.add_argument("--no-progress", action="store_true", help="never draw the progress bar")
    fetch.set_defaults(func=run_fetch)
