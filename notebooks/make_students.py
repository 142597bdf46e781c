"""Write the student twin of each lesson notebook: ``notebooks/NN-name.ipynb`` -> ``notebooks/student/NN-name.ipynb``.

The lesson notebooks are the solutions: every "Check yourself" answer is filled in, on a
statement whose first line ends with the marker comment ``# ANSWER``, and nbval validates them.
The twin is the same notebook with each marked statement replaced by ``name = ...`` and no
outputs. Each check cell starts with ``labsrc.course.require_answer``, so on a blank answer it
stops with its hint (``BlankAnswer``), not with a TypeError. tests/test_student_notebooks.py
checks that the twins are up to date; notebooks/student_checks.py, run by nbval in each lesson's
own kernel, checks that every check cell of a twin stops that way.

After editing a lesson notebook, regenerate (and do not execute the twins in place):

    python notebooks/make_students.py            # all twins
    python notebooks/make_students.py --check    # exit 1 if a twin is out of date
"""

from __future__ import annotations

import ast
import copy
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
STUDENT_DIR = HERE / "student"
MARKER = "# ANSWER"
BLANK = "...  # your answer"
NOTE = (
    "\n\n> **Student version.** Each *Your answer* line is blank (`...`): fill it in, then run the check below it "
    "until it prints *Correct*. The solution, with outputs, is `notebooks/{name}`."
)


def lesson_notebooks() -> list[Path]:
    """The solutions: ``notebooks/NN-name.ipynb``, in order."""
    return sorted(p for p in HERE.glob("[0-9][0-9]-*.ipynb"))


def answer_targets(source: str) -> list[str]:
    """The assignment targets of the marked statements in one cell, in order."""
    return [target for target, _, _ in _marked(source)]


def _marked(source: str) -> list[tuple[str, int, int]]:
    """``(target, first line, last line)`` (0-based, inclusive) of each top-level marked assignment."""
    if MARKER not in source:
        return []  # also spares cells with IPython magics, which ast cannot parse
    lines = source.split("\n")
    found = []
    for node in ast.parse(source).body:
        if lines[node.lineno - 1].rstrip().endswith(MARKER):
            if not isinstance(node, ast.Assign) or len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
                raise ValueError(f"line {node.lineno}: {MARKER} marks an assignment to one name, not {lines[node.lineno - 1]!r}")
            found.append((node.targets[0].id, node.lineno - 1, node.end_lineno - 1))
    return found


def replace_marked(source: str, statement: Callable[[str], str | None]) -> str:
    """The cell with each marked statement replaced by ``statement(name)`` (kept where that is None)."""
    lines = source.split("\n")
    for target, first, last in reversed(_marked(source)):
        new = statement(target)
        if new is not None:
            lines[first:last + 1] = [new]
    return "\n".join(lines)


def blank_answers(source: str) -> str:
    """The cell with each marked statement replaced by ``name = ...  # your answer``."""
    return replace_marked(source, lambda target: f"{target} = {BLANK}")


def student_twin(path: Path) -> nbformat.NotebookNode:
    """The student version of one lesson notebook (in memory)."""
    notebook = copy.deepcopy(nbformat.read(path, as_version=4))
    targets = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        targets += answer_targets(cell.source)
        cell.source = blank_answers(cell.source)
        cell.outputs = []
        cell.execution_count = None
        cell.metadata.pop("execution", None)
    if not targets:
        raise ValueError(f"{path.name} marks no answer with {MARKER}")
    notebook.cells[0].source += NOTE.format(name=path.name)
    return notebook


def main(argv: list[str]) -> int:
    check = "--check" in argv
    STUDENT_DIR.mkdir(exist_ok=True)
    stale = []
    for path in lesson_notebooks():
        text = nbformat.writes(student_twin(path))
        out = STUDENT_DIR / path.name
        if check:
            if not out.is_file() or out.read_text(encoding="utf-8") != text:
                stale.append(out.name)
            continue
        out.write_text(text, encoding="utf-8")
        print("wrote", out.relative_to(HERE))
    if stale:
        print(f"out of date: {stale}; run python notebooks/make_students.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
