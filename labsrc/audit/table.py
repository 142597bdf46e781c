"""The audit: every subject through the gate on every dataset, and what each gate said.

:func:`run_audit` returns one :class:`AuditRow` per (subject, dataset): the
status of each gate and, for a failed gate, its first finding, exactly as the
gate printed it. :func:`audit_frame`, :func:`audit_markdown` and
:func:`plot_audit` present them. ``labsrc audit`` runs it from the command line.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from labsrc.audit.rows import AuditRow, load_rows, save_rows
from labsrc.audit.subjects import SUBJECTS, AuditSubject
from labsrc.datasets.beir import load_beir
from labsrc.datasets.permissions import permissioned
from labsrc.errors import InvalidArgument, LabError
from labsrc.gate.config import GateConfig, load_gate_config
from labsrc.gate.gates import GateRun, gate_retriever
from labsrc.evaluation.latency import Progress
from labsrc.evaluation.subject import close_subject, name_factory
from labsrc.lanes.dense import DenseSource
from labsrc.lanes.sources import load_dense_source, visible_chunks
from labsrc.records.cases import Case, load_cases
from labsrc.records.loading import load_callers, load_chunks
from labsrc.records.policy import Caller, PolicyChunk
from labsrc.version import __version__

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["AUDIT_GATES", "BEIR_CASES", "BEIR_GATE", "AuditDataset", "audit_cost", "audit_frame", "audit_row", "audit_markdown", "dataset_digest", "load_dataset",
           "plot_audit", "run_audit"]

#: The gates the audit table shows, in this order (the exclusion gates as one column).
AUDIT_GATES = (
    "recall",
    "exclusion",
    "boundary on every returned id",
    "noninterference by rebuild",
    "noninterference by bait",
    "factory indexes what it is handed",
    "repeatable builds",
    "same answers under concurrent requests",
    "generated probes",
)
_WHY_ORDER = ("factory indexes what it is handed", "boundary on every returned id", "noninterference by rebuild",
              "noninterference by bait", "same answers under concurrent requests", "generated probes", "repeatable builds",
              "build errors", "search errors", "exclusion", "recall")
_EXCLUSION = ("restricted exclusion", "superseded exclusion", "not_yet_effective exclusion", "wrong_region exclusion",
              "abstention")


@dataclass(frozen=True)
class AuditDataset:
    """Chunks, callers, cases, vectors and gate config: one corpus to audit on."""

    name: str
    chunks: tuple[PolicyChunk, ...]
    callers: tuple[Caller, ...]
    cases: tuple[Case, ...]
    vectors: DenseSource | None
    config: GateConfig
    #: SHA-256 over the chunks, callers, cases, gate config and vectors (:func:`dataset_digest`).
    digest: str = ""


#: Cases per kind on a BEIR collection: every positive, 20 of each negative kind.
BEIR_CASES = MappingProxyType({"restricted": 20, "superseded": 20, "not_yet_effective": 20, "wrong_region": 20})
#: The gate on a BEIR collection: Recall@10 of the hybrid at least 0.8 (PolicyRetriever measured 0.94 on SciFact
#: under the layout: BM25 0.86, MiniLM 0.93, over 71 positive cases).
BEIR_GATE = MappingProxyType({"top_k": 10, "min_recall": {"hybrid": 0.8}, "hybrid_rule": "at_least"})


def load_dataset(name: str, folder: str | Path) -> AuditDataset:
    """A fixture folder (``chunks.jsonl``, ``callers.json``, ``cases.jsonl``, ``gate.json`` and
    ``vectors.json`` or ``vectors/<model>/``, the first model folder by name), or a BEIR collection
    folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``, ``vectors/<model>/``) under the
    permission layout of :mod:`labsrc.datasets.permissions`, gated by :data:`BEIR_GATE`."""
    folder = Path(folder)
    models = sorted(p for p in (folder / "vectors").glob("*") if p.is_dir()) if (folder / "vectors").is_dir() else []
    vectors_path: Path | None = folder / "vectors.json"
    if not vectors_path.is_file():
        vectors_path = models[0] if models else None
    if (folder / "corpus.jsonl").is_file():
        collection = permissioned(load_beir(folder, splits=["test"]), max_cases=BEIR_CASES)
        chunks, callers, cases = collection.chunks, collection.callers, collection.cases
        config = GateConfig(**{**BEIR_GATE, "on_date": collection.on_date})
    else:
        chunks = tuple(load_chunks(folder / "chunks.jsonl"))
        callers = tuple(load_callers(folder / "callers.json"))
        cases = tuple(load_cases(folder / "cases.jsonl"))
        config = load_gate_config(folder / "gate.json")
    visible = visible_chunks(chunks, callers, cases, config.eval_date())  # hidden chunks need no vector
    vectors = load_dense_source(vectors_path, visible, cases) if vectors_path is not None else None
    return AuditDataset(name, chunks, callers, cases, vectors, config,
                        dataset_digest(chunks, callers, cases, config, vectors, visible))


def _canonical(value: Any) -> Any:
    """``value`` as plain JSON data that does not depend on the process: sets sorted (a frozenset's order
    follows ``PYTHONHASHSEED``), dataclasses as their fields, dates in ISO form."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted((_canonical(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise InvalidArgument(f"cannot digest a {type(value).__name__}: {value!r}")


