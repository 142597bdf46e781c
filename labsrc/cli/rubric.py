"""``labsrc rubric``: grade a coursework submission against the lesson's four-level rubric.

Exit status: 0 graded (and at or above ``--min-level``, when given), 1 below
``--min-level``, 2 bad input (no such folder, a malformed course file).
"""

from __future__ import annotations

import argparse

from labsrc.course import LEVELS, grade, grade_json, parse_level

__all__ = ["register", "run"]


def run(args: argparse.Namespace) -> int:
    minimum = parse_level(args.min_level) if args.min_level else None
    result = grade(args.submission, course=args.course, measure=not args.no_latency, model_answer=args.model_answer)
    print(grade_json(result) if args.json else result.to_text())
    if minimum is not None and not result.reaches(minimum):
        if not args.json:
            print(f"below the required level {minimum}")
        return 1
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "rubric",
        help="grade a coursework submission folder (Foundational / Applied / Strong / Production-ready)",
        description=(
            "Replay a submission's cases through the permission-safe hybrid retriever, run the release gates, "
            "and print the highest rubric level reached with the evidence for and against each level. "
            "A submission folder holds cases.jsonl and, optionally, callers.json, chunks.jsonl, gate.json, "
            "vectors/ (from 'labsrc embed') and report/ (from 'labsrc gate --out report'); missing optional "
            "files default to the course's (fixtures/policies). "
            "Exit status: 0 graded (at or above --min-level), 1 below --min-level, 2 bad input."
        ),
    )
    parser.add_argument("submission", metavar="SUBMISSION_DIR", help="the submission folder")
    parser.add_argument(
        "--min-level", metavar="LEVEL", help=f"exit 1 below this level; one of {', '.join(LEVELS)} (case-insensitive)"
    )
    parser.add_argument("--course", metavar="DIR", help="course files to fall back on (default: fixtures/policies)")
    parser.add_argument("--json", action="store_true", help="print the grade as JSON")
    parser.add_argument(
        "--model-answer", action="store_true",
        help="the submission is the course's own model answer on purpose (an instructor checking it): its course "
             "files are still named, but do not keep it below Applied",
    )
    parser.add_argument(
        "--no-latency", action="store_true", help="skip latency timing (faster; Production-ready cannot be reached)"
    )
    parser.set_defaults(func=run)
