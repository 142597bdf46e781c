"""The lesson notebooks' student twins (notebooks/student/, written by notebooks/make_students.py).

Each lesson notebook is the solution, validated by nbval. Its twin blanks every answer marked
``# ANSWER``; these tests check that the twins are up to date and handed out blank. That every
check cell of a twin stops with its hint (``BlankAnswer``), never a NameError or TypeError, and
that a wrong-typed answer stops its check with the message a learner should read, are nbval items
of the lessons themselves (notebooks/student_checks.py): they run in the lesson's kernel, so the
lesson's body is executed once, not once more per twin. The tests here check that those items are
there, in the right place, and that what they rely on holds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
sys.path.insert(0, str(NOTEBOOKS))
import make_students  # noqa: E402
import student_checks  # noqa: E402

LESSONS = make_students.lesson_notebooks()
REQUIRE = student_checks.REQUIRE


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


def test_every_lesson_runs_its_twins_checks_in_its_own_kernel_before_its_first_answer():
    # nbval's collection of the lessons, with the items notebooks/student_checks.py adds: each lesson's twin
    # check (and its wrong answers) come just before the lesson's first answer cell, in the same file.
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider",
                           *(str(p) for p in LESSONS)], capture_output=True, text=True, timeout=120, cwd=NOTEBOOKS.parent)
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    for path in LESSONS:
        start = student_checks.first_answer(student_checks.code_cells(make_students.nbformat.read(path, as_version=4)))
        mine = [i.split("::", 1)[1] for i in ids if i.startswith(f"notebooks/{path.name}::")]
        wrong = [row for row in student_checks.WRONG_ANSWERS if row[0] == path.stem]
        added = ["student twin: every check stops with its hint",
                 *(f"wrong answer {k}: {row[1]}" for k, row in enumerate(wrong, 1))]
        at = mine.index(f"Cell {start}")
        assert mine[at - len(added):at] == added, (path.name, mine)
        assert mine[at - len(added) - 1] == f"Cell {start - 1}"
    assert sum(row[0] == "06-release-gates" for row in student_checks.WRONG_ANSWERS) == 4


def test_the_namespace_is_put_back_exactly_as_it_was_saved():
    namespace = {"kept": [1], "changed": "lesson"}
    kept = namespace["kept"]
    namespace["get_ipython"] = lambda: type("Shell", (), {"user_ns": namespace})()
    exec(student_checks._SAVE, namespace)
    exec("changed = ...\nadded = 1", namespace)
    exec(student_checks._RESTORE, namespace)
    namespace.pop("__builtins__")  # exec adds it
    assert set(namespace) == {"kept", "changed", "get_ipython"}
    assert namespace["changed"] == "lesson" and namespace["kept"] is kept


def test_a_wrong_answer_replaces_only_its_marked_statement():
    cells = ["x = 1", "a = 2\nmy_case = Case(  # ANSWER\n    name='a',\n)\nprint(my_case)", "require_answer(\"my_case\")"]
    assert student_checks.first_answer(cells) == 1
    assert student_checks.replace_answer(cells, "my_case", "my_case = 3") == [
        "x = 1", "a = 2\nmy_case = 3\nprint(my_case)", "require_answer(\"my_case\")"]
    assert cells[1].startswith("a = 2\nmy_case = Case(")  # not mutated
    with pytest.raises(ValueError, match="no marked answer 'other'"):
        student_checks.replace_answer(cells, "other", "other = 1")


class _SilentKernel:
    """A kernel that takes a cell and never reports it idle."""

    interrupted = False

    def execute_cell_input(self, source, allow_stdin=None):
        return "m1"

    def await_reply(self, msg_id, timeout=None):
        return None

    def get_message(self, stream, timeout=None):
        from queue import Empty

        raise Empty

    def interrupt(self):
        self.interrupted = True


def test_a_cell_that_never_finishes_fails_its_item_and_is_interrupted():
    kernel = _SilentKernel()
    with pytest.raises(pytest.fail.Exception, match="a cell gave no answer within 300 s: 'while True: pass'"):
        student_checks.run_cell(kernel, "while True: pass")
    assert kernel.interrupted