def dataset_digest(chunks: Sequence[PolicyChunk], callers: Sequence[Caller], cases: Sequence[Case], config: GateConfig,
                   vectors: DenseSource | None, visible: Sequence[PolicyChunk]) -> str:
    """SHA-256 of everything a gate run reads: the records, the config and its evaluation date, the vectors'
    version, the visible chunks' vectors and the cases' query vectors (what :mod:`labsrc.audit.rows` reuses a
    kept row by)."""
    h = hashlib.sha256()
    # The evaluation date too: a config that pins none is judged on today's date.
    for part in (chunks, callers, cases, config, config.eval_date()):
        h.update(json.dumps(_canonical(part), sort_keys=True, ensure_ascii=False).encode("utf-8"))
    if vectors is not None:
        h.update(vectors.version.encode("utf-8"))
        h.update(np.ascontiguousarray(vectors.document_matrix(visible), dtype=np.float64).tobytes())
        for query in dict.fromkeys(c.query for c in cases):
            h.update(np.ascontiguousarray(vectors.query_vector(query), dtype=np.float64).tobytes())
    return h.hexdigest()


def audit_row(subject: str, dataset: str, run: GateRun, *, digest: str = "", description: str = "",
              seconds: float | None = None) -> AuditRow:
    """The table's row for one gate run: each of :data:`AUDIT_GATES`' status and the first finding of a failed one."""
    by_name = {g.name: g for g in run.gates}
    statuses, why = {}, {}
    recall = [g for g in run.gates if g.family == "recall" and g.name.endswith("hybrid")]
    groups = {"recall": recall, "exclusion": [by_name[n] for n in _EXCLUSION if n in by_name]}
    for column in AUDIT_GATES:
        gates = groups.get(column) or ([by_name[column]] if column in by_name else [])
        if not gates:
            statuses[column] = "NOT RUN"
            continue
        failed = [g for g in gates if not g.passed]
        # A column of several gates (exclusion) passes when each gate it could test passed.
        statuses[column] = "FAIL" if failed else ("PASS" if any(g.tested for g in gates) else "NOT TESTED")
        if failed:
            g = failed[0]
            why[column] = g.findings[0] if g.findings else f"{g.name}: {g.detail}"
    for name in ("build errors", "search errors"):  # in a run only when a build failed or a search raised
        errors = by_name.get(name)
        if errors is not None:
            why[name] = errors.findings[0]
    return AuditRow(subject, dataset, statuses, why, 0 if run.passed else 1, digest=digest, description=description,
                    seconds=seconds)


def _named(bars: Progress | None, what: str) -> Progress | None:
    if bars is None:
        return None
    return lambda phase, done, total: bars(f"{what}: {phase}", done, total)


def run_audit(
    datasets: Sequence[AuditDataset],
    subjects: Sequence[str] = tuple(SUBJECTS),
    *,
    progress: Callable[[str], None] | None = None,
    bars: Progress | None = None,
    rows_file: str | Path | None = None,
) -> list[AuditRow]:
    """Gate every subject on every dataset (latency not measured: the audit is about the boundary).

    ``progress(what)`` hears which subject and dataset start (``"<subject> on <dataset>"``), or are reused; ``bars(phase, done, total)``
    hears each gate run's phases, named ``"<subject> on <dataset>: <phase>"`` (the CLI draws them as
    tqdm bars). With ``rows_file`` (JSON lines, :mod:`labsrc.audit.rows`), each finished row is kept
    there at once, and a row the file already holds for the same subject, dataset content and lab
    version is returned instead of run again (unless it is an ERROR row); rows of other subjects and
    datasets stay in the file.
    """
    unknown = sorted(set(subjects) - set(SUBJECTS))
    if unknown:
        raise InvalidArgument(f"unknown audit subject(s) {unknown}; known: {list(SUBJECTS)}")
    kept = load_rows(rows_file) if rows_file is not None and Path(rows_file).is_file() else []
    rows: list[AuditRow] = []
    for name in subjects:
        subject: AuditSubject = SUBJECTS[name]
        for data in datasets:
            # A row that could not run (an ERROR: a missing extra, a server that did not start) is tried again.
            row = next((r for r in kept if r.error is None and r.key() == (name, subject.description, data.name,
                                                                           data.digest, __version__)), None)
            if row is not None:
                if progress is not None:
                    progress(f"{name} on {data.name}: the row kept in {rows_file}, not run again")
            else:
                if progress is not None:
                    progress(f"{name} on {data.name}")
                row = _audit_one(subject, data, bars)
            rows.append(row)
            if rows_file is not None:
                # This run's rows in its order, then the file's other rows: a finished audit reads top to bottom.
                done = {(r.subject, r.dataset) for r in rows}
                save_rows(rows + [r for r in kept if (r.subject, r.dataset) not in done], rows_file)
    return rows


