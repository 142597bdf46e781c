"""``labsrc report``: replay the lesson's release gate on the bundled fixtures."""

from __future__ import annotations

import argparse

from .fixtures import lesson
from .gates import GateConfig, evaluate_gates, lane_recall, run_cases
from .retriever import PolicyRetriever

__all__ = ["register", "run"]


def run(args: argparse.Namespace) -> int:
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


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help="run the lesson's release gate on the bundled fixtures")
    parser.add_argument("--top-k", type=int, default=2, help="results kept per lane and fused (default 2)")
    parser.set_defaults(func=run)
