"""Exercise notebooks come in pairs: ``NN-name.ipynb`` (the student version, with TODO cells) and
``NN-name-solution.ipynb``. Only the solutions are validated by ``pytest --nbval``: a student version stops
at its check cell by design. tests/test_exercises.py runs the student versions and asserts that each check
fails with its helpful message.

The exercises read and write the learner's ``my-submission`` folder (``labsrc.course.my_submission``). Under
pytest it is a temporary copy, so validating the solutions never touches a learner's own folder: it starts as
a learner's would after exercises 1 and 2 and ``labsrc embed`` (the model answer's cases and vectors), which
exercises 1 and 2 then rewrite with the same cases, and exercise 3 reads.
"""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from labsrc.course import SUBMISSION_ENV, SUBMISSION_NAME

collect_ignore = sorted(
    path.name for path in Path(__file__).parent.glob("*.ipynb") if not path.stem.endswith("-solution")
)

MODEL_ANSWER = Path(__file__).resolve().parents[2] / "fixtures" / "coursework" / "solution"


def seeded_submission(parent: Path) -> Path:
    """``parent/my-submission`` holding the model answer's ``cases.jsonl`` and ``vectors/``, as a learner's would."""
    folder = parent / SUBMISSION_NAME
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(MODEL_ANSWER / "cases.jsonl", folder / "cases.jsonl")
    shutil.copytree(MODEL_ANSWER / "vectors", folder / "vectors", dirs_exist_ok=True)
    return folder


#: Lines a solution prints differently where the 'embed' extra is installed (exercise 3's package check).
SANITIZE = Path(__file__).with_name("nbval-sanitize.cfg")


def pytest_configure(config) -> None:
    # Exercise 3's check says whether MODEL.json's packaged_by is the installed encoder package, or that it
    # could not check: the same solution validates with and without the 'embed' extra (unless told otherwise).
    if getattr(config.option, "nbval_sanitize_with", "absent") is None:
        config.option.nbval_sanitize_with = str(SANITIZE)
    # Set before any notebook kernel starts, so every kernel inherits it (and only when pytest loads this file).
    scratch = Path(tempfile.mkdtemp(prefix="labsrc-exercises-"))
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    os.environ[SUBMISSION_ENV] = str(seeded_submission(scratch))
