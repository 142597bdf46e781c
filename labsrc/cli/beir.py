"""``labsrc beir``: run the lanes on a BEIR collection and report nDCG@10, Recall@100 and MRR@10.

Example::

    labsrc beir --data ~/data/beir/scifact --json out/scifact.json --run-dir out/runs

prints one row per lane and a p-value for each pair of lanes (a paired two-sided
randomization test on nDCG@10, :mod:`labsrc.evaluation.significance`), writes the
metrics (plus config, versions and the tests) as JSON and one TREC run file per
lane (``<lane>.trec``), readable by trec_eval and ranx.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from labsrc.cli.options import recall_at_option
from labsrc.cli.outputs import check_out_dir, check_out_file, one_line
from labsrc.cli.progress import make_progress
from labsrc.datasets.beir import resolve_dataset_dir
from labsrc.errors import InvalidArgument
from labsrc.evaluation.benchmark import (
    BEIR_LANES,
    CURVE_KS,
    REPORT_METRICS,
    BenchmarkResult,
    load_lanes,
    recall_curves,
    run_benchmark,
    write_trec_run,
)
from labsrc.evaluation.significance import (
    DEFAULT_PERMUTATIONS,
    DEFAULT_SEED,
    SignificanceReport,
    check_permutations,
)
from labsrc.gate.verdicts import plural
from labsrc.records.files import atomic_write_bytes

__all__ = ["format_significance", "format_table", "register", "run"]


def format_table(metrics: dict[str, dict[str, float]]) -> str:
    """One row per lane, one column per metric, four decimals."""
    header = f"{'lane':<8}" + "".join(f"{name:>12}" for name in REPORT_METRICS)
    rows = [header]
    for lane, values in metrics.items():
        rows.append(f"{lane:<8}" + "".join(f"{values[name]:>12.4f}" for name in REPORT_METRICS))
    return "\n".join(rows)


def format_significance(report: SignificanceReport) -> str:
    """One row per pair of lanes: the mean difference (lane − baseline) and its two-sided p-value."""
    if report.note:
        return report.note
    exact = all(c.exact for c in report.comparisons)
    how = "all sign assignments (exact)" if exact else f"{report.permutations} permutations, seed {report.seed}"
    rows = [
        f"{report.test} on {report.metric}: {report.queries} queries, {how}",
        f"{'baseline':<10}{'lane':<8}{'difference':>12}{'p-value':>10}",
    ]
    for c in report.comparisons:
        # No draw was as extreme: p is below one in `permutations`, not zero.
        p = f"<{1 / c.permutations:.2g}" if c.p_value == 0 and not c.exact else f"{c.p_value:.4f}"
        rows.append(f"{c.baseline:<10}{c.lane:<8}{c.difference:>+12.4f}{p:>10}")
    rows.append(
        "p: the share of sign swaps of the per-query differences giving a mean difference at least this large "
        f"(two-sided); {plural(len(report.comparisons), 'test')}, no correction for multiple comparisons"
    )
    return "\n".join(rows)


def _number(text: str) -> int | float:
    """An int when the text is integral (so ``--rrf-k 60`` reports as 60), else a float."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    return int(value) if value.is_integer() else value


def _parse_lanes(text: str) -> list[str]:
    lanes = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [lane for lane in lanes if lane not in BEIR_LANES]
    if unknown or not lanes:
        raise InvalidArgument(f"unknown lane(s) {unknown} in --lanes; valid lanes: {','.join(BEIR_LANES)}")
    return lanes


