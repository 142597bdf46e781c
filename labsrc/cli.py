"""The ``labsrc`` command line.

``labsrc report`` replays the lesson's release gate on the bundled fixtures,
prints the gate table and exits 0 only when every gate passes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .errors import LabError
from .fixtures import lesson
from .gates import GateConfig, evaluate_gates, lane_recall, run_cases
from .retriever import PolicyRetriever

__all__ = ["main"]


def _report(args: argparse.Namespace) -> int:
    data = lesson()
    config = GateConfig(top_k=args.top_k)
    retriever = PolicyRetriever(data.chunks, data.vectors)
    outcomes = run_cases(retriever, data.cases, data.callers_by_id, data.eval_date, config.top_k)
    recall = lane_recall(outcomes, config.top_k)
    print(f"Lesson release gate  (eval date {data.eval_date}, top_k {config.top_k})")
    print()
    print(f"{'lane':<8} Recall@{config.top_k}")
    for lane, value in recall.items():
        print(f"{lane:<8} {value:.2f}")
    print()
    results = evaluate_gates(outcomes, config)
    width = max(len(r.name) for r in results)
    for result in results:
        status = "PASS" if result.passed else "FAIL"
        failing = f"  failing: {', '.join(result.failing_cases)}" if result.failing_cases and not result.passed else ""
        print(f"{status}  {result.name:<{width}}  {result.detail}{failing}")
    passed = all(r.passed for r in results)
    print()
    print("all gates pass" if passed else "GATES FAILED")
    return 0 if passed else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="labsrc", description="Permission-safe hybrid retrieval lab.")
    sub = parser.add_subparsers(dest="command", required=True)
    report = sub.add_parser("report", help="run the lesson's release gate on the bundled fixtures")
    report.add_argument("--top-k", type=int, default=2, help="results kept per lane and fused (default 2)")
    report.set_defaults(func=_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except LabError as exc:
        print(f"labsrc: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
