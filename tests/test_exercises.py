"""The exercise notebooks: each student version stops at its check with the helpful message, so
instructors know the checks bite. (The solutions are validated by ``pytest --nbval``; the student
versions are excluded from that by notebooks/exercises/conftest.py.)"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from labsrc.course import SUBMISSION_ENV

EXERCISES = Path(__file__).resolve().parent.parent / "notebooks" / "exercises"
STUDENT = sorted(p for p in EXERCISES.glob("*.ipynb") if not p.stem.endswith("-solution"))
_spec = importlib.util.spec_from_file_location("exercise_conftest", EXERCISES / "conftest.py")


def _seeded_submission(parent: Path) -> Path:
    """A learner's my-submission after exercises 1 and 2 and labsrc embed (notebooks/exercises/conftest.py)."""
    module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(module)
    return module.seeded_submission(parent)

#: Student notebook → phrases its failing check must say, as the learner reads them.
EXPECTED_FEEDBACK = {
    "01-positive-cases": [
        "step 1, positive cases",
        "case 'vip-refund', field 'expected', value 'merchant-vip-refurb': caller 'luna-48291' cannot see this chunk "
        "on 2026-05-27 (restricted)",
        "all 2 positive cases ask as luna-48291; the task asks for a second caller too",
        "only 2 positive case(s); the assignment asks for at least 8: add 6 more",
        "no paraphrase positive case",
    ],
    "02-adversarial-cases": ["no superseded case", "no wrong_region case", "no absent case"],
    "03-real-encoder": [
        "the dense lane still uses 'fixture-embeddings-v1', not a real bi-encoder",
        # One cause, one fix: the missing query vectors are named as what the lesson's vectors lack, not as a
        # second "run labsrc embed" problem.
        "that one change also brings what 'fixture-embeddings-v1' lacks: a MODEL.json record, all-MiniLM-L6-v2's "
        "384 dimensions (it has 3), a vector for each of your case queries (14 of 16 have none in it)",
        "report leaves ['model', 'dim', 'normalized', 'dense_wins', 'shared_terms', 'bm25_wins'] blank",
        "the lane questions (dense_wins, bm25_wins) are checked once the dense source above is right",
    ],
    "04-compare-lanes": [
        "no Recall@2 for ['bm25', 'dense']: report all three lanes",
        "no latency for stage(s) ['authorize', 'bm25', 'dense', 'fusion']",
    ],
    "05-compact-traces": [
        "trace for case 'us-exact-rtn30' contains chunk text (of ['us-restocking-fee'])",
        "trace for case 'eu-paraphrase-rpl14' lacks ['sparse_ids', 'dense_ids', 'fused_ids', 'candidates', 'versions', 'timings_ms']",
    ],
    "06-reranker-candidates": [
        "case 'eu-exact-clm7': candidates are not the fused list",
        "0-based ranks, for example:",
        "ranks are [0]; they must be 1, 2, ... in order (1-based)",
        "every candidate needs its rrf_score",
    ],
}


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source


def test_every_exercise_has_a_student_and_a_solution_version():
    assert [p.stem for p in STUDENT] == sorted(EXPECTED_FEEDBACK)
    for path in STUDENT:
        solution = path.with_name(f"{path.stem}-solution.ipynb")
        assert solution.is_file(), f"{path.name} has no solution notebook"
        student_code = [_source(c) for c in _cells(path) if c["cell_type"] == "code"]
        solution_code = [_source(c) for c in _cells(solution) if c["cell_type"] == "code"]
        assert any("# TODO" in s for s in student_code), f"{path.name} has no TODO cell"
        assert not any("# TODO" in s for s in solution_code), f"{solution.name} still has a TODO"
        # The check cell is the same in both versions: the solution passes exactly what the student must.
        checks = [s for s in student_code if "checks.check_" in s and ".require()" in s]
        assert len(checks) == 1 and checks[0] in solution_code


def test_student_versions_are_handed_out_without_outputs():
    for path in STUDENT:
        assert all(not c.get("outputs") for c in _cells(path) if c["cell_type"] == "code"), path.name


@pytest.mark.parametrize("path", STUDENT, ids=lambda p: p.stem)
def test_student_version_fails_its_check_helpfully(path, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    # The kernel inherits the environment: the exercises' my-submission is a temporary copy, never the repository's.
    monkeypatch.setenv(SUBMISSION_ENV, str(_seeded_submission(tmp_path)))
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(EXERCISES)}})
    with pytest.raises(nbclient.exceptions.CellExecutionError) as info:
        client.execute()
    error = info.value
    assert error.ename == "CheckFailed", f"{path.name} failed before its check: {error.ename}: {error.evalue}"
    for phrase in EXPECTED_FEEDBACK[path.stem]:
        assert phrase in error.evalue, f"{path.name}: the check did not say {phrase!r}; it said:\n{error.evalue}"
    # It is the check cell that stopped, not an earlier one.
    executed = [c for c in notebook.cells if c.cell_type == "code" and c.get("execution_count")]
    assert "checks.check_" in executed[-1].source


def test_every_exercise_uses_the_one_submission_folder_and_none_reads_the_model_answer():
    for path in sorted(EXERCISES.glob("*.ipynb")):
        code = "\n".join(_source(c) for c in _cells(path) if c["cell_type"] == "code")
        assert "SUBMISSION = my_submission()" in code, f"{path.name} does not define SUBMISSION = my_submission()"
        assert code.count("SUBMISSION =") == 1, f"{path.name} redefines SUBMISSION"
        assert "coursework" not in code, f"{path.name} reads fixtures/coursework (the model answer)"
        assert "mkdir()" not in code  # a second run must not fail with FileExistsError


def test_my_submission_is_the_repository_root_folder_and_can_be_created_twice(tmp_path, monkeypatch):
    from labsrc.course import my_submission
    from labsrc.datasets.lesson import fixtures_dir

    monkeypatch.delenv(SUBMISSION_ENV, raising=False)
    assert my_submission.__doc__ and "exist_ok" in my_submission.__doc__
    monkeypatch.setenv(SUBMISSION_ENV, str(tmp_path / "my-submission"))
    assert my_submission() == my_submission() == tmp_path / "my-submission"  # exist_ok: a second call is harmless
    assert (tmp_path / "my-submission").is_dir()
    # Without the override it is my-submission next to fixtures/, at the repository root.
    monkeypatch.delenv(SUBMISSION_ENV)
    root = fixtures_dir().resolve().parent
    monkeypatch.setattr("labsrc.course.submission.Path.mkdir", lambda self, **kwargs: None)
    assert my_submission() == root / "my-submission"


def test_a_missing_cases_file_says_which_exercises_to_run(tmp_path):
    from labsrc.course import read_my_cases
    from labsrc.errors import InvalidArgument

    with pytest.raises(InvalidArgument) as info:
        read_my_cases(tmp_path)
    assert "no cases.jsonl in" in str(info.value) and "run exercise 1 (positive cases) and exercise 2" in str(info.value)
