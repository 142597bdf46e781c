"""The student twins of the lesson notebooks (written by notebooks/make_students.py) ship blank answers, so
their check cells stop by design: they are excluded from ``pytest --nbval``. The lesson notebooks in
notebooks/ are the solutions nbval validates; notebooks/student_checks.py runs each twin's "Check yourself"
cells in its lesson's kernel and asserts that each check stops with its hint.
"""

from pathlib import Path

collect_ignore = sorted(path.name for path in Path(__file__).parent.glob("*.ipynb"))
