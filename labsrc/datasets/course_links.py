"""A path that reaches the course's own files through a symbolic link, so that writing there would change the course.

A learner's submission may hold a link into the course (``vectors -> ../fixtures/policies/vectors``,
made to try the rubric with the course's vectors). Every command that writes
(``labsrc embed --out``, ``labsrc gate --out``) would then write *through* the
link into ``fixtures/``, and the next grading would read the damaged course.
:func:`course_link` finds such a link before anything is written: the first
component of the path that is a symbolic link whose target lies in the course's
fixtures (:func:`~labsrc.datasets.lesson.fixtures_dir`) or in the installed
``labsrc`` package. A path straight into ``fixtures/`` with no link on the way
is an instructor re-embedding the course (``fixtures/policies/README.md``), and
is not one; a path into the installed package is always one (nothing of a
user's belongs there).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from labsrc.datasets.lesson import fixtures_dir
from labsrc.errors import LabError

__all__ = ["CourseLink", "course_link", "course_roots"]


@dataclass(frozen=True)
class CourseLink:
    """``link`` (as given, not resolved) leads into ``target``, inside the course root ``root``.

    ``link`` is None when the path itself lies inside the installed package, with no link on the way.
    """

    path: Path
    link: Path | None
    target: Path
    root: Path

    def describe(self) -> str:
        """``'sub/vectors is a symbolic link to /repo/fixtures/policies/vectors, the course's own files'``."""
        if self.link is None:
            return f"{self.path} is inside the installed labsrc package ({self.root})"
        return f"{self.link} is a symbolic link to {self.target}, the course's own files"


def course_roots() -> tuple[Path, ...]:
    """The folders nothing may write into through a link: the course's fixtures and the installed package, resolved."""
    package = Path(__file__).resolve().parents[1]
    try:
        fixtures = fixtures_dir().resolve()
    except LabError:  # no fixtures anywhere: only the package is left to protect
        return (package,)
    return (fixtures, package) if fixtures != package and package not in fixtures.parents else (package,)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def course_link(path: str | Path) -> CourseLink | None:
    """The first symbolic link on ``path`` whose target is in the course (see the module docstring), or None.

    Every prefix of the absolute path is looked at, existing or not, so a link
    above a folder that is still to be made is found too. A link whose target
    holds the whole course (a checkout reached through ``~/lab -> /data/lab``)
    is not one: only a target inside a course root is.
    """
    given = Path(path)
    absolute = Path(os.path.abspath(given))
    roots = course_roots()
    prefix = Path(absolute.anchor)
    for part in absolute.parts[1:]:
        prefix = prefix / part
        if not prefix.is_symlink():
            continue
        target = prefix.resolve()
        for root in roots:
            if _inside(target, root):
                shown = prefix if given.is_absolute() else Path(os.path.relpath(prefix))
                return CourseLink(given, shown, target, root)
    package = roots[-1]
    if _inside(absolute.resolve(), package):
        return CourseLink(given, None, absolute.resolve(), package)
    return None
