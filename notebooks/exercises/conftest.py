"""Exercise notebooks come in pairs: ``NN-name.ipynb`` (the student version, with TODO cells) and
``NN-name-solution.ipynb``. Only the solutions are validated by ``pytest --nbval``: a student version stops
at its check cell by design. tests/test_exercises.py runs the student versions and asserts that each check
fails with its helpful message.
"""

from pathlib import Path

collect_ignore = sorted(
    path.name for path in Path(__file__).parent.glob("*.ipynb") if not path.stem.endswith("-solution")
)
