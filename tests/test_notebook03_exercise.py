"""Notebook 03's "Check yourself" (issue 31): the example is no answer, a tie is no win, the hints give nothing away.

Exercise 1 asks for the cosine of the paraphrase vector (0.98, 0.05, 0) and the carrier rule's (0, 0, 1): the
answer is 0, the dot product 0.98*0 + 0.05*0 + 0*1, which the old hint spelled out. Exercise 2 asks for a query
vector whose strictly closest chunk is the footwear rule while the refurbished-laptop rule scores above 0:
a vector whose second coordinate is strictly the largest and whose first is positive, such as [0.3, 0.9, 0.0].
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest

from labsrc import cosine_similarity, lesson, permitted_chunks
from labsrc.course import ANSWER_SHAPES

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
LESSON = NOTEBOOKS / "03-dense-lane.ipynb"
TWIN = NOTEBOOKS / "student" / "03-dense-lane.ipynb"
_spec = importlib.util.spec_from_file_location("make_students", NOTEBOOKS / "make_students.py")
make_students = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_students)

EXAMPLE_HINT = "three numbers of your own, shaped like [0.1, 0.2, 0.7]"


def _source(cell: dict) -> str:
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source


def _texts(path: Path) -> list[str]:
    """Every cell's source and printed output in one notebook."""
    texts = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        texts.append(_source(cell))
        for output in cell.get("outputs", []):
            text = output.get("text", "")
            texts.append("".join(text) if isinstance(text, list) else text)
    return texts


# --- the hints ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [LESSON, TWIN], ids=["lesson", "student"])
def test_no_hint_spells_out_exercise_1s_dot_product(path):
    # The answer to exercise 1 is the sum 0.98*0 + 0.05*0 + 0*1 = 0; no cell may write it, in any spacing or with
    # any multiplication sign, nor either of its products of a paraphrase coordinate with the carrier rule's 0.
    product = re.compile(r"0\.(98|05)\s*(\*|×|·|\\cdot|\\times)\s*0(?![\d.])")
    for text in _texts(path):
        assert "0.98*0+0.05*0+0*1" not in re.sub(r"\s+", "", text)
        assert not product.search(text), f"{path.name} gives the sum away: {text[:200]!r}"


def test_the_old_giveaway_hints_are_gone():
    text = "\n".join(_texts(LESSON))
    assert "start with the dot product" not in text
    assert "Make the footwear coordinate (the second) the largest" not in text
    assert "Give the first coordinate a small positive value" not in text


def _scores(vector) -> dict[str, float]:
    data = lesson()
    universe = permitted_chunks(data.luna, data.chunks, data.eval_date)
    matrix = data.vectors.document_matrix(universe)
    return dict(zip([c.chunk_id for c in universe], cosine_similarity(matrix, np.array(vector, dtype=float))))


def _solves_exercise_2(vector) -> bool:
    scores = _scores(vector)
    footwear = scores.pop("eu-footwear-v1-rule")
    return all(footwear > s for s in scores.values()) and scores["eu-refurb-v2-rule"] > 0


def test_exercise_2s_hints_show_no_vector_that_solves_it():
    assert _solves_exercise_2([0.3, 0.9, 0.0]) and not _solves_exercise_2([0.5, 0.5, 0.0])  # the oracle works
    texts = _texts(TWIN)
    exercise = next(i for i, text in enumerate(texts) if text.startswith("**Exercise 2.**"))
    number = r"-?\d+(?:\.\d+)?"
    triple = re.compile(rf"[\[(]\s*({number})\s*,\s*({number})\s*,\s*({number})\s*[\])]")
    triples = {tuple(float(x) for x in m.groups()) for text in texts[exercise:] for m in triple.finditer(text)}
    assert (0.1, 0.2, 0.7) in triples  # the example is found, so the search reads the hints
    assert [t for t in sorted(triples) if _solves_exercise_2(t)] == []


def test_the_hint_shows_the_example_that_require_answer_refuses():
    example = list(ANSWER_SHAPES["my_query_vector"].example)
    assert f"shaped like {example}" in EXAMPLE_HINT
    assert any(f'require_answer("my_query_vector", my_query_vector, "{EXAMPLE_HINT}")' in t for t in _texts(LESSON))
    assert not _solves_exercise_2(example)  # and the example would be wrong anyway


