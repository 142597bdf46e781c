"""Drift guard for the notebooks: they import labsrc, they never redefine it.

A notebook that pastes in its own ``bm25_rank`` or ``PolicyRetriever`` keeps
working after the library changes, silently teaching the old behaviour. This
test parses every code cell under ``notebooks/`` (IPython magics stripped) and
fails if a ``def`` or ``class`` reuses a name from ``labsrc.__all__``. It also
checks the house rule that every notebook opens by telling the learner what
they will be able to do.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import labsrc

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(path for path in NOTEBOOK_DIR.rglob("*.ipynb") if ".ipynb_checkpoints" not in path.parts)

# Cell magics whose body is ordinary Python; any other cell magic (%%bash, %%html, ...) is not Python.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun"})
# A line magic or a shell escape, such as ``%matplotlib inline`` or ``!ls``.
MAGIC_LINE = re.compile(r"^(\s*)[%!].*$")

OPENING_PHRASE = "you will be able to"


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def python_source(cell_source: str) -> str:
    """The cell as plain Python: each magic line becomes ``pass`` at its indentation, so blocks stay
    valid and line numbers stay put; a cell magic whose body is not Python empties the cell."""
    lines = cell_source.splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        magic = lines[0].lstrip()[2:].split(maxsplit=1)
        if not magic or magic[0] not in PYTHON_CELL_MAGICS:
            return ""
        lines = [""] + lines[1:]
    return "\n".join(MAGIC_LINE.sub(r"\1pass", line) for line in lines)


def defined_names(cell_source: str) -> set[str]:
    """Names bound by ``def``, ``async def`` or ``class`` anywhere in the cell, nested ones included."""
    tree = ast.parse(python_source(cell_source))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def test_notebooks_exist():
    assert NOTEBOOKS, f"no notebooks found under {NOTEBOOK_DIR}"


def test_public_api_is_listed():
    # The guard is only as good as the list it checks against.
    assert {"bm25_rank", "dense_rank", "reciprocal_rank_fusion", "PolicyRetriever", "tokens"} <= set(labsrc.__all__)


def test_magics_are_stripped_before_parsing():
    cell = "%matplotlib inline\n!echo hi\nfor _ in range(2):\n    %time x = 1"
    assert python_source(cell) == "pass\npass\nfor _ in range(2):\n    pass"
    assert ast.parse(python_source(cell))
    assert python_source("%%bash\necho def tokens(): pass") == ""
    assert defined_names("%%time\ndef tokens(text):\n    return []") == {"tokens"}


def test_detector_finds_nested_and_class_definitions():
    source = "class BM25Index:\n    pass\n\nif True:\n    def explain(q):\n        return q\n"
    assert defined_names(source) == {"BM25Index", "explain"}
    assert defined_names("from labsrc import tokens\nwords = tokens('a b')") == set()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(NOTEBOOK_DIR)))
def test_notebook_does_not_redefine_labsrc(path):
    public = set(labsrc.__all__)
    shadowing = []
    for number, cell in enumerate(_cells(path), start=1):
        if cell["cell_type"] != "code":
            continue
        try:
            names = defined_names(_source(cell))
        except SyntaxError as exc:
            pytest.fail(f"{path.name}, cell {number}: not valid Python after stripping magics: {exc}")
        shadowing += [f"cell {number}: {name}" for name in sorted(names & public)]
    assert not shadowing, f"{path.name} redefines labsrc public names (import them instead): {shadowing}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(NOTEBOOK_DIR)))
def test_notebook_opens_with_learning_goals(path):
    cells = _cells(path)
    assert cells, f"{path.name} has no cells"
    first = cells[0]
    assert first["cell_type"] == "markdown", f"{path.name}: the first cell must be Markdown"
    assert OPENING_PHRASE in _source(first).lower(), (
        f"{path.name}: the first cell must say what the learner will be able to do ({OPENING_PHRASE!r} …)"
    )
