"""``labsrc audit``: put the retrievers teams deploy through the gate, and print which gates each passes.

Runs every subject in :data:`labsrc.audit.SUBJECTS` (or those named) on the
lesson and the coursework's policy corpus (or ``--data`` folders: fixture folders, or
BEIR collections under :mod:`labsrc.datasets.permissions`), and prints
the audit table in Markdown: the table in docs/audit.md and notebook 13 comes from
this command. Exit status: 0 when the table was made (whatever it says), 2 on
bad input, or when a subject could not run (a missing extra, a server that did not
start: its rows say ERROR, and one line names the subjects and the first reason).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from labsrc.audit import SUBJECTS, audit_cost, audit_frame, audit_markdown, load_dataset, plot_audit, run_audit
from labsrc.cli.outputs import check_out_file, one_line
from labsrc.cli.progress import make_progress
from labsrc.datasets.lesson import fixtures_dir
from labsrc.errors import InvalidArgument
from labsrc.records.files import atomic_write_bytes

__all__ = ["register", "run"]


def _datasets(values: list[str] | None) -> list[tuple[str, Path]]:
    if not values:
        root = fixtures_dir()
        return [("lesson", root / "lesson"), ("policies", root / "policies")]
    out = []
    for value in values:
        name, sep, folder = value.partition("=")
        path = Path(folder if sep else name)
        if not path.is_dir():
            raise InvalidArgument(f"--data {value!r}: {path} is not a folder (chunks.jsonl, callers.json, cases.jsonl, gate.json; "
                                  "or a BEIR collection: corpus.jsonl, queries.jsonl, qrels/test.tsv)")
        out.append((name if sep else path.name, path))
    return out


def run(args: argparse.Namespace) -> int:
    for path, flag in ((args.json, "--json"), (args.markdown, "--markdown"), (args.plot, "--plot"), (args.rows, "--rows")):
        if path:
            check_out_file(path, flag)
    datasets = [load_dataset(name, folder) for name, folder in _datasets(args.data)]
    progress = None if args.no_progress else (lambda what: print(f"auditing {what} ...", file=sys.stderr))
    rows = run_audit(datasets, args.subjects or tuple(SUBJECTS), progress=progress, bars=make_progress(args.no_progress),
                     rows_file=args.rows)
    table = audit_markdown(rows)
    print(table, end="")
    if not args.no_progress:
        print(audit_cost(rows), file=sys.stderr)
    if args.markdown:
        atomic_write_bytes(args.markdown, table.encode("utf-8"))
    if args.json:
        records = audit_frame(rows).to_dict(orient="records")
        atomic_write_bytes(args.json, (json.dumps(records, indent=1) + "\n").encode("utf-8"))
    if args.plot:
        from labsrc.reports.plots import save_figure

        save_figure(plot_audit(rows), args.plot)
    failed = [r for r in rows if r.error]
    if failed:
        # The table is printed (and written) whole, ERROR rows included; the exit status says it is incomplete.
        names = sorted({r.subject for r in failed})
        print(f"labsrc: error: {len(failed)} of {len(rows)} audit rows could not run ({', '.join(names)}): "
              f"{one_line(failed[0].error or '')}", file=sys.stderr)
        return 2
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="put real retrievers (LangChain, LlamaIndex, tantivy, Qdrant, Chroma, DuckDB, LanceDB, Milvus Lite, pgvector HNSW) "
             "through the gate",
        description=(
            "Gate each audited retriever on the lesson and the policy corpus (or --data folders) and print "
            "which gates each passes, with the first finding of each failed gate. Needs the audit and postgres "
            "extras for every subject. Exit status: 0 the table was made, 2 bad input or a subject that could not run "
            "(a missing extra; the table is still printed)."
        ),
    )
    parser.add_argument("--subjects", nargs="+", choices=list(SUBJECTS), metavar="NAME",
                        help=f"subjects to audit (default: all of {', '.join(SUBJECTS)})")
    parser.add_argument("--data", nargs="+", metavar="[NAME=]DIR",
                        help="fixture folders to audit on (default: fixtures/lesson and fixtures/policies), or BEIR collection "
                             "folders (corpus.jsonl, queries.jsonl, qrels/test.tsv, vectors/<model>/), audited under "
                             "the permission layout of labsrc.datasets.permissions")
    parser.add_argument("--markdown", metavar="FILE", help="also write the table as Markdown")
    parser.add_argument("--json", metavar="FILE", help="also write the table as JSON records")
    parser.add_argument("--plot", metavar="PNG", help="also draw the table as a grid of statuses")
    parser.add_argument("--rows", metavar="FILE",
                        help="keep each finished row in FILE (JSON lines) as soon as it is done, and reuse the rows FILE "
                             "already holds for the same subject, dataset content and lab version instead of running them "
                             "again (resume an interrupted audit, or add subjects and datasets one run at a time)")
    parser.add_argument("--no-progress", action="store_true", help="do not print which subject is running")
    parser.set_defaults(func=run)