def run(args: argparse.Namespace) -> int:
    lanes = _parse_lanes(args.lanes)
    check_permutations(args.permutations, "--permutations")
    # The output folders the checks below create are removed again if the run is interrupted or fails before it
    # wrote into them (Ctrl-C while the collection loads left an empty --run-dir behind): labsrc runs every
    # command in labsrc.cli.outputs.keeping_paths.
    # Output paths first: a read-only --json or --run-dir is exit 2 now, not a traceback after the run.
    if args.json:
        check_out_file(args.json, "--json")
    if args.run_dir:
        check_out_dir(args.run_dir, "--run-dir")
    if args.plot:
        check_out_file(args.plot, "--plot")
    ks = args.recall_at or (tuple(k for k in CURVE_KS if k <= args.depth) if args.plot else ())
    if ks and max(ks) > args.depth:
        raise InvalidArgument(f"--recall-at: k {max(ks)} is deeper than --depth {args.depth}: each lane's run holds "
                              f"{args.depth} results per query; raise --depth or drop the k")
    data_dir = resolve_dataset_dir(args.data, args.dataset)
    progress = make_progress(args.no_progress)
    print(f"loading {one_line(str(data_dir))} and building the BM25 index ...", file=sys.stderr)
    source = load_lanes(data_dir, model=args.model)
    if source.vectors is None and {"dense", "rrf", "convex"} & set(lanes):
        raise InvalidArgument(f"{data_dir} has no vectors/<model>/ folder; run with --lanes bm25")
    result: BenchmarkResult = run_benchmark(
        source,
        split=args.split,
        lanes=lanes,
        depth=args.depth,
        rrf_k=args.rrf_k,
        alpha=args.alpha,
        ignore_identical_ids=args.ignore_identical_ids,
        progress=progress,
        permutations=args.permutations,
        seed=args.seed,
    )
    config = result.config
    print(f"BEIR {config['collection']} / {config['split']}: {config['queries']} queries, depth {config['depth']}")
    if "convex" in config["lanes"]:
        print(f"convex alpha = {config['alpha']:.2f}  ({config['alpha_source']})")
    if "rrf" in config["lanes"]:
        print(f"rrf_k = {config['rrf_k']}")
    if source.dataset.missing_docs:
        print(f"note: {len(source.dataset.missing_docs)} judged documents are not in the corpus")
    print()
    print(format_table({lane: dict(values) for lane, values in result.metrics.items()}))
    if result.significance is not None and len(result.runs) > 1:
        print()
        print(format_significance(result.significance))
    document = result.to_json()
    if ks:
        curves = recall_curves(result.runs, source.dataset.split_qrels(args.split), ks)
        print()
        print(f"Recall@k ({config['queries']} queries)")
        print(f"{'lane':<8}" + "".join(f"{f'@{k}':>8}" for k in curves.index))
        for lane in curves.columns:
            print(f"{lane:<8}" + "".join(f"{v:>8.4f}" for v in curves[lane]))
        document["recall_curve"] = {"k": [int(k) for k in curves.index],
                                    **{lane: [float(v) for v in curves[lane]] for lane in curves.columns}}
    if args.json:
        path = Path(args.json)
        atomic_write_bytes(path, (json.dumps(document, indent=2, sort_keys=False) + "\n").encode("utf-8"))
        print(f"\nwrote {path}")
    if args.plot:
        from labsrc.reports.plots import plot_recall_curves, save_figure

        title = f"BEIR {config['collection']} / {config['split']}: Recall@k per lane"
        save_figure(plot_recall_curves(curves, title=title), args.plot)
        print(f"wrote {args.plot}")
    if args.run_dir:
        run_dir = Path(args.run_dir)
        for lane, lane_run in result.runs.items():
            write_trec_run(lane_run, run_dir / f"{lane}.trec", f"labsrc-{lane}")
        print(f"wrote {len(result.runs)} TREC run files to {run_dir}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "beir",
        help="evaluate the BM25, dense, RRF and convex lanes on a BEIR collection",
        description=(
            "Run the lanes on a BEIR collection (corpus.jsonl, queries.jsonl, qrels/<split>.tsv and "
            "vectors/<model>/) and print nDCG@10, Recall@100 and MRR@10 per lane."
        ),
    )
    parser.add_argument(
        "--data",
        metavar="DIR",
        help=(
            "the collection folder, or a folder holding it (default: $LABSRC_BEIR_DIR, else the per-user "
            "cache where 'labsrc data fetch' puts it, e.g. ~/.cache/labsrc/beir)"
        ),
    )
    parser.add_argument("--dataset", default="scifact", metavar="NAME", help="collection name inside --data (default scifact)")
    parser.add_argument("--model", default=None, metavar="MODEL", help="the vectors/<model> folder (default: the only one)")
    parser.add_argument("--split", default="test", metavar="SPLIT", help="qrels split to evaluate (default test)")
    parser.add_argument(
        "--lanes", default=",".join(BEIR_LANES), metavar="LANES", help=f"comma-separated lanes (default {','.join(BEIR_LANES)})"
    )
    parser.add_argument("--depth", type=int, default=100, metavar="N", help="results per query and lane (default 100)")
    parser.add_argument(
        "--rrf-k",
        type=_number,
        default=60,
        metavar="K",
        help="RRF smoothing constant (default 60, per Cormack et al.; not a cut-off, that is --depth)",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=None,
        metavar="A",
        help="convex fusion's dense weight in [0, 1]; default: tuned on the train split (0.5 without one)",
    )
    parser.add_argument(
        "--ignore-identical-ids",
        action="store_true",
        help="drop hits whose doc id equals the query id, as BEIR does (needed for ArguAna)",
    )
    parser.add_argument(
        "--permutations",
        type=int,
        default=DEFAULT_PERMUTATIONS,
        metavar="N",
        help=f"random sign assignments per paired test of two lanes (default {DEFAULT_PERMUTATIONS})",
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, metavar="N", help=f"the paired tests' random seed (default {DEFAULT_SEED})")
    parser.add_argument("--no-progress", action="store_true", help="show no progress (bars when stderr is a terminal, else a heartbeat line at most every 15 s)")
    parser.add_argument("--json", metavar="OUT", help="write metrics, config and versions as JSON")
    parser.add_argument("--run-dir", metavar="DIR", help="write one TREC run file per lane")
    parser.add_argument(
        "--recall-at", type=recall_at_option, metavar="K,K,...",
        help="also print each lane's Recall@k at these k (e.g. 1,5,10,100; each at most --depth), and add them to --json",
    )
    parser.add_argument(
        "--plot", metavar="PNG",
        help="draw each lane's Recall@k curve into this PNG (at --recall-at's k, default "
             f"{','.join(map(str, CURVE_KS))} up to --depth)",
    )
    parser.set_defaults(func=run)
