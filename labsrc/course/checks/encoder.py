"""Check for step 3: the dense lane uses a real, versioned bi-encoder whose vectors cover every case query.

:func:`check_encoder_report` adds the learner's own reading of it: what ``MODEL.json``
records, and one case each lane wins, with the word overlap that explains the
dense lane's win (BM25 scores only analysed terms a query shares with a chunk).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from labsrc.boundary import permitted_chunks
from labsrc.course.checks.files import model_revision, package_problems, vector_file_problems
from labsrc.course.checks.model_rows import check_rows
from labsrc.course.checks.result import NOT_VERIFIED, CheckResult, Collector
from labsrc.course.submission import MODEL_FOLDER, shell_path
from labsrc.gate.gates import as_caller_map
from labsrc.lanes.analysis import tokens
from labsrc.lanes.coverage import EMBED_COMMAND, missing_query_vectors, no_vector_hint, query_lookup
from labsrc.lanes.dense import dense_rank
from labsrc.lanes.sparse import bm25_rank
from labsrc.records.cases import Case
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["COPIED_VECTOR_COSINE", "ENCODER_REPORT_KEYS", "check_dense_source", "check_encoder_report", "copied_query_vectors"]

#: What step 3's report holds: MODEL.json read back, then one case each lane wins.
ENCODER_REPORT_KEYS = ("model", "dim", "normalized", "dense_wins", "shared_terms", "bm25_wins")


#: A query vector this close (cosine) to a chunk's document vector is that vector, copied.
COPIED_VECTOR_COSINE = 0.9999
#: all-MiniLM-L6-v2's output size (the dim of the course's MODEL.json).
_MINILM_DIM = 384


def copied_query_vectors(source: Any, cases: Sequence[Case], chunks: Sequence[PolicyChunk]) -> list[tuple[str, str, float]]:
    """``(case name, chunk id, cosine)`` for each case whose stored query vector is a chunk's document vector.

    A query vector is the encoder's reading of the query text; a document vector
    reused in its place finds that chunk by construction and measures nothing.
    Empty when the source cannot show its vectors (an encoder) or nothing is copied.
    """
    has_query = query_lookup(source)
    if has_query is None or not chunks or not hasattr(source, "document_matrix") or not hasattr(source, "query_vector"):
        return []
    docs = np.asarray(source.document_matrix(chunks), dtype=np.float64)
    docs = docs / np.maximum(np.linalg.norm(docs, axis=1, keepdims=True), 1e-12)
    found = []
    for case in cases:
        if not case.query.strip() or not has_query(case.query):
            continue
        vector = np.asarray(source.query_vector(case.query), dtype=np.float64)
        norm = float(np.linalg.norm(vector))
        if norm == 0.0 or vector.shape != docs.shape[1:]:
            continue
        cosines = docs @ (vector / norm)
        best = int(np.argmax(cosines))
        if cosines[best] >= COPIED_VECTOR_COSINE:
            found.append((case.name, chunks[best].chunk_id, float(cosines[best])))
    return found


def check_dense_source(
    source: Any,
    cases: Sequence[Case] = (),
    *,
    cases_path: str = "my-submission/cases.jsonl",
    chunks: Sequence[PolicyChunk] = (),
    embed: str | None = None,
) -> CheckResult:
    """Step 3: the dense lane uses a real, versioned bi-encoder whose vectors cover every case query.

    ``source`` is the dense source handed to the retriever, for example
    :func:`labsrc.lanes.embed.load_embeddings`'s result; ``cases`` are the
    learner's cases, whose queries must each have a stored vector. With
    ``chunks`` given, a query vector that is a chunk's document vector
    (:func:`copied_query_vectors`) is refused. ``embed``: the ``labsrc embed``
    command to print (the rubric's names the folder it grades), else the course's layout.
    """
    out = Collector("step 3, real encoder")
    _dense_source(out, source, cases, cases_path=cases_path, chunks=chunks, embed=embed)
    return out.result()


def _model_file(source: Any) -> str:
    """Where the source's MODEL.json is, as the learner would open it."""
    path = getattr(source, "path", None)
    return "MODEL.json" if path is None else str(path / "MODEL.json")


def _rewrite_model(source: Any, cases_path: str, embed: str | None = None) -> str:
    """The ``labsrc embed`` command that rewrites the source's folder, MODEL.json included (``embed`` if given)."""
    if embed is not None:
        return embed
    path = getattr(source, "path", None)
    out = shell_path(path) if path is not None else f"my-submission/vectors/{MODEL_FOLDER}"
    return EMBED_COMMAND.format(chunks="fixtures/policies/chunks.jsonl", cases=cases_path, out=out)


def _dense_source(
    out: Collector,
    source: Any,
    cases: Sequence[Case],
    *,
    cases_path: str,
    chunks: Sequence[PolicyChunk],
    report: Mapping[str, Any] | None = None,
    embed: str | None = None,
) -> None:
    """:func:`check_dense_source` into ``out``; with the learner's ``report``, a field MODEL.json lacks says
    that the report's value for it is not what is wrong."""
    from labsrc.lanes.embed import (  # embed imports vectordir; keep checks importable on its own
        StoredEmbeddings,
        missing_model_fields,
    )

    version = str(getattr(source, "version", ""))
    model = dict(getattr(source, "model", None) or {})
    if not _real_encoder(source):
        # One cause, one fix: what such a source lacks (a record, the dimension, query vectors) follows from it.
        out.problem(_not_a_real_encoder(source, cases, cases_path))
        return
    out.passes.append(f"dense version {version!r}")
    if not model:
        out.problem("the dense source carries no model record (MODEL.json): its version cannot be audited")
    else:
        missing = missing_model_fields(model)
        # The report's model and normalized are read from MODEL.json alone (dim from the vectors too).
        given = report or {}
        answered = [k for k in missing if k in ("model", "normalized") and not _blank(given.get(k))]
        yours = ""
        if answered:
            values = " and ".join(f"report[{k!r}] = {given[k]!r}" for k in answered)
            yours = f"; your {values} {'is' if len(answered) == 1 else 'are'} not the problem, MODEL.json is"
        out.check(
            not missing,
            f"MODEL.json records {model.get('model')} ({model.get('packaged_by')}, "
            f"sentence-transformers {model.get('sentence_transformers')}, torch {model.get('torch')})",
            f"{_model_file(source)} lacks {missing} (labsrc embed records them in every folder it writes){yours}: "
            f"re-run `{_rewrite_model(source, cases_path, embed)}` (the 'embed' extra) to rewrite MODEL.json",
        )
        # What MODEL.json claims, against the installed package and the stored arrays (before any checksum verdict).
        problems, passes = package_problems(model, embed=_rewrite_model(source, cases_path, embed))
        path = getattr(source, "path", None)
        if path is not None:
            found, held = vector_file_problems(path, model, embed=_rewrite_model(source, cases_path, embed))
            problems, passes = problems + found, passes + ([held] if held else [])
        for problem in problems:
            out.problem(problem, kind="what MODEL.json claims")
        out.passes += passes
        dimension = getattr(source, "dimension", None)
        out.check(
            model.get("dim") == dimension,
            f"dimension {dimension} as recorded",
            f"MODEL.json says dim {model.get('dim')} but the vectors have {dimension}",
        )
        if "normalized" not in missing:
            out.check(model.get("normalized") is True, "vectors are L2-normalised",
                      f"{_model_file(source)} says normalized: {model.get('normalized')!r}, not true")
    copied = copied_query_vectors(source, cases, chunks) if cases else []
    if cases:
        lacking = missing_query_vectors(source, cases)
        if lacking is not None:
            out.check(
                not lacking,
                f"all {len(cases)} case queries have a stored vector",
                f"{no_vector_hint(len(lacking), cases_path=cases_path, command=embed)} (case(s) {list(lacking)})",
            )
        for name, chunk_id, cosine in copied:
            out.problem(
                f"case {name!r}: its stored query vector is chunk {chunk_id}'s document vector (cosine {cosine:.4f}), "
                "not a vector of the query text: a document vector used as a query finds its own chunk by "
                "construction and measures nothing; embed the query itself (labsrc embed --queries)",
                kind="query vectors copied from document vectors",
            )
        if chunks and not copied and (lacking is None or not lacking):
            out.passes.append("every case query has its own vector, not a chunk's document vector")
    if chunks and isinstance(source, StoredEmbeddings) and model:
        # MODEL.json is text: are the rows that model's? (A copied document vector is named above, not again.)
        rows = check_rows(source, cases, chunks, skip=frozenset(name for name, _, _ in copied))
        for problem in rows.problems:
            out.problem(problem, kind="vectors that are not the model MODEL.json names")
        out.passes += [f"{NOT_VERIFIED}{why}" for why in rows.unverified]
        if rows.verified:
            out.passes.append(rows.summary)


def _blank(value: object) -> bool:
    return value is None or value is ...


def _real_encoder(source: Any) -> bool:
    """Whether ``source`` is versioned and not the lesson's frozen fixture vectors or the hashing encoder."""
    version = str(getattr(source, "version", ""))
    return bool(version) and not version.startswith(("fixture-", "hashing-"))


def _not_a_real_encoder(source: Any, cases: Sequence[Case], cases_path: str) -> str:
    """The one problem of a source that is not a real bi-encoder, with what it lacks because of that."""
    from labsrc.lanes.embed import missing_model_fields

    version = str(getattr(source, "version", "")) or "an unversioned source"
    folder = f"{cases_path.rsplit('/', 1)[0]}/vectors/{MODEL_FOLDER}" if "/" in cases_path else f"vectors/{MODEL_FOLDER}"
    model = dict(getattr(source, "model", None) or {})
    lacks = []
    if not model or missing_model_fields(model):
        lacks.append("a MODEL.json record")
    dimension = getattr(source, "dimension", None)
    if dimension is not None and dimension != _MINILM_DIM:
        lacks.append(f"all-MiniLM-L6-v2's {_MINILM_DIM} dimensions (it has {dimension})")
    lacking = missing_query_vectors(source, cases) if cases else None
    if lacking:
        lacks.append(f"a vector for each of your case queries ({len(lacking)} of {len(cases)} have none in it)")
    also = f"; that one change also brings what {version!r} lacks: {', '.join(lacks)}" if lacks else ""
    return (f"the dense lane still uses {version!r}, not a real bi-encoder: load the MiniLM vectors with "
            f"labsrc.lanes.embed.load_embeddings (the folder labsrc embed wrote, {folder}){also}")


def check_encoder_report(
    report: Mapping[str, Any],
    source: Any,
    cases: Sequence[Case],
    chunks: Sequence[PolicyChunk],
    callers: Mapping[str, Caller] | Sequence[Caller],
    on_date: dt.date,
    *,
    top_k: int = 2,
    cases_path: str = "my-submission/cases.jsonl",
) -> CheckResult:
    """Step 3 in full: :func:`check_dense_source`, then the learner's ``report`` (see :data:`ENCODER_REPORT_KEYS`).

    ``model``, ``dim`` and ``normalized`` must be what ``MODEL.json`` records and the
    vectors show. ``dense_wins`` names a positive case whose expected chunk the dense
    lane returns in its top ``top_k`` over the caller's permitted chunks and BM25 does
    not; ``shared_terms`` is the set of analysed terms its query shares with that chunk's
    text (what BM25 could score). ``bm25_wins`` names a positive case the other way round.
    """
    out = Collector("step 3, real encoder")
    _dense_source(out, source, cases, cases_path=cases_path, chunks=chunks,
                  report=report if isinstance(report, Mapping) else None)
    source_problems = bool(out.problems)
    if not isinstance(report, Mapping):
        out.problem(f"report must be a dict with keys {list(ENCODER_REPORT_KEYS)}, not {type(report).__name__}")
        return out.result()
    missing = [key for key in ENCODER_REPORT_KEYS if _blank(report.get(key))]
    if missing:
        out.problem(f"report leaves {missing} blank: fill in every one of {list(ENCODER_REPORT_KEYS)}")
    _check_model_fields(out, report, source)
    if source_problems:
        out.problem("the lane questions (dense_wins, bm25_wins) are checked once the dense source above is right")
        return out.result()
    lanes = _LaneProbe(source, cases, chunks, as_caller_map(callers), on_date, top_k)
    if not _blank(report.get("dense_wins")):
        case = lanes.positive(out, "dense_wins", report["dense_wins"])
        if case is not None and lanes.wins(out, "dense_wins", case, winner="dense", loser="bm25"):
            _check_shared_terms(out, report.get("shared_terms"), case, lanes.expected_chunk(case))
    if not _blank(report.get("bm25_wins")):
        case = lanes.positive(out, "bm25_wins", report["bm25_wins"])
        if case is not None:
            lanes.wins(out, "bm25_wins", case, winner="bm25", loser="dense")
    return out.result()


def _check_model_fields(out: Collector, report: Mapping[str, Any], source: Any) -> None:
    model = dict(getattr(source, "model", None) or {})
    if not model or not _real_encoder(source):
        return  # the source is the problem (said above); the report cannot be read against it
    for key, actual, where in (
        ("model", model.get("model"), "MODEL.json's 'model' field"),
        ("dim", getattr(source, "dimension", None), "MODEL.json's 'dim' field, or dense.dimension"),
        ("normalized", model.get("normalized"), "MODEL.json's 'normalized' field (a bool)"),
    ):
        if _blank(report.get(key)) or actual is None:
            continue  # a field MODEL.json lacks is the record's problem (said above), not the report's
        if key == "model" and model_revision(actual) is not None:
            continue  # MODEL.json names another revision (said above): copying it would make the report wrong
        out.check(
            report[key] == actual and type(report[key]) is type(actual),
            f"report[{key!r}] = {actual!r}, as recorded",
            f"report[{key!r}] is {report[key]!r}, which is not what the vectors record: read {where}",
        )


class _LaneProbe:
    """Each lane's top k for a case, over its caller's permitted chunks on its date."""

    def __init__(
        self,
        source: Any,
        cases: Sequence[Case],
        chunks: Sequence[PolicyChunk],
        callers: Mapping[str, Caller],
        on_date: dt.date,
        top_k: int,
    ) -> None:
        self.source, self.chunks, self.callers, self.on_date, self.top_k = source, chunks, callers, on_date, top_k
        self.cases = {c.name: c for c in cases}
        self.by_id = {c.chunk_id: c for c in chunks}
        self.has_vector = query_lookup(source)

    def positive(self, out: Collector, key: str, name: object) -> Case | None:
        case = self.cases.get(name) if isinstance(name, str) else None
        if case is None:
            out.problem(f"report[{key!r}] is {name!r}, which is not one of your cases' names ({sorted(self.cases)[:4]} ...)")
            return None
        if case.kind != "positive" or not case.expected:
            out.problem(f"report[{key!r}]: case {name!r} is a {case.kind} case; name a positive case, which expects a chunk")
            return None
        if case.caller not in self.callers or case.expected[0] not in self.by_id:
            out.problem(f"report[{key!r}]: case {name!r} names an unknown caller or chunk; fix it with exercise 1's check")
            return None
        if self.has_vector is not None and not self.has_vector(case.query):
            out.problem(f"report[{key!r}]: case {name!r} has no stored query vector; {no_vector_hint(1)}")
            return None
        return case

    def expected_chunk(self, case: Case) -> PolicyChunk:
        return self.by_id[case.expected[0]]

    def ids(self, case: Case, lane: str) -> list[str]:
        universe = permitted_chunks(self.callers[case.caller], self.chunks, case.on_date or self.on_date)
        if lane == "dense":
            ranked = dense_rank(case.query, universe, self.source, top_k=self.top_k)
        else:
            ranked = bm25_rank(case.query, universe, top_k=self.top_k)
        return [chunk.chunk_id for chunk, _ in ranked]

    def wins(self, out: Collector, key: str, case: Case, *, winner: str, loser: str) -> bool:
        expected = case.expected[0]
        found = {lane: self.ids(case, lane) for lane in (winner, loser)}
        if expected not in found[winner]:
            out.problem(
                f"report[{key!r}]: for case {case.name!r} the {winner} lane's top {self.top_k} is {found[winner]}, "
                f"without {expected}: pick a case the {winner} lane finds"
            )
            return False
        if expected in found[loser]:
            out.problem(
                f"report[{key!r}]: the {loser} lane finds {expected} for case {case.name!r} too "
                f"(its top {self.top_k}: {found[loser]}): pick a case the {loser} lane misses"
            )
            return False
        out.passes.append(f"{case.name}: {winner} finds {expected} in its top {self.top_k}, {loser} does not")
        return True


def _check_shared_terms(out: Collector, answer: object, case: Case, chunk: PolicyChunk) -> None:
    if _blank(answer):
        return
    shared = set(tokens(case.query)) & set(tokens(chunk.text))
    if not isinstance(answer, (set, frozenset, list, tuple)) or not all(isinstance(t, str) for t in answer):
        out.problem(f"report['shared_terms'] must be a set of analysed terms (strings), not {answer!r}")
        return
    given = set(answer)
    extra = sorted(given - shared)
    if given == shared:
        scored = "BM25 has nothing to score" if not shared else "the only terms BM25 can score"
        out.passes.append(f"{case.name} shares {sorted(shared) or 'no analysed term'} with {chunk.chunk_id}: {scored}")
        return
    detail = f"{extra} do not occur in both the analysed query and the chunk's analysed text" if extra else (
        f"{len(shared - given)} shared term(s) are missing"
    )
    out.problem(
        f"report['shared_terms'] for case {case.name!r} is not the overlap BM25 scores: {detail}; "
        f"compare set(labsrc.tokens(query)) with set(labsrc.tokens(chunk.text)) for {chunk.chunk_id}"
    )
