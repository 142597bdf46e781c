"""Release gates: replay frozen cases and decide whether a retriever may ship.

The lesson's gate table (spec, "Release gate"), plus the lab's latency gate:

* **Permitted Recall@k** per lane: the required current chunk reaches the top k.
* **Hybrid vs each lane**: fusion must not lose (``at_least``) or must add
  (``strict``, the lesson) evidence compared with either lane alone.
* **Restricted / superseded / wrong-region exclusion**: no forbidden id appears
  in *any* lane's candidates or in the fused list. This is checked with a probe
  as deep as the whole corpus, so it holds whatever ``top_k`` is.
* **Abstention**: for questions no permitted evidence supports, the fused list
  holds nothing the case forbids; what it did return is reported for review.
* **Boundary on every returned id**: every id any lane or the fused list
  returns, for every case, at ``top_k`` and at full depth, is one the case's
  caller may see on its date. No case has to name it as forbidden.
* **Noninterference by rebuild** and **by bait** (with a factory,
  :func:`gate_retriever`): each case gives the same ids, order and scores as a
  build over the caller's permitted chunks only, and as a build holding hidden
  chunks crafted to win (:mod:`~labsrc.gate.noninterference`).
* **Latency**: p50 and p95 of each stage, measured after a warm-up, within budget.

Any retriever can be judged: :func:`release_gate` takes a built one,
:func:`gate_retriever` takes a factory (:mod:`~labsrc.evaluation.subject`), so
that it can also rebuild it over each caller's permitted chunks.

Both read as plan → run → judge: :func:`~labsrc.gate.plan.plan_gate` says what
the gate will run (every build, every request, and why), :func:`~labsrc.gate.run.run_plan`
runs it, :func:`~labsrc.gate.judge.judge` turns the answers into findings and
verdicts; :mod:`labsrc.reports` writes them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from labsrc.errors import InvalidArgument
from labsrc.evaluation.latency import Progress
from labsrc.evaluation.subject import Factory, Subject, SubjectError, factory_name
from labsrc.gate import reaping
from labsrc.gate.config import GateConfig, check_same_fusion
from labsrc.gate.gate_rules import GATE_TABLE, evaluate_gates
from labsrc.gate.judge import judge, rules_now
from labsrc.gate.outcomes import CaseOutcome, as_caller_map, lane_recall, run_cases, stored_chunks
from labsrc.gate.plan import plan_gate
from labsrc.gate.run import Builder, Prebuilt, run_plan
from labsrc.gate.result import GateRun
from labsrc.lanes.dense import DenseSource, Encoder, as_dense_source
from labsrc.records.cases import Case
from labsrc.records.policy import Caller, PolicyChunk, chunk_lookup
from labsrc.retriever.policy import PolicyRetriever

__all__ = [
    "GATE_TABLE",
    "CaseOutcome",
    "GateRun",
    "as_caller_map",
    "evaluate_gates",
    "gate_lab_engine",
    "gate_retriever",
    "lane_recall",
    "release_gate",
    "run_cases",
]


def _check_cases(cases: Sequence[Case]) -> None:
    if not cases:
        raise InvalidArgument("no cases: a release gate with nothing to replay cannot pass")


def release_gate(
    retriever: PolicyRetriever | Subject,
    cases: Sequence[Case],
    callers: Mapping[str, Caller] | Sequence[Caller],
    config: GateConfig | None = None,
    *,
    on_date: dt.date | None = None,
    measure: bool = True,
    progress: Progress | None = None,
    stored: Sequence[PolicyChunk] | None = None,
    recall_at: Sequence[int] = (),
) -> GateRun:
    """Replay the cases on a built retriever, evaluate every gate and (with ``measure``) time the stages.

    ``on_date`` overrides ``config.on_date``; with neither, today's date is used.
    The retriever's ``rrf_k`` (when it has one) must match the config's, so the
    report never describes a different fusion than the one that ran. ``stored``
    is every stored chunk (default: ``retriever.chunks``), for the boundary gate.
    The noninterference gates need to rebuild the retriever: use :func:`gate_retriever`.
    ``recall_at`` (e.g. ``(1, 2, 5, 10)``) also measures each lane's Recall@k at those k
    (``run.recall_curve``, :mod:`~labsrc.gate.recall_curve`).
    """
    config = config or GateConfig()
    check_same_fusion(getattr(retriever, "rrf_k", None), config)
    _check_cases(cases)
    chunks = tuple(stored_chunks(retriever, stored).values())
    plan = plan_gate(chunks, as_caller_map(callers), cases, config, on_date or config.eval_date(),
                     label=type(retriever).__name__, measure=measure, rebuilds=False, recall_at=recall_at)
    return judge(plan, run_plan(plan, Prebuilt(retriever), rules_now, progress))


def gate_retriever(
    factory: Factory,
    chunks: Sequence[PolicyChunk],
    callers: Mapping[str, Caller] | Sequence[Caller],
    cases: Sequence[Case],
    vectors: DenseSource | Encoder | None = None,
    config: GateConfig | None = None,
    *,
    on_date: dt.date | None = None,
    measure: bool = True,
    progress: Progress | None = None,
    label: str | None = None,
    recall_at: Sequence[int] = (),
) -> GateRun:
    """Judge any retriever by its factory: every gate, plus the probes that need builds of their own.

    ``factory(chunks, vectors)`` is called with every stored chunk (a tuple,
    hidden ones included) and ``vectors`` (the dense source, or ``None``), and
    must return an object with ``search(query, caller, on_date, top_k)`` giving
    a :class:`~labsrc.retriever.policy.RetrievalResult` or ``(chunk_id, score)``
    pairs, best first (:mod:`~labsrc.evaluation.subject`).

    The plan (:func:`~labsrc.gate.plan.plan_gate`) holds these builds, each run in a fresh
    worker process (:mod:`~labsrc.gate.workers`) on the config's clocks (``build_timeout_s``,
    ``search_timeout_s``):

    1. the main build: every case replayed (and timed, with ``measure``), then each
       case alone and every case from ``config.concurrency`` threads at once
       (:mod:`~labsrc.gate.probes`), then up to ``config.probe_budget`` generated requests
       (:mod:`~labsrc.gate.generate`: every case's query as every caller, hidden chunks'
       own codes and terms, edge dates);
    2. with ``noninterference`` on: the same chunks built again (repeatability),
       a build with a canary added and a returned chunk withheld (does the factory
       index what it is handed?), then, per (caller, date) of the cases, a build
       over the caller's permitted chunks only (asked the cases and the generated
       requests of that caller and date) and one with bait added.

    With ``recall_at`` (e.g. ``(1, 2, 5, 10)``) the main build is also asked every positive case
    at each of those k, for each lane's Recall@k curve (``run.recall_curve``).

    The first answer settles the contract: a shape the gate cannot read stops the run
    with :class:`~labsrc.evaluation.subject.SubjectError`. When the builds end, every
    process they left running is killed and named (:mod:`~labsrc.gate.reaping`), and
    what each printed is kept apart from the verdict (``run.probes.output``).

    A factory that fails the canary cannot be tested for noninterference: the
    rebuild and bait gates say NOT TESTED and fail the run. Cases whose ids differ
    between the two builds of the same chunks are not compared; scores that differ
    make the comparisons use ids and order only.

    A factory that cannot be imported, or returns something with no ``search``, raises
    :class:`~labsrc.evaluation.subject.SubjectError` (the gate's input). A build that
    fails (the factory raised anything, ``SystemExit`` and the lab's own errors included,
    did not return in time, or its worker ended), and a search that raises, are findings
    of the run: the ``build errors`` and ``search errors`` gates. When the main build
    fails, no case is asked: the run holds ``build errors`` and the cleanup gate, and
    ``run.unbuilt`` is the build's error. ``PolicyRetriever`` and ``PostgresRetriever`` are factories as they are::

        run = gate_retriever(PolicyRetriever, data.chunks, data.callers, data.cases, data.vectors)
    """
    config = config or GateConfig()
    _check_cases(cases)
    if vectors is not None and not isinstance(vectors, DenseSource):
        vectors = as_dense_source(vectors)  # a bare encoder: the factory, and the bait, get a dense source
    plan = plan_gate(tuple(chunk_lookup(chunks).values()), as_caller_map(callers), cases, config,
                     on_date or config.eval_date(), vectors, label=label or factory_name(factory), measure=measure,
                     recall_at=recall_at)
    with reaping.keep_watchdog():  # one watchdog for the run's builds, gone when the run ends
        return judge(plan, run_plan(plan, Builder(factory, config), rules_now, progress))


def gate_lab_engine(factory: Factory, *args: Any, **kwargs: Any) -> GateRun:
    """:func:`gate_retriever` for the lab's own engine: one that cannot be built here (a missing extra, no
    server) is the setup's error, a :class:`~labsrc.evaluation.subject.SubjectError` (exit 2), not a finding."""
    run = gate_retriever(factory, *args, **kwargs)
    if run.unbuilt is not None:
        raise SubjectError(run.unbuilt)
    return run
