"""``labsrc gate``: the release gate on *your* corpus, callers and cases; fails CI when a gate fails.

It judges the lab's retriever (``--engine memory`` or ``postgres``) or *your own*
(``--retriever MODULE:FACTORY``, see :mod:`labsrc.evaluation.subject`): the same
gates, plus the boundary on every returned id and noninterference by rebuild and
by bait, which need nothing but the factory.

Exit status: 0 every gate passes, 1 a gate failed (each failing gate, case and
finding is printed), 2 bad input (the message names the file, line, field and
value): a malformed or empty file, a case that cannot test what its kind says
(checked with :func:`~labsrc.gate.case_rules.check_cases`), an output path
that cannot be written (checked before the run), a factory that cannot be
imported (its own error and file:line). What the retriever's code raises, in a
build or a search, is a finding (exit 1: ``build errors``, ``search errors``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from labsrc.audit.gate_files import gate_from_files
from labsrc.cli.engines import engine_factory
from labsrc.cli.options import recall_at_option
from labsrc.cli.outputs import check_out_dir, check_out_file
from labsrc.cli.progress import make_progress
from labsrc.cli.report import add_run_options, apply_overrides, print_gate_table
from labsrc.errors import InvalidArgument
from labsrc.reports.junit import write_junit
from labsrc.gate.generated import CASES_FILE
from labsrc.reports.report import CURVE_FILE, OUTPUT_FILE, REPORT_FILES, write_report
from labsrc.lanes.sources import load_dense_source, visible_chunks
from labsrc.records.loading import parse_date

__all__ = ["iso_date", "load_dense_source", "register", "run", "visible_chunks"]


def iso_date(value: str) -> dt.date:
    """argparse type for ``--date``: a strict ISO date."""
    try:
        return parse_date(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def run(args: argparse.Namespace) -> int:
    # Output paths first: a typo there must not cost a whole run, nor end in a traceback.
    if args.out:
        check_out_dir(args.out, files=(*REPORT_FILES, CASES_FILE, OUTPUT_FILE, CURVE_FILE))
    if args.junit_xml:
        check_out_file(args.junit_xml, "--junit-xml")
    if args.retriever and (args.engine is not None or args.dsn is not None):
        raise InvalidArgument("--retriever judges your own retriever; --engine and --dsn choose the lab's: give one or the other")
    progress = make_progress(args.no_progress)
    # The pipeline the pytest integration (labsrc.testing) runs too: same inputs, same verdicts.
    result = gate_from_files(
        args.chunks, args.callers, args.cases, args.retriever or None,
        vectors=args.vectors, config=args.config,
        adjust=lambda config: apply_overrides(config, args),
        lab_retriever=lambda config: engine_factory(args, rrf_k=config.rrf_k, progress=progress),
        progress=progress,
        warn=lambda note: print(f"labsrc: warning: {note}", file=sys.stderr),
        recall_at=args.recall_at or (),
    )
    print_gate_table(result)
    if args.out:
        write_report(result, args.out)
        print(f"report written to {args.out}/ (open report.html)")
    if args.junit_xml:
        write_junit(result, args.junit_xml)
        print(f"JUnit XML written to {args.junit_xml}")
    return 0 if result.passed else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "gate",
        help="run the release gate on your own chunks, callers and cases (exit 1 on failure)",
        description=(
            "Replay a case file through the permission-safe hybrid retriever, or your own "
            "(--retriever MODULE:FACTORY), and check every gate: "
            "Recall@k per lane, hybrid vs each lane, restricted/superseded/not-yet-effective/wrong-region exclusion at "
            "full depth, abstention, the boundary on every returned id, noninterference by rebuild "
            "(a build over each caller's permitted chunks only) and by bait, and p50/p95 stage latency. "
            "A gate with no cases is NOT TESTED (it fails the run only if the config sets require_cases). "
            "Exit status: 0 all gates pass, 1 a gate failed (each failing gate and case is printed), "
            "2 bad input (the file, line and field are named)."
        ),
    )
    parser.add_argument("--chunks", required=True, metavar="FILE", help="policy chunks, JSONL (one chunk per line)")
    parser.add_argument("--callers", required=True, metavar="FILE", help="callers, a JSON list of {actor_id, region, acl_tags}")
    parser.add_argument("--cases", required=True, metavar="FILE", help="evaluation cases, JSONL (one case per line)")
    parser.add_argument(
        "--vectors",
        metavar="FILE_OR_DIR",
        help="dense vectors: a fixture JSON file or a vectors/<model>/ folder (default: a hashing encoder; "
             "with --retriever, your factory gets None)",
    )
    parser.add_argument(
        "--retriever", metavar="MODULE:FACTORY",
        help="judge your own retriever: FACTORY(chunks, vectors) returns an object with "
             "search(query, caller, on_date, top_k); MODULE is an importable module or a path to a .py file",
    )
    parser.add_argument("--config", metavar="FILE", help="gate config, .json or .toml (default: built-in defaults)")
    parser.add_argument("--out", metavar="DIR", help="also write the report files (report.html, report.md, ...) into DIR")
    parser.add_argument(
        "--junit-xml", metavar="FILE",
        help="also write JUnit XML: one testcase per gate (and per failing case), for CI test reports",
    )
    parser.add_argument("--date", type=iso_date, metavar="YYYY-MM-DD", help="evaluation date (default: config on_date, else today)")
    parser.add_argument(
        "--recall-at", type=recall_at_option, metavar="K,K,...",
        help="also measure permitted Recall@k of each lane at these k (e.g. 1,2,5,10): every positive case asked at "
             "each k; printed, in report.json, and drawn as curves in report.html and recall_curve.png (with --out)",
    )
    add_run_options(parser)
    parser.set_defaults(func=run)
