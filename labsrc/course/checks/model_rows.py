"""Vectors are the model they claim: stored rows compared with that model's own encodings of the same texts.

``MODEL.json`` is text anyone can write. Vectors from another model (same
dimension, normalised) under a ``MODEL.json`` naming all-MiniLM-L6-v2 pass every
check of the record; so do query rows written in another order than
``query_ids.txt``, or a chunk's row filed under another chunk's id. Each is a
dense lane that measures something else than it says. So step 3 and the rubric
compare stored rows with the model's own encodings (:func:`check_rows`):

* **chunk rows** against the course's reference vectors
  (``fixtures/policies/vectors/all-MiniLM-L6-v2``: every course chunk and the
  course's own queries, written by ``labsrc embed`` with the bundled model and
  checksummed). No model is needed for them, so every chunk row is checked;
* **query rows** of the course's own questions against the same reference, and
  the learner's own questions against a fresh encoding with the model itself,
  when the ``embed`` extra is installed (:data:`SAMPLE` of them, sorted by case
  name). Without it they are named as not verified, with the install command.

A row matches when its cosine with the model's encoding is at least
:data:`SAME_ROW_COSINE`: one model's float32 rows agree far closer than that
across machines (0.99999 and up), and another model's rarely pass 0.9. A row
that does not match is then compared with every other encoding at hand, so
"the row stored for A is the encoding of B" (rows out of order, or under the
wrong id) is told apart from "not this model at all".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from labsrc.errors import LabError
from labsrc.lanes.coverage import query_lookup
from labsrc.records.cases import Case
from labsrc.records.policy import PolicyChunk

__all__ = ["SAME_ROW_COSINE", "SAMPLE", "RowCheck", "check_rows", "model_encoder", "reference_dir"]

#: A stored row is the model's encoding of its text when their cosine is at least this.
SAME_ROW_COSINE = 0.999
#: How many of the learner's own questions are encoded afresh (the model takes about 10 ms a short text).
SAMPLE = 4
_INSTALL = "pip install 'hybrid-retrieval-lab[embed]'"


@dataclass(frozen=True)
class RowCheck:
    """What :func:`check_rows` found: ``verified`` only when every row it compared matched and none was left out."""

    verified: bool
    compared: int
    problems: tuple[str, ...] = ()
    unverified: tuple[str, ...] = ()  # why some rows could not be compared (no model here, another model named)

    @property
    def summary(self) -> str:
        return f"{self.compared} stored rows match the model's own encodings of their texts"


def reference_dir() -> Path:
    """The course's reference vectors: every course chunk and question, written by ``labsrc embed``."""
    from labsrc.datasets import fixtures_dir

    return fixtures_dir() / "policies" / "vectors" / "all-MiniLM-L6-v2"


@lru_cache(maxsize=1)
def _reference() -> Any:
    from labsrc.lanes.embed import load_embeddings

    return load_embeddings(reference_dir())


def model_encoder(model: str) -> Any:
    """An encoder for ``model`` as ``labsrc embed`` runs it, or None when it cannot run here (a :class:`str`
    reason is raised as :class:`LabError`). Tests replace this function with a stand-in."""
    from labsrc.lanes.embed import MODEL_NAME, minilm_encoder

    if model != MODEL_NAME:
        raise LabError(f"only {MODEL_NAME} can be re-encoded here, not {model!r}")
    try:
        return minilm_encoder()
    except ImportError as exc:  # MissingDependency is an ImportError too
        raise LabError(f"the 'embed' extra is not installed ({_INSTALL}): {exc}") from exc


def _unit(rows: np.ndarray) -> np.ndarray:
    rows = np.atleast_2d(np.asarray(rows, dtype=np.float64))
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


