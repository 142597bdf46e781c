"""Vectors are the model they claim (issue 48, part 2): stored rows against the model's own encodings.

Each test hands in the course's model answer's vectors with one thing changed, as a learner (or a shortcut) would:
another model's rows under the same MODEL.json, query rows written in another order, a chunk's row under another
id, no checksums.json, questions of one's own with and without the model at hand. ``reseal`` rewrites
checksums.json after an edit, as anyone who can edit the files can.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from factories import reseal

import labsrc
from labsrc.course.checks import check_dense_source, check_rows
from labsrc.course.checks import model_rows as model_rows_module
from labsrc.errors import LabError
from labsrc.lanes.embed import load_embeddings
from labsrc.records.cases import load_cases
from labsrc.records.loading import load_chunks

FIXTURES = labsrc.datasets.fixtures_dir()
SOLUTION = FIXTURES / "coursework" / "solution"
CHUNKS = load_chunks(FIXTURES / "policies" / "chunks.jsonl")
CASES = load_cases(SOLUTION / "cases.jsonl")


@pytest.fixture
def folder(tmp_path) -> Path:
    """A copy of the model answer's vectors, to edit."""
    return Path(shutil.copytree(SOLUTION / "vectors" / "all-MiniLM-L6-v2", tmp_path / "all-MiniLM-L6-v2"))


def rows_of(folder: Path, name: str) -> np.ndarray:
    return np.load(folder / f"{name}.npy")


def write_rows(folder: Path, name: str, rows: np.ndarray) -> None:
    np.save(folder / f"{name}.npy", rows.astype(np.float32))
    reseal(folder)


def test_the_model_answer_is_verified_without_the_model(folder):
    """Every chunk row and each of the course's questions is in the course's reference vectors: no model needed."""
    result = check_rows(load_embeddings(folder), CASES, CHUNKS, encoder_for=pytest.fail)
    assert result.verified and result.problems == () and result.unverified == ()
    assert result.compared == len(CHUNKS) + len(CASES)
    assert result.summary in check_dense_source(load_embeddings(folder), CASES, chunks=CHUNKS).passes


def test_another_models_rows_under_the_same_model_json_are_named(folder):
    # Another model: the same dimension, normalised, the same geometry even (a rotation), but not MiniLM's rows.
    rotation, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(384, 384)))
    for name in ("corpus", "queries"):
        write_rows(folder, name, rows_of(folder, name) @ rotation)
    result = check_dense_source(load_embeddings(folder), CASES, chunks=CHUNKS)
    said = " | ".join(result.problems)
    assert "these vectors are not all-MiniLM-L6-v2: cosine" in said
    assert f"({len(CHUNKS)} of {len(CHUNKS)} chunk rows differ)" in said
    assert "MODEL.json records sentence-transformers/all-MiniLM-L6-v2" in " | ".join(result.passes)  # the record is fine


def test_query_rows_out_of_order_are_named_as_such(folder):
    queries = rows_of(folder, "queries")
    write_rows(folder, "queries", np.roll(queries, 1, axis=0))  # query_ids.txt unchanged
    problems = check_rows(load_embeddings(folder), CASES, CHUNKS).problems
    assert len(problems) == 1 and problems[0].startswith("query rows are out of order: the row stored for query ")
    assert "is the encoding of query" in problems[0]


def test_a_chunk_row_under_another_chunks_id_is_named(folder):
    ids = (folder / "corpus_ids.txt").read_text(encoding="utf-8").split()
    corpus = rows_of(folder, "corpus")
    corpus[[3, 7]] = corpus[[7, 3]]
    write_rows(folder, "corpus", corpus)
    problems = check_rows(load_embeddings(folder), CASES, CHUNKS).problems
    assert problems == (
        f"chunk rows are under the wrong ids: the row stored for chunk {ids[3]} is the encoding of chunk {ids[7]}; "
        f"the row stored for chunk {ids[7]} is the encoding of chunk {ids[3]}: re-run labsrc embed",
    )


def test_a_missing_checksums_file_is_named(folder):
    (folder / "checksums.json").unlink()
    problems = check_rows(load_embeddings(folder), CASES, CHUNKS).problems
    assert problems == (f"{folder}/checksums.json is missing: labsrc embed writes it, and without it nothing ties the "
                        "rows to what the encoder wrote; re-run labsrc embed",)