# --- the check cell, run in the notebook's own kernel ------------------------------------------------


@pytest.fixture(scope="module")
def check_exercise_2():
    """Run notebook 03 up to exercise 2 once; return ``run(statement) -> (printed, error name, error value)``."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(LESSON, as_version=4)
    cells = notebook.cells
    answer = next(i for i, c in enumerate(cells)
                  if c.cell_type == "code" and "my_query_vector" in make_students.answer_targets(c.source))
    check = next(i for i, c in enumerate(cells) if c.source.startswith('require_answer("my_query_vector"'))
    client = nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True,
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    # Copies, each run: execute_cell puts the cell it runs into the notebook at its index.
    answer_cell, check_cell = copy.deepcopy(cells[answer]), copy.deepcopy(cells[check])
    with client.setup_kernel():
        for i in range(answer):
            if cells[i].cell_type == "code":
                client.execute_cell(cells[i], i)

        def run(statement: str) -> tuple[str, str, str]:
            mine = copy.deepcopy(answer_cell)
            mine.source = make_students.blank_answers(mine.source).replace(
                f"my_query_vector = {make_students.BLANK}", statement)
            assert statement in mine.source
            client.execute_cell(mine, answer)
            assert not [o for o in mine.outputs if o.output_type == "error"], mine.outputs
            cell = copy.deepcopy(check_cell)
            client.execute_cell(cell, check)
            printed = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
            error = next((o for o in cell.outputs if o.output_type == "error"), {})
            return printed, error.get("ename", ""), error.get("evalue", "")

        yield run


def test_the_example_pasted_as_the_answer_is_refused_as_the_example(check_exercise_2):
    printed, ename, evalue = check_exercise_2("my_query_vector = [0.1, 0.2, 0.7]")
    assert ename == "BlankAnswer"
    assert f"`my_query_vector` is the example [0.1, 0.2, 0.7], not an answer: {EXAMPLE_HINT}" in evalue
    assert "Correct" not in printed


def test_the_old_example_is_a_tie_and_is_refused_naming_the_tied_chunks(check_exercise_2):
    # [0.5, 0.5, 0.0] is equally close to two chunks; the old check's alphabetical tie-break passed it.
    printed, ename, evalue = check_exercise_2("my_query_vector = [0.5, 0.5, 0.0]")
    assert ename == "WrongAnswer"
    assert ("`my_query_vector` is equally close to eu-footwear-v1-rule and eu-refurb-v2-rule (score 0.707107): "
            "a tie is not a closest chunk, the answer must single one out: "
            "nudge your vector until one chunk scores strictly highest") in evalue
    assert "Correct" not in printed


def test_the_zero_vector_ties_all_three_chunks(check_exercise_2):
    printed, ename, evalue = check_exercise_2("my_query_vector = [0, 0, 0]")
    assert ename == "WrongAnswer"
    assert "equally close to eu-carrier-loss-v1, eu-footwear-v1-rule and eu-refurb-v2-rule (score 0.000000)" in evalue


@pytest.mark.parametrize(("statement", "hint"), [
    ("my_query_vector = [0.9, 0.3, 0.0]",
     "Hint: your vector is closest to eu-refurb-v2-rule. Which dimension does each chunk point along?"),
    ("my_query_vector = [0.0, 0.9, 0.1]",
     "Hint: the refurbished-laptop rule scores 0.000000, and the lane keeps only scores above 0."),
])
def test_a_wrong_answer_gets_a_hint_and_fails(check_exercise_2, statement, hint):
    printed, ename, evalue = check_exercise_2(statement)
    assert ename == "AssertionError" and "not yet: see the hint above" in evalue
    assert hint in printed and "Correct" not in printed


@pytest.mark.parametrize("statement", ["my_query_vector = [0.3, 0.9, 0.0]", "my_query_vector = (0.1, 0.7, 0.2)"])
def test_a_correct_answer_passes(check_exercise_2, statement):
    printed, ename, evalue = check_exercise_2(statement)
    assert (ename, evalue) == ("", "")
    assert printed.startswith("Correct: {'eu-carrier-loss-v1': ")
