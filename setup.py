"""Build hook: the wheel carries a copy of the fixtures the commands read by default.

The fixtures live at ``fixtures/`` in the repository (tests, notebooks and
editable installs read them there). A wheel has no repository beside it, so
``build_py`` copies the folders :func:`labsrc.datasets.fixtures_dir` serves into
``labsrc/_fixtures/`` inside the built package; ``labsrc report``, ``labsrc search``
and ``labsrc rubric`` then work from any directory after ``pip install .`` or an
install from an index. Everything else is configured in ``pyproject.toml``.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

#: The fixture folders the package reads by default, and the recorded audit notebook 13 reads (coursework stays
#: in the repository).
PACKAGED_FIXTURES = ("lesson", "policies", "needles", "audit")


class BuildPyWithFixtures(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads fixtures/ in the repository itself
        source = Path(__file__).resolve().parent / "fixtures"
        target = Path(self.build_lib) / "labsrc" / "_fixtures"
        for name in PACKAGED_FIXTURES:
            shutil.copytree(source / name, target / name, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPyWithFixtures})