def own_question(folder: Path, row: np.ndarray) -> list:
    """The model answer plus a question of the learner's own, stored with ``row``."""
    text = "can I swap a cracked refurbished notebook for another"
    case = labsrc.Case(name="my-own", query=text, caller=CASES[0].caller, kind="positive", expected=CASES[0].expected)
    ids = (folder / "query_ids.txt").read_text(encoding="utf-8").split() + ["my-own"]
    (folder / "query_ids.txt").write_text("\n".join(ids) + "\n", encoding="utf-8")
    with (folder / "queries.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"_id": "my-own", "text": text}) + "\n")
    model = json.loads((folder / "MODEL.json").read_text(encoding="utf-8"))
    model["rows"]["queries"] += 1
    (folder / "MODEL.json").write_text(json.dumps(model), encoding="utf-8")
    write_rows(folder, "queries", np.vstack([rows_of(folder, "queries"), row[None, :]]))
    return [*CASES, case]


class Table:
    """A stand-in for the model: the encodings it would give, looked up by text."""

    def __init__(self, rows: dict[str, np.ndarray]) -> None:
        self.rows = rows

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.rows[t] for t in texts])


def fresh_row(folder: Path) -> np.ndarray:
    """A row no stored text has: what the model gives a new question, as far as these tests go."""
    row = rows_of(folder, "queries")[:2].mean(axis=0)
    return row / np.linalg.norm(row)


def test_a_question_of_ones_own_is_encoded_afresh_and_must_match(folder):
    row = fresh_row(folder)
    cases = own_question(folder, row)
    source = load_embeddings(folder)
    mine = cases[-1].query
    assert check_rows(source, cases, CHUNKS, encoder_for=lambda model: Table({mine: row})).verified
    other = np.roll(row, 5)  # what another model would have written for it
    problems = check_rows(source, cases, CHUNKS, encoder_for=lambda model: Table({mine: other})).problems
    assert len(problems) == 1 and problems[0].startswith(
        f"these vectors are not all-MiniLM-L6-v2: cosine {float(row @ other / np.linalg.norm(row) / np.linalg.norm(other)):.2f} "
        f"between the row stored for query {mine!r}")


def test_without_the_model_a_question_of_ones_own_is_not_verified_and_says_how_to_install_it(folder, monkeypatch):
    cases = own_question(folder, fresh_row(folder))

    def no_model(model: str):
        raise LabError("the 'embed' extra is not installed (pip install 'hybrid-retrieval-lab[embed]'): no module")

    monkeypatch.setattr(model_rows_module, "model_encoder", no_model)
    result = check_rows(load_embeddings(folder), cases, CHUNKS)
    assert not result.verified and result.problems == ()
    assert result.unverified == ("1 of your own questions' rows could not be checked against the model: the 'embed' "
                                 "extra is not installed (pip install 'hybrid-retrieval-lab[embed]'): no module",)
    passes = check_dense_source(load_embeddings(folder), cases, chunks=CHUNKS).passes
    assert any(p.startswith("not verified here: 1 of your own questions") for p in passes)


def test_the_rubric_ticks_a_real_encoder_only_for_rows_it_verified(tmp_path):
    from labsrc.course import grade

    def evidence(sub: Path) -> tuple[bool, str]:
        result = grade(sub, measure=False, model_answer=True)
        verdict = next(v for v in result.levels if v.level == "Production-ready")
        return next((e.met, e.detail) for e in verdict.evidence if e.criterion.startswith("a versioned real encoder"))

    sub = Path(shutil.copytree(SOLUTION, tmp_path / "sub"))
    met, detail = evidence(sub)
    assert met and f"{len(CHUNKS) + len(CASES)} stored rows match the model's own encodings" in detail
    vectors = sub / "vectors" / "all-MiniLM-L6-v2"
    rotation, _ = np.linalg.qr(np.random.default_rng(1).normal(size=(384, 384)))
    for name in ("corpus", "queries"):
        write_rows(vectors, name, rows_of(vectors, name) @ rotation)
    met, detail = evidence(sub)
    assert not met and detail.startswith("these vectors are not all-MiniLM-L6-v2: cosine")
