"""The student twins' checks, run in the kernel nbval already has for the lesson (``notebooks/conftest.py`` adds them).

A twin (``notebooks/student/``, written by ``make_students.py``) is its lesson with each marked answer
blanked. Every answer sits in the "Check yourself" block at the end, so the twin's cells up to the first
answer are the lesson's own, and nbval has just run them. Executing the whole twin again in a kernel
of its own only to reach that block cost as much as the lesson (676 s of worker time across the 13
twins). Instead, just before nbval runs the lesson's first answer cell, these items

1. save the kernel's namespace (a shallow copy of ``user_ns``: every name, bound to the same object),
2. run the twin's cells from there to the end (or a lesson with one wrong answer, up to its check),
3. put the namespace back exactly as saved, so the lesson's own answers run as if nothing had,

and judge what the cells raised: every check cell of a twin stops on its first blank answer with its
hint (``BlankAnswer``) and no other cell fails; a wrong answer stops its check with the message the
learner should read, without printing "Correct". A twin whose cells before the first answer are not the
lesson's is refused: the saved state would not be the twin's. A run that changes an object in place
(not a name) would change the lesson's later outputs, and nbval would fail on them.
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from queue import Empty

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_students  # noqa: E402

#: A check cell's first statement: ``require_answer("name", ...)``.
REQUIRE = re.compile(r'^require_answer\("(\w+)"', re.MULTILINE)
#: Seconds one cell of a twin may take (a lesson's cells take seconds).
CELL_TIMEOUT_S = 300.0

_SAVE = "__student_checks_saved__ = dict(get_ipython().user_ns)"
_RESTORE = ("(lambda ns, saved: (ns.clear(), ns.update(saved)))"
            "(get_ipython().user_ns, get_ipython().user_ns.pop('__student_checks_saved__'));")

#: ``(lesson, answer, statement, error name, words the check says)``: a learner's wrong-typed answer,
#: and the message its check stops with.
WRONG_ANSWERS = (
    ("02-sparse-lane-bm25", "zero_term", 'zero_term = ["laptop"]', "WrongAnswer",
     "`zero_term` is list ['laptop'], not a string: one term of the analysed query, as a string"),
    ("06-release-gates", "my_recall_at_1", "my_recall_at_1 = 0.67", "WrongAnswer",
     "`my_recall_at_1` is float 0.67, not a dict: a dict"),
    ("06-release-gates", "my_recall_at_1", "my_recall_at_1 = [2 / 3, 2 / 3, 1.0]", "WrongAnswer",
     "`my_recall_at_1` is list [0.6666666666666666, 0.6666666666666666, 1.0], not a dict"),
    ("06-release-gates", "my_recall_at_1", 'my_recall_at_1 = {"bm25": 2 / 3, "dense": 2 / 3}', "WrongAnswer",
     "`my_recall_at_1` has no 'hybrid' key: give every one of ['bm25', 'dense', 'hybrid']"),
    # A restricted case whose forbidden chunk is hidden as superseded: the check says why, as the gate would.
    ("06-release-gates", "my_case",
     'my_case = Case(name="my-merchant-refund", query="RPL-14 damaged refurbished laptops", '
     'caller="luna-48291", kind="restricted", forbidden=("eu-refurb-v1-rule",))', "AssertionError",
     "not yet: see the hint above"),
)

#: What the restricted-case answer above must print before it stops (the gate's own refusal, in full).
WRONG_ANSWER_PRINTS = {
    "my_case": (
        "Hint: labsrc gate would refuse this case: case 'my-merchant-refund', field 'kind', value 'restricted': "
        "none of the forbidden chunks is hidden from 'luna-48291'",
        "for being restricted (eu-refurb-v1-rule is hidden as superseded); make it a 'superseded' case, "
        "the kind that matches why they are hidden",
    ),
}


def code_cells(notebook) -> list[str]:
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]


def first_answer(sources: list[str]) -> int:
    """The index (among code cells) of the first cell that holds a marked answer."""
    return next(i for i, source in enumerate(sources) if make_students.answer_targets(source))


def replace_answer(sources: list[str], target: str, statement: str) -> list[str]:
    """The cells with the marked answer to ``target`` replaced by ``statement`` (a new list)."""
    changed = list(sources)
    for i, source in enumerate(sources):
        if any(name == target for name, _, _ in make_students._marked(source)):
            changed[i] = make_students.replace_marked(source, lambda name: statement if name == target else None)
            return changed
    raise ValueError(f"no marked answer {target!r}")


@dataclass
class CellRun:
    """What one cell printed and raised, as the kernel reported it."""

    printed: str = ""
    ename: str = ""
    evalue: str = ""


def run_cell(kernel, source: str) -> CellRun:
    """Execute ``source`` in nbval's kernel and collect its printed text and its error, if any, within
    :data:`CELL_TIMEOUT_S` in all (a cell that keeps printing is stopped too)."""
    deadline = time.monotonic() + CELL_TIMEOUT_S
    msg_id = kernel.execute_cell_input(source, allow_stdin=False)
    run = CellRun()
    try:
        kernel.await_reply(msg_id, timeout=CELL_TIMEOUT_S)
        while True:
            msg = kernel.get_message(stream="iopub", timeout=max(0.0, deadline - time.monotonic()))
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content["execution_state"] == "idle":
                return run
            if kind == "stream":
                run.printed += content["text"]
            elif kind == "error":
                run.ename, run.evalue = content["ename"], content["evalue"]
    except Empty:
        kernel.interrupt()
        raise pytest.fail.Exception(f"a cell gave no answer within {CELL_TIMEOUT_S:.0f} s: {source[:80]!r}") from None


class _InLessonKernel(pytest.Item):
    """An item that runs cells in the lesson's nbval kernel on a saved namespace, then restores it."""

    def _run(self, sources: list[str]) -> list[CellRun]:
        kernel = self.parent.kernel
        if kernel is None or not kernel.is_alive():
            raise pytest.fail.Exception("the lesson's kernel is not running (did an earlier cell kill it?)")
        saved = run_cell(kernel, _SAVE)
        if saved.ename:
            raise pytest.fail.Exception(f"could not save the namespace: {saved.ename}: {saved.evalue}")
        try:
            return [run_cell(kernel, source) for source in sources]
        finally:
            restored = run_cell(kernel, _RESTORE)
            if restored.ename:
                raise pytest.fail.Exception(f"could not restore the namespace: {restored.ename}: {restored.evalue}")

    def reportinfo(self):
        return self.path, None, self.name


