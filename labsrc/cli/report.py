"""``labsrc report``: run the lesson's release gate on the bundled fixtures and write the report.

Also home of the pieces every gate-running command shares: the printed gate
table and a tiny progress bar.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from labsrc.cli.engines import add_engine_options, engine_factory
from labsrc.cli.outputs import check_out_dir
from labsrc.cli.progress import make_progress
from labsrc.datasets.lesson import fixtures_dir, lesson
from labsrc.gate.config import AUTO_PROBE_BUDGET, LANES, MAX_REPETITIONS, PROBE_TIERS, GateConfig, load_gate_config
from labsrc.errors import InvalidArgument
from labsrc.evaluation.budgets import engine_budgets
from labsrc.gate.gates import GateRun, gate_lab_engine
from labsrc.gate.generated import CASES_FILE
from labsrc.reports.frames import curve_lines, lane_note, omitted_lines
from labsrc.reports.report import (
    OUTPUT_FILE,
    REPORT_FILES,
    recall_significance,
    significance_lines,
    write_report,
)

__all__ = ["DEFAULT_OUT", "add_run_options", "apply_overrides", "print_gate_table", "register", "run"]

#: Where ``labsrc report`` writes when ``--out`` is not given (relative to the working directory).
DEFAULT_OUT = Path("report")


#: Findings printed under a failed gate; the reports hold all of them.
_FINDINGS_SHOWN = 10
#: Lines of a build's captured output printed (its last ones); ``--out`` writes all that was kept (each build's last 64 KiB) to retriever_output.txt.
_OUTPUT_LINES = 20
#: ``--min-coverage`` not given (``none`` given is ``None``: no floor).
_UNSET = object()


def print_gate_table(run: GateRun, stream: TextIO | None = None) -> None:
    """Recall@k per lane, then every gate as PASS, FAIL or NOT TESTED with its failing cases or stages."""
    out = stream if stream is not None else sys.stdout
    k = run.config.top_k
    write = lambda text="": print(text, file=out)
    subject = f"retriever {run.subject}, " if run.subject else ""
    dense = run.versions.get("dense")
    write(f"Release gate  ({subject}eval date {run.on_date}, top_k {k}, rrf_k {run.config.to_dict()['rrf_k']}"
          + (f", dense {dense})" if dense else ")"))
    write()
    write(f"{'lane':<8} Recall@{k}")
    for lane in LANES:
        write(f"{lane:<8} {lane_note(run, lane) or f'{run.recall[lane]:.2f}'}")
    for line in significance_lines(recall_significance(run)):
        write(line)
    curve = curve_lines(run)
    if curve:
        write()
        for line in curve:
            write(line)
    write()
    width = max(len(g.name) for g in run.gates)
    for gate in run.gates:
        failing = gate.failing_cases or gate.failing_stages
        note = f"  failing: {', '.join(failing)}" if failing and not gate.passed else ""
        write(f"{gate.status}  {gate.name:<{width}}  {gate.detail}{note}")
        if not gate.passed:
            for line in gate.findings[:_FINDINGS_SHOWN]:
                write(f"      {line}")
            if len(gate.findings) > _FINDINGS_SHOWN:
                write(f"      ... and {len(gate.findings) - _FINDINGS_SHOWN} more (every one is in report.json and the JUnit XML)")
    for line in omitted_lines(run):
        write(line)
    if run.probes is not None and run.probes.output:
        write()
        write("retriever output (what each build printed; not part of the verdict):")
        for what, text in run.probes.output:
            write(f"  --- build {what!r} ---")
            for line in text.rstrip("\n").splitlines()[-_OUTPUT_LINES:]:
                write(f"  | {line}")
    if run.latency is not None:
        write()
        p50, p95 = run.latency.p50_ms, run.latency.p95_ms
        write(f"{'stage':<10} {'p50 ms':>9} {'p95 ms':>9} {'budget p50/p95':>15}")
        for stage in run.latency.stages:
            b50 = run.config.p50_budget_ms.get(stage)
            b95 = run.config.p95_budget_ms.get(stage)
            budget = f"{'-' if b50 is None else f'{b50:g}'}/{'-' if b95 is None else f'{b95:g}'}"
            write(f"{stage:<10} {p50[stage]:>9.3f} {p95[stage]:>9.3f} {budget:>15}")
    write()
    untested = run.untested_gates
    blocking = [g for g in untested if not g.passed and not run.config.require_cases]
    optional = [g for g in untested if g not in blocking]
    if optional:
        names = ", ".join(g.name for g in optional)
        effect = "so the run fails (require_cases is set)" if run.config.require_cases else (
            "they do not fail the run; set require_cases in the gate config to make them")
        write(f"NOT TESTED: {len(optional)} gate(s) had nothing to measure ({names}; each says why); {effect}")
    if blocking:
        names = ", ".join(g.name for g in blocking)
        write(f"NOT TESTED: {len(blocking)} gate(s) could not be measured on this retriever ({names}; each says why); "
              "a gate that could not be measured never passes, so the run fails")
    if run.passed:
        write("all tested gates pass" if untested else "all gates pass")
    else:
        write("GATES FAILED")
        for gate in run.failed_gates:
            failing = gate.failing_cases or gate.failing_stages
            if not gate.tested:
                write(f"  failed gate {gate.name!r}: NOT TESTED ({gate.detail})")
                continue
            label = "cases" if gate.failing_cases else "stages"
            suffix = f": {label} {', '.join(failing)}" if failing else f": {gate.detail}"
            write(f"  failed gate {gate.name!r}{suffix}")


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by ``report`` and ``gate``: overrides of the config and the progress bar."""
    parser.add_argument("--top-k", type=int, metavar="N", help="override the config's top_k (results per lane and fused)")
    parser.add_argument("--repetitions", type=int, metavar="N",
                        help=f"override the config's timed repetitions (1 to {MAX_REPETITIONS:,})")
    parser.add_argument("--build-timeout", type=float, metavar="SECONDS",
                        help="override the config's build_timeout_s: a build (each in its own worker process) that "
                             "takes longer fails")
    parser.add_argument("--search-timeout", type=float, metavar="SECONDS",
                        help="override the config's search_timeout_s: a search that takes longer fails its case and "
                             "its worker is killed")
    parser.add_argument("--concurrency", type=int, metavar="THREADS",
                        help="override the config's concurrency: threads the concurrency probe replays every case "
                             "from at once (0: no probe)")
    parser.add_argument("--probe-budget", type=probe_budget_option, metavar="N",
                        help="override the config's probe_budget: probes the gate makes up besides the cases "
                             "(every case's query as every caller, hidden chunks' own codes, edge dates), each "
                             "asked at top_k and at max(10, 5 top_k); 'auto' sizes it from the corpus; 0: none")
    parser.add_argument("--min-coverage", type=min_coverage_option, default=argparse.SUPPRESS,
                        metavar="FLOOR",
                        help="override the config's min_coverage: fail the generated probes when a tier of hidden "
                             f"chunks ({', '.join(PROBE_TIERS)}) is attacked below this share, e.g. 0.5 or "
                             "sibling=1,shared=0.2; 'none' removes the floor")
    parser.add_argument("--no-progress", action="store_true", help="show no progress (bars when stderr is a terminal, else a heartbeat line at most every 15 s)")
    add_engine_options(parser)