def _audit_one(subject: AuditSubject, data: AuditDataset, bars: Progress | None) -> AuditRow:
    factory = None
    started = time.perf_counter()
    try:
        factory = name_factory(subject.factory(data.config), f"the {subject.name} subject")
        run = gate_retriever(factory, data.chunks, data.callers, data.cases, data.vectors, data.config,
                             measure=False, label=subject.name, progress=_named(bars, f"{subject.name} on {data.name}"))
        return audit_row(subject.name, data.name, run, digest=data.digest, description=subject.description,
                         seconds=time.perf_counter() - started)
    except LabError as exc:
        return AuditRow(subject.name, data.name, dict.fromkeys(AUDIT_GATES, "ERROR"), {}, 2, error=str(exc),
                        digest=data.digest, description=subject.description, seconds=time.perf_counter() - started)
    finally:
        if factory is not None:
            close_subject(factory)


def audit_cost(rows: Sequence[AuditRow]) -> str:
    """One line: the wall time of the audit's gate runs, summed over its rows (kept rows count their own run),
    and the longest row."""
    timed = [r for r in rows if r.seconds is not None]
    if not timed:
        return f"{len(rows)} audit rows, none timed"
    longest = max(timed, key=lambda r: (r.seconds, r.subject, r.dataset))
    total = sum(r.seconds for r in timed)
    return (f"{len(rows)} audit rows: {total:.0f} s of gate runs ({total / 60:.1f} min); "
            f"longest {longest.subject} on {longest.dataset}, {longest.seconds:.0f} s")


def audit_frame(rows: Sequence[AuditRow]) -> pd.DataFrame:
    """One row per (subject, dataset): each gate's status, the exit code, and why the first failed gate failed."""
    import pandas as pd

    records = []
    for row in rows:
        record: dict[str, Any] = {"subject": row.subject, "dataset": row.dataset, **row.statuses,
                                  "exit": row.exit_code}
        # The boundary and noninterference findings first: they are what the audit is for.
        order = sorted(row.why, key=lambda g: _WHY_ORDER.index(g) if g in _WHY_ORDER else len(_WHY_ORDER))
        record["why"] = row.error or (f"{order[0]}: {row.why[order[0]]}" if order else "")
        records.append(record)
    return pd.DataFrame(records, columns=["subject", "dataset", *AUDIT_GATES, "exit", "why"])


def audit_markdown(rows: Sequence[AuditRow]) -> str:
    """The audit table as Markdown (docs/audit.md's and notebook 13's)."""
    frame = audit_frame(rows)
    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(str(v).replace("|", "\\|") for v in record) + " |"
            for record in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body]) + "\n"


#: Column labels of the plot, each on two lines.
_SHORT = {
    "boundary on every returned id": "boundary\non every id",
    "noninterference by rebuild": "noninterference:\nrebuild",
    "noninterference by bait": "noninterference:\nbait",
    "factory indexes what it is handed": "indexes what\nit is handed",
    "repeatable builds": "repeatable\nbuilds",
    "same answers under concurrent requests": "same answers\nconcurrently",
}
_COLORS = {"PASS": "#4c9a2a", "FAIL": "#c0392b", "NOT TESTED": "#bbbbbb", "NOT RUN": "#eeeeee", "ERROR": "#7f4f9f"}


def plot_audit(rows: Sequence[AuditRow]) -> Figure:
    """A grid: one row per (subject, dataset), one column per gate, coloured by status."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    labels = [f"{r.subject} / {r.dataset}" for r in rows]
    fig, ax = plt.subplots(figsize=(12, 0.42 * len(rows) + 1.6))
    for y, row in enumerate(rows):
        for x, gate in enumerate(AUDIT_GATES):
            status = row.statuses.get(gate, "NOT RUN")
            ax.add_patch(plt.Rectangle((x, y), 0.95, 0.9, color=_COLORS[status]))
            ax.text(x + 0.475, y + 0.45, status, ha="center", va="center", fontsize=7,
                    color="white" if status in ("PASS", "FAIL", "ERROR") else "black")
    ax.set_xlim(0, len(AUDIT_GATES))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([x + 0.475 for x in range(len(AUDIT_GATES))])
    ax.set_xticklabels([_SHORT.get(g, g) for g in AUDIT_GATES], fontsize=8)
    ax.xaxis.tick_top()
    ax.set_yticks([y + 0.45 for y in range(len(rows))])
    ax.set_yticklabels(labels, fontsize=8)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.legend(handles=[Patch(color=c, label=s) for s, c in _COLORS.items()], loc="upper center",
              bbox_to_anchor=(0.5, -0.02), ncol=len(_COLORS), fontsize=8, frameon=False)
    ax.set_title("Which gates each retriever passes", pad=32)
    fig.tight_layout()
    return fig


