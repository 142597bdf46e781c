"""Coursework round 5 (issue 48, item 5): notebook 07's hints lead without giving the answer; exercises 3 and 5 say
what their checks require.

Notebook 07's two exercises get collapsed hint sections like notebook 03's, and their check cells no longer print
the budgets to beat or the number of cases to multiply by. Exercise 5's task states the candidates' order its check
requires (chunk_id ascending); exercise 3's text no longer promises a dense win "shares no analysed term" while its
check counts a kept common word such as ``it``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
LESSON_07 = NOTEBOOKS / "07-traces-and-latency.ipynb"
EXERCISES = NOTEBOOKS / "exercises"


def _sources(path: Path) -> list[tuple[str, str]]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(c["cell_type"], "".join(c["source"])) for c in cells]


@pytest.mark.parametrize("path", [LESSON_07, NOTEBOOKS / "student" / LESSON_07.name], ids=["lesson", "student"])
def test_each_exercise_of_notebook_07_has_two_collapsed_hints_as_notebook_03s_do(path):
    exercises = [s for kind, s in _sources(path) if kind == "markdown" and s.startswith("**Exercise ")]
    assert len(exercises) == 2
    for text in exercises:
        assert "<details><summary>Hint 1</summary>" in text and "<details><summary>Hint 2</summary>" in text, text
        assert text.count("</details>") == 2


def test_notebook_07s_check_cells_name_no_budget_and_no_case_count():
    checks = [s for kind, s in _sources(LESSON_07) if kind == "code" and s.startswith("require_answer(")]
    assert len(checks) == 2
    hints = [line for s in checks for line in s.splitlines() if "Hint:" in line or line.strip().startswith('"')]
    said = "\n".join(hints)
    assert "Go above" not in said and "RETRIEVAL_BUDGET_MS['" not in said and "len(data.cases)" not in said, said
    assert "there are" not in said, said
    # Every wrong-answer hint points to the hints under the exercise.
    assert said.count("(More hints under the exercise.)") == 4, said


def _run_until(notebook, target: str, statement: str) -> str:
    """The lesson notebook with ``target``'s answer replaced by ``statement``, run to its check; what the check printed."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(notebook, as_version=4)
    answer = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and f"{target} = " in c.source
                  and "# ANSWER" in c.source)
    nb.cells[answer].source = statement
    check = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and f'require_answer("{target}"' in c.source)
    nb.cells = nb.cells[: check + 1]
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    return "".join(o.get("text", "") for o in nb.cells[check].get("outputs", []) if o.get("output_type") == "stream")


def test_wrong_answers_in_notebook_07_get_hints_that_keep_the_answer_back():
    printed = _run_until(LESSON_07, "my_timings",
                         'my_timings = {"authorize": 3.0, "bm25": 15.0, "dense": 25.0, "fusion": 5.0}')
    assert printed.startswith("Hint: only ['bm25'] exceeded. Which of bm25 and fusion is not over its budget yet?"), printed
    assert "Correct" not in printed and not re.search(r"\b(8|12)(\.0)? ms\b", printed), printed
    printed = _run_until(LESSON_07, "my_sample_count", "my_sample_count = 10")
    assert printed == ("Hint: count the timed requests only. How many rounds are timed, and how many requests does one "
                       "round make? (More hints under the exercise.)\n")


def test_exercise_5_states_the_candidate_order_its_check_requires():
    for name in ("05-compact-traces.ipynb", "05-compact-traces-solution.ipynb"):
        task = next(s for kind, s in _sources(EXERCISES / name) if kind == "markdown" and s.startswith("## Your turn"))
        assert "**sorted by `chunk_id`**" in task, task


def test_exercise_3s_text_counts_a_kept_common_word_as_its_check_does():
    from labsrc import tokens
    from labsrc.lanes import LESSON_STOPWORDS

    # The check's overlap is set(tokens(query)) & set(tokens(text)): 'it' is kept, so it is a shared term.
    assert "it" not in LESSON_STOPWORDS and "it" in tokens("can I swap it")
    for name in ("03-real-encoder.ipynb", "03-real-encoder-solution.ipynb"):
        text = "\n".join(s for kind, s in _sources(EXERCISES / name) if kind == "markdown")
        assert "shares no analysed term" not in text and "shares no term with its rule" not in text
        assert "common word such as `it` or `my` is an analysed term too" in text
        assert len(LESSON_STOPWORDS) == 9 and "drops only nine stopwords (`labsrc.lanes.LESSON_STOPWORDS`)" in text