def check_rows(
    source: Any,
    cases: Sequence[Case],
    chunks: Sequence[PolicyChunk],
    *,
    encoder_for: Callable[[str], Any] | None = None,
    sample: int = SAMPLE,
    skip: frozenset[str] = frozenset(),
) -> RowCheck:
    """Compare ``source``'s stored rows (a ``labsrc embed`` folder) with the model's own encodings of their texts.

    ``encoder_for``: model name → encoder, :func:`model_encoder` unless given; asked only when a learner's own
    question needs a fresh encoding. ``skip``: names of cases whose query rows are already known wrong (a chunk's
    document vector stored as the query's, which step 3 names as such). See the module docstring for what is
    compared and what a mismatch says.
    """
    from labsrc.lanes.embed import MODEL_NAME

    model = str(dict(getattr(source, "model", None) or {}).get("model", ""))
    problems: list[str] = []
    unverified: list[str] = []
    compared = 0
    folder = getattr(source, "path", None)
    if folder is not None and not (Path(folder) / "checksums.json").exists():
        problems.append(f"{folder}/checksums.json is missing: labsrc embed writes it, and without it nothing ties "
                        "the rows to what the encoder wrote; re-run labsrc embed")
    if model != MODEL_NAME:
        return RowCheck(False, 0, tuple(problems), (f"rows of {model or 'an unnamed model'} cannot be checked here",))
    reference = _reference()
    by_id = {c.chunk_id: c for c in chunks}

    # Chunk rows: every chunk the reference holds, against its reference row.
    ids = [i for i in reference.vectors.doc_ids if i in by_id]
    if ids:
        stored = _unit(source.document_matrix([by_id[i] for i in ids]))
        model_rows = _unit(reference.document_matrix([by_id[i] for i in ids]))
        problems += _mismatches(stored, model_rows, [f"chunk {i}" for i in ids], what="chunk")
        compared += len(ids)

    # Query rows: the course's own questions against the reference, the learner's against a fresh encoding.
    has_query = query_lookup(source) or (lambda text: False)
    asked = sorted((c for c in cases if c.query.strip() and c.name not in skip and has_query(c.query)),
                   key=lambda c: c.name)
    known = [c for c in asked if reference.has_query(c.query)]
    own = [c for c in asked if not reference.has_query(c.query)][: max(0, int(sample))]
    left_out = len([c for c in asked if not reference.has_query(c.query)]) - len(own)
    fresh: dict[str, np.ndarray] = {c.query: reference.query_vector(c.query) for c in known}
    if own:
        try:
            encoder = (encoder_for or model_encoder)(model)
            rows = encoder.encode([c.query for c in own])
            fresh.update({c.query: row for c, row in zip(own, np.asarray(rows), strict=True)})
        except LabError as exc:
            unverified.append(f"{len(own) + left_out} of your own questions' rows could not be checked against the "
                              f"model: {exc}")
            own = []
    checked = [*known, *own]
    if checked:
        stored = _unit(np.stack([source.query_vector(c.query) for c in checked]))
        model_rows = _unit(np.stack([fresh[c.query] for c in checked]))
        problems += _mismatches(stored, model_rows, [f"query {c.query!r}" for c in checked], what="query")
        compared += len(checked)
    return RowCheck(not problems and not unverified and compared > 0, compared, tuple(problems), tuple(unverified))


def _mismatches(stored: np.ndarray, model_rows: np.ndarray, names: list[str], *, what: str) -> list[str]:
    """What is wrong with the rows that are not the model's encoding of their own text: each row that is another
    text's encoding is named (up to three), the rest are said to be another model's, with the first as example."""
    cosines = stored @ model_rows.T  # row i's stored vector against every encoding at hand
    moved, foreign = [], []
    for i, name in enumerate(names):
        if cosines[i, i] >= SAME_ROW_COSINE:
            continue
        best = int(np.argmax(cosines[i]))
        if best != i and cosines[i, best] >= SAME_ROW_COSINE:
            moved.append(f"the row stored for {name} is the encoding of {names[best]}")
        else:
            foreign.append((name, float(cosines[i, i])))
    found = []
    if moved:
        order = "out of order" if what == "query" else "under the wrong ids"
        more = f" (and {len(moved) - 3} more)" if len(moved) > 3 else ""
        found.append(f"{what} rows are {order}: " + "; ".join(moved[:3]) + more + ": re-run labsrc embed")
    if foreign:
        name, cosine = foreign[0]
        found.append(f"these vectors are not all-MiniLM-L6-v2: cosine {cosine:.2f} between the row stored for {name} "
                     f"and the model's own encoding of it ({len(foreign)} of {len(names)} {what} rows differ); "
                     "embed with labsrc embed, which runs the model MODEL.json names")
    return found