def probe_budget_option(value: str) -> int | str:
    """argparse type for ``--probe-budget``: ``auto`` or a whole number (its range is :class:`GateConfig`'s to check)."""
    text = value.strip().lower()
    if text == AUTO_PROBE_BUDGET:
        return AUTO_PROBE_BUDGET
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {AUTO_PROBE_BUDGET!r} or a whole number of probes; got {value!r}") \
            from None


def min_coverage_option(value: str) -> float | dict[str, float] | None:
    """argparse type for ``--min-coverage``: ``0.5`` (every tier), ``sibling=1,shared=0.2``, or ``none``.

    Only the shape is read here; the values are checked by :class:`GateConfig`, so a bad one is
    refused with the config's own message, naming the option.
    """
    text = value.strip()
    if text.lower() == "none":
        return None
    try:
        if "=" not in text:
            return float(text)
        floors = {}
        for part in text.split(","):
            tier, _, share = part.partition("=")
            floors[tier.strip()] = float(share)
        return floors
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a share in [0, 1] (every tier), TIER=SHARE pairs joined by commas (tiers "
            f"{', '.join(PROBE_TIERS)}), or none; got {value!r}") from None


def apply_overrides(config: GateConfig, args: argparse.Namespace) -> GateConfig:
    """A copy of ``config`` with the command-line overrides applied (validated again)."""
    values = config.to_dict()
    values["on_date"] = config.on_date
    if getattr(args, "top_k", None) is not None:
        values["top_k"] = args.top_k
    if getattr(args, "repetitions", None) is not None:
        values["repetitions"] = args.repetitions
    if getattr(args, "date", None) is not None:
        values["on_date"] = args.date
    for option, key in (("build_timeout", "build_timeout_s"), ("search_timeout", "search_timeout_s"),
                        ("concurrency", "concurrency"), ("probe_budget", "probe_budget")):
        if getattr(args, option, None) is not None:
            values[key] = getattr(args, option)
    if getattr(args, "min_coverage", _UNSET) is not _UNSET:  # None is a value here: it removes the floor
        values["min_coverage"] = args.min_coverage
    # The default budgets are the in-memory engine's; on PostgreSQL (a round trip a stage) they get its own.
    engine = getattr(args, "engine", None) or "memory"
    for key in ("p50_budget_ms", "p95_budget_ms"):
        values[key] = dict(engine_budgets(getattr(config, key), engine))
    try:
        return GateConfig(**values)
    except InvalidArgument as exc:  # name the option, not the config key, when the option set it
        for option, key in (("--build-timeout", "build_timeout_s"), ("--search-timeout", "search_timeout_s"),
                            ("--concurrency", "concurrency"), ("--top-k", "top_k"), ("--repetitions", "repetitions"),
                            ("--probe-budget", "probe_budget"), ("--min-coverage", "min_coverage")):
            if str(exc).startswith(key) and getattr(args, option[2:].replace("-", "_"), None) is not None:
                raise InvalidArgument(f"{option}: {exc}") from None
        raise


