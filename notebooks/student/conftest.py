"""The student twins of the lesson notebooks (written by notebooks/make_students.py) ship blank answers, so
their check cells stop by design: they are excluded from ``pytest --nbval``. The lesson notebooks in
notebooks/ are the solutions nbval validates; tests/test_student_notebooks.py runs these twins and asserts
that each check stops with its hint.
"""

from pathlib import Path

collect_ignore = sorted(path.name for path in Path(__file__).parent.glob("*.ipynb"))
