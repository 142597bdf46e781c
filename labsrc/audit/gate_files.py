"""Gate a retriever on a team's own files: the one pipeline behind ``labsrc gate`` and :mod:`labsrc.testing`.

:func:`gate_from_files` reads the chunks, callers and cases, checks that every
case can test what its kind says (:func:`~labsrc.gate.case_rules.check_cases`),
names the factory (``MODULE:FACTORY``, :func:`~labsrc.audit.plugin.worker_factory`:
imported in each build's worker process, never in this one; or a callable), loads the dense vectors and runs
:func:`~labsrc.gate.gates.gate_retriever`. The command line and the pytest
integration both call it, so the same inputs get the same verdicts from both.
Bad input raises a :class:`~labsrc.errors.LabError` naming the file, line, field
and value (the command line's exit status 2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from labsrc.audit.plugin import worker_factory
from labsrc.boundary import unmatched_callers
from labsrc.errors import InvalidArgument, InvalidRecord
from labsrc.evaluation.latency import Progress
from labsrc.evaluation.subject import Factory, SubjectError
from labsrc.gate.case_rules import check_cases
from labsrc.gate.config import GateConfig, load_gate_config
from labsrc.gate.gates import GateRun, gate_lab_engine, gate_retriever
from labsrc.lanes.coverage import missing_vectors_note
from labsrc.lanes.dense import DenseSource
from labsrc.lanes.sources import load_dense_source, visible_chunks
from labsrc.records.cases import iter_cases
from labsrc.records.loading import load_callers, load_chunks

__all__ = ["LabRetriever", "gate_from_files", "as_gate_config"]

#: Builds the lab's own retriever for a config: ``(factory, label)`` (the command line's ``--engine``).
LabRetriever = Callable[[GateConfig], tuple[Factory, str]]


def as_gate_config(config: str | Path | GateConfig | None) -> GateConfig:
    """A gate config from a ``.json``/``.toml`` path, as given, or the defaults (``None`` or ``""``)."""
    if isinstance(config, GateConfig):
        return config
    return load_gate_config(config) if config else GateConfig()


def gate_from_files(
    chunks: str | Path,
    callers: str | Path,
    cases: str | Path,
    retriever: str | Factory | None = None,
    *,
    vectors: str | Path | None = None,
    config: str | Path | GateConfig | None = None,
    adjust: Callable[[GateConfig], GateConfig] | None = None,
    lab_retriever: LabRetriever | None = None,
    progress: Progress | None = None,
    warn: Callable[[str], None] | None = None,
    load: Callable[[str], Factory] = worker_factory,
    recall_at: Sequence[int] = (),
) -> GateRun:
    """Run the release gate on the files a team keeps: what ``labsrc gate`` does before it prints.

    ``retriever`` is ``MODULE:FACTORY`` (a module name, or a path to a ``.py``
    file, then ``:`` and the factory's name) or the factory itself:
    ``factory(chunks, vectors)`` returning an object with ``search(query, caller,
    on_date, top_k)`` (:mod:`~labsrc.evaluation.subject`). With ``None``,
    ``lab_retriever(config)`` builds the lab's own retriever instead.
    ``vectors`` is a fixture JSON file or a ``vectors/<model>/`` folder; without
    it a plug-in's factory gets ``None`` and the lab's retriever a hashing encoder.
    ``config`` is a gate config file, a :class:`~labsrc.gate.config.GateConfig`,
    or ``None`` for the defaults; ``adjust`` (the command line's overrides) is
    applied to it before the cases are checked against its evaluation date.
    ``warn`` gets each warning (a case whose expected chunk has no vector, a caller whose region or
    tags match no stored chunk). ``recall_at`` measures Recall@k at those k too (``run.recall_curve``).
    ``load`` turns a ``MODULE:FACTORY`` string into the factory (the pytest form
    passes one that names itself and looks beside the test file); the default imports
    the module only inside the workers, so no code of the team's runs in this process.
    """
    loaded_chunks = load_chunks(chunks)
    loaded_callers = load_callers(callers)
    located = list(
        iter_cases(cases, chunk_ids={c.chunk_id for c in loaded_chunks}, caller_ids={c.actor_id for c in loaded_callers})
    )
    loaded_cases = [case for _, case in located]
    if not loaded_cases:
        raise InvalidRecord(
            "the case file holds no cases; a gate with nothing to replay cannot pass (write one case per line)",
            path=cases,
        )
    gate_config = as_gate_config(config)
    if adjust is not None:
        gate_config = adjust(gate_config)
    # The one case rule (labsrc.gate.case_rules): a case must test what its kind says.
    check_cases(
        loaded_cases,
        {c.actor_id: c for c in loaded_callers},
        {c.chunk_id: c for c in loaded_chunks},
        gate_config.eval_date(),
        path=cases,
        lines={case.name: line for line, case in located},
    )
    if warn is not None:
        for note in unmatched_callers(loaded_callers, loaded_chunks):
            warn(note)
    factory: Factory | None = None
    label: str | None = None
    if isinstance(retriever, str):
        factory, label = load(retriever), retriever  # before loading vectors: a typo fails fast
    elif retriever is not None:
        if not callable(retriever):
            raise InvalidArgument(
                f"retriever must be 'MODULE:FACTORY' or a factory(chunks, vectors), not a {type(retriever).__name__}"
            )
        factory = retriever
    elif lab_retriever is None:
        raise InvalidArgument("no retriever to gate: give 'MODULE:FACTORY' or a factory(chunks, vectors)")
    source: DenseSource | None = None
    if vectors or factory is None:
        source = load_dense_source(
            vectors, visible_chunks(loaded_chunks, loaded_callers, loaded_cases, gate_config.eval_date()), loaded_cases
        )
    # Positive cases only: a negative case whose dense lane is empty cannot leak through it.
    positives = [c for c in loaded_cases if c.kind == "positive"]
    if vectors and warn is not None and (
        note := missing_vectors_note(source, positives, chunks_path=chunks, cases_path=cases, vectors_path=vectors)
    ):
        warn(note)
    lab = factory is None
    if lab:
        factory, label = lab_retriever(gate_config)  # type: ignore[misc]
    return (gate_lab_engine if lab else gate_retriever)(
        factory, loaded_chunks, loaded_callers, loaded_cases, source, gate_config, progress=progress, label=label,
        recall_at=recall_at,
    )