def lesson_config_path() -> Path:
    return fixtures_dir() / "lesson" / "gate.json"


def run(args: argparse.Namespace) -> int:
    config = load_gate_config(args.config) if args.config else load_gate_config(lesson_config_path())
    config = apply_overrides(config, args)  # before the output folder is made: bad options leave nothing behind
    out = check_out_dir(Path(args.out) if args.out else DEFAULT_OUT, files=(*REPORT_FILES, CASES_FILE, OUTPUT_FILE))
    data = lesson()
    progress = make_progress(args.no_progress)
    factory, label = engine_factory(args, rrf_k=config.rrf_k, progress=progress)
    result = gate_lab_engine(
        factory, data.chunks, data.callers_by_id, data.cases, data.vectors, config,
        on_date=config.on_date or data.eval_date, progress=progress, label=label,
    )
    print_gate_table(result)
    write_report(result, out)
    print(f"report written to {out}/")
    return 0 if result.passed else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="run the lesson's release gate on the bundled fixtures and write the report",
        description=(
            "Replay the lesson's cases (fixtures/lesson) through the permission-safe hybrid retriever, "
            "print Recall@k per lane and every gate, measure stage latency, and write report.html, report.json, "
            "report.md, recall.png, latency.png, failed_traces.jsonl and candidates.jsonl. "
            "Exit status: 0 all gates pass, 1 a gate failed, 2 bad input."
        ),
    )
    parser.add_argument("--out", metavar="DIR", help=f"report folder (default: ./{DEFAULT_OUT})")
    parser.add_argument("--config", metavar="FILE", help="gate config, .json or .toml (default: fixtures/lesson/gate.json)")
    add_run_options(parser)
    parser.set_defaults(func=run)