class TwinChecks(_InLessonKernel):
    """Every check cell of the twin stops on its first blank answer with its hint; nothing else fails."""

    def __init__(self, *, twin: Path, **kwargs) -> None:
        super().__init__(**kwargs)
        self.twin = twin

    def runtest(self) -> None:
        nbformat = make_students.nbformat
        twin = code_cells(nbformat.read(self.twin, as_version=4))
        lesson = code_cells(nbformat.read(self.path, as_version=4))
        start = first_answer(lesson)
        if len(twin) != len(lesson) or twin[:start] != lesson[:start]:
            raise pytest.fail.Exception(f"{self.twin.name}: its cells before the first answer are not the lesson's: "
                                        "run python notebooks/make_students.py")
        runs = dict(enumerate(self._run(twin[start:]), start))
        errors = {i: (run.ename, run.evalue) for i, run in runs.items() if run.ename}
        checks = {i: names for i, source in enumerate(twin) if (names := REQUIRE.findall(source))}
        assert sorted(errors) == sorted(checks), (
            f"{self.twin.name}: errors in code cells {sorted(errors)}, checks in {sorted(checks)}: {errors}")
        for i, (ename, evalue) in errors.items():
            assert ename == "BlankAnswer", f"{self.twin.name}, code cell {i}: {ename}: {evalue}"
            assert f"`{checks[i][0]}` is still blank (...): " in evalue, f"{self.twin.name}, code cell {i}: {evalue}"
            # The hint is the one the cell passes to require_answer (its opening words, before any f-string field).
            hint = evalue.split("is still blank (...): ", 1)[1]
            assert hint and hint[:10] in twin[i], f"{self.twin.name}, code cell {i}: hint {hint!r}"


class WrongAnswer(_InLessonKernel):
    """The lesson with one answer wrong stops that answer's check with the message a learner should read."""

    def __init__(self, *, target: str, statement: str, ename: str, said: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.target, self.statement, self.ename, self.said = target, statement, ename, said

    def runtest(self) -> None:
        lesson = code_cells(make_students.nbformat.read(self.path, as_version=4))
        start = first_answer(lesson)
        check = next(i for i, source in enumerate(lesson) if self.target in REQUIRE.findall(source))
        cells = replace_answer(lesson, self.target, self.statement)[start:check + 1]
        run = self._run(cells)[-1]
        assert run.ename == self.ename, (run.ename, run.evalue)
        assert self.said in run.evalue
        assert "Correct" not in run.printed  # the answer is not given away
        for words in WRONG_ANSWER_PRINTS.get(self.target, ()):
            assert words in run.printed, run.printed


def add_student_items(items: list[pytest.Item]) -> None:
    """Insert each lesson's twin check (and its wrong-answer checks) before nbval runs its first answer cell."""
    starts = {}
    for path in make_students.lesson_notebooks():
        starts[path] = f"Cell {first_answer(code_cells(make_students.nbformat.read(path, as_version=4)))}"
    positions = [(i, item) for i, item in enumerate(items) if starts.get(item.path) == item.name]
    for position, item in reversed(positions):
        added = [TwinChecks.from_parent(item.parent, name="student twin: every check stops with its hint",
                                        twin=make_students.STUDENT_DIR / item.path.name)]
        wrong = [row for row in WRONG_ANSWERS if row[0] == item.path.stem]
        for k, (_, target, statement, ename, said) in enumerate(wrong, 1):
            added.append(WrongAnswer.from_parent(item.parent, name=f"wrong answer {k}: {target}", target=target,
                                                 statement=statement, ename=ename, said=said))
        items[position:position] = added
