"""The lesson notebooks' student twins (notebooks/student/, written by notebooks/make_students.py).

Each lesson notebook is the solution, validated by nbval. Its twin blanks every answer marked
``# ANSWER``; these tests check that the twins are up to date, handed out blank, and that every
check cell of a twin stops with its hint (``BlankAnswer``), never a NameError or TypeError.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from labsrc.datasets import find_dataset_dir
from labsrc.engines import postgres_available

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
_spec = importlib.util.spec_from_file_location("make_students", NOTEBOOKS / "make_students.py")
make_students = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_students)

LESSONS = make_students.lesson_notebooks()
#: Lesson notebooks that run on BEIR SciFact (notebooks/conftest.py skips them without it).
BEIR = {"08-tuning-fusion", "09-real-benchmark", "11-filter-placement"}
POSTGRES = {"12-into-a-real-database"}
REQUIRE = re.compile(r'^require_answer\("(\w+)"', re.MULTILINE)


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source


def test_every_lesson_has_a_twin():
    assert [p.name[:2] for p in LESSONS] == [f"{n:02d}" for n in range(1, 14)]
    twins = sorted(p.name for p in make_students.STUDENT_DIR.glob("*.ipynb"))
    assert twins == [p.name for p in LESSONS]


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_lesson_has_a_check_yourself_block_with_asserts_and_marked_answers(path):
    cells = _cells(path)
    headings = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and "## Check yourself" in _source(c)]
    assert len(headings) == 1, f"{path.name}: one '## Check yourself' heading, found {len(headings)}"
    after = [_source(c) for c in cells[headings[0]:] if c["cell_type"] == "code"]
    assert any(line.startswith("assert ") for s in after for line in s.splitlines()), f"{path.name}: no assert"
    assert not any("## Mastery check" in _source(c) for c in cells), f"{path.name} still ends with a 'Mastery check'"
    # Every marked answer is checked by a later cell that first calls require_answer with its name.
    code = [_source(c) for c in cells if c["cell_type"] == "code"]
    for i, source in enumerate(code):
        for target in make_students.answer_targets(source):
            if target == "row":  # notebook 11: a helper line of the answer, not checked on its own
                continue
            assert any(target in REQUIRE.findall(s) for s in code[i + 1:]), f"{path.name}: {target} is never required"


def test_the_twins_are_up_to_date_with_the_generator():
    for path in LESSONS:
        twin = make_students.STUDENT_DIR / path.name
        assert twin.read_text(encoding="utf-8") == make_students.nbformat.writes(make_students.student_twin(path)), (
            f"{twin.name} is out of date: run python notebooks/make_students.py"
        )


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_a_twin_is_handed_out_blank_and_without_outputs(path):
    twin = _cells(make_students.STUDENT_DIR / path.name)
    solution = _cells(path)
    assert len(twin) == len(solution)
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in twin if c["cell_type"] == "code")
    twin_code = "\n".join(_source(c) for c in twin if c["cell_type"] == "code")
    assert make_students.MARKER not in twin_code
    for target in {t for c in solution if c["cell_type"] == "code" for t in make_students.answer_targets(_source(c))}:
        assert f"{target} = ...  # your answer" in twin_code
    assert "Student version." in _source(twin[0]) and "you will be able to" in _source(twin[0]).lower()


def test_blank_answers_replaces_whole_statements_only():
    source = 'x = 1\n# Your answer:\nmy_case = Case(  # ANSWER\n    name="a",\n    kind="restricted",\n)\nprint(my_case)'
    assert make_students.blank_answers(source) == "x = 1\n# Your answer:\nmy_case = ...  # your answer\nprint(my_case)"
    assert make_students.answer_targets(source) == ["my_case"]
    with pytest.raises(ValueError, match="marks an assignment to one name"):
        make_students.blank_answers("a, b = 1, 2  # ANSWER")


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_check_in_a_twin_stops_with_its_hint(path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    if (path.stem in BEIR or path.stem in POSTGRES) and find_dataset_dir("scifact") is None:
        pytest.skip("needs BEIR scifact (see notebooks/conftest.py)")
    if path.stem in POSTGRES and (reason := postgres_available()):
        pytest.skip(reason)
    twin = make_students.STUDENT_DIR / path.name
    notebook = nbformat.read(twin, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", allow_errors=True, resources={"metadata": {"path": str(twin.parent)}}
    )
    client.execute()
    errors = {}
    for i, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                errors[i] = (output["ename"], output["evalue"])
    checks = {i: REQUIRE.findall(c.source) for i, c in enumerate(notebook.cells) if c.cell_type == "code"}
    checks = {i: names for i, names in checks.items() if names}
    # Exactly the check cells stop, each on its first blank answer, with its hint; nothing else fails.
    assert sorted(errors) == sorted(checks), f"{twin.name}: errors in cells {sorted(errors)}, checks in {sorted(checks)}: {errors}"
    for i, (ename, evalue) in errors.items():
        assert ename == "BlankAnswer", f"{twin.name}, cell {i}: {ename}: {evalue}"
        assert f"`{checks[i][0]}` is still blank (...): " in evalue
        # The hint is the one the cell passes to require_answer (its opening words, before any f-string field).
        hint = evalue.split("is still blank (...): ", 1)[1]
        assert hint and hint[:10] in notebook.cells[i].source, f"{twin.name}, cell {i}: hint {hint!r}"


def _with_answer(path: Path, target: str, statement: str):
    """The lesson notebook with the marked answer to ``target`` replaced by ``statement`` (a learner's mistake)."""
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        for name, first, last in make_students._marked(cell.source):
            if name == target:
                lines = cell.source.split("\n")
                cell.source = "\n".join([*lines[:first], statement, *lines[last + 1:]])
                return notebook
    raise AssertionError(f"{path.name} has no marked answer {target!r}")


def _run_until_check(notebook, target: str) -> tuple[str, str, str]:
    """Run the notebook up to the check of ``target``; its printed text, error name and error value."""
    nbclient = pytest.importorskip("nbclient")
    last = next(i for i, c in enumerate(notebook.cells) if c.cell_type == "code" and target in REQUIRE.findall(c.source))
    notebook.cells = notebook.cells[: last + 1]
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3", allow_errors=True,
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    outputs = notebook.cells[last].get("outputs", [])
    printed = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    error = next((o for o in outputs if o.get("output_type") == "error"), {})
    return printed, error.get("ename", ""), error.get("evalue", "")


@pytest.mark.parametrize(("notebook", "target", "statement", "ename", "said"), [
    ("02-sparse-lane-bm25", "zero_term", 'zero_term = ["laptop"]', "WrongAnswer",
     "`zero_term` is list ['laptop'], not a string: one term of the analysed query, as a string"),
    ("06-release-gates", "my_recall_at_1", "my_recall_at_1 = 0.67", "WrongAnswer",
     "`my_recall_at_1` is float 0.67, not a dict: a dict"),
    ("06-release-gates", "my_recall_at_1", "my_recall_at_1 = [2 / 3, 2 / 3, 1.0]", "WrongAnswer",
     "`my_recall_at_1` is list [0.6666666666666666, 0.6666666666666666, 1.0], not a dict"),
    ("06-release-gates", "my_recall_at_1", 'my_recall_at_1 = {"bm25": 2 / 3, "dense": 2 / 3}', "WrongAnswer",
     "`my_recall_at_1` has no 'hybrid' key: give every one of ['bm25', 'dense', 'hybrid']"),
])
def test_a_wrong_typed_answer_stops_its_check_with_the_hint(notebook, target, statement, ename, said):
    printed, got, evalue = _run_until_check(_with_answer(NOTEBOOKS / f"{notebook}.ipynb", target, statement), target)
    assert got == ename, (got, evalue)
    assert said in evalue
    assert "Correct" not in printed  # the answer is not given away


def test_a_restricted_case_forbidding_a_superseded_chunk_is_refused_as_labsrc_gate_refuses_it():
    statement = ('my_case = Case(name="my-merchant-refund", query="RPL-14 damaged refurbished laptops", '
                 'caller="luna-48291", kind="restricted", forbidden=("eu-refurb-v1-rule",))')
    notebook = _with_answer(NOTEBOOKS / "06-release-gates.ipynb", "my_case", statement)
    printed, ename, evalue = _run_until_check(notebook, "my_case")
    assert ename == "AssertionError" and "not yet: see the hint above" in evalue
    assert ("Hint: labsrc gate would refuse this case: case 'my-merchant-refund', field 'kind', value 'restricted': "
            "none of the forbidden chunks is hidden from 'luna-48291'") in printed
    assert ("for being restricted (eu-refurb-v1-rule is hidden as superseded); make it a 'superseded' case, "
            "the kind that matches why they are hidden") in printed
