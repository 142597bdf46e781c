"""The lesson's offline fixtures, loaded from ``fixtures/lesson/`` in the repository.

``lesson()`` is the one place notebooks and tests get the lesson's records from.
Set ``LABSRC_FIXTURES`` to point at another copy of the ``fixtures`` folder. A
wheel install has no repository: its build copies the fixtures into the package
(``labsrc/_fixtures``, see ``setup.py``), and that copy is used instead.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from labsrc.errors import LabError
from labsrc.lanes.dense import FixtureVectors, load_vectors
from labsrc.records.cases import Case, load_cases
from labsrc.records.loading import load_callers, load_chunks
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["EVAL_DATE", "Lesson", "fixtures_dir", "lesson"]

#: The lesson's fixed evaluation date, so replays are stable.
EVAL_DATE = dt.date(2026, 5, 27)


def fixtures_dir() -> Path:
    """The ``fixtures`` folder: ``$LABSRC_FIXTURES``, else the wheel's packaged copy, else the repository's own."""
    override = os.environ.get("LABSRC_FIXTURES")
    package = Path(__file__).resolve().parents[1]
    if override:
        path = Path(override)
    elif (package / "_fixtures" / "lesson").is_dir():  # a wheel install (setup.py copies them in)
        path = package / "_fixtures"
    else:  # the repository: an editable install, or the source tree on sys.path
        path = package.parent / "fixtures"
    if not (path / "lesson").is_dir():
        raise LabError(
            f"lesson fixtures not found at {path / 'lesson'}; reinstall the lab (pip install .) "
            "or set LABSRC_FIXTURES to a copy of the repository's fixtures folder"
        )
    return path


@dataclass(frozen=True)
class Lesson:
    chunks: tuple[PolicyChunk, ...]
    callers: tuple[Caller, ...]
    vectors: FixtureVectors
    cases: tuple[Case, ...]
    eval_date: dt.date

    def caller(self, actor_id: str) -> Caller:
        for caller in self.callers:
            if caller.actor_id == actor_id:
                return caller
        raise LabError(f"no caller {actor_id!r}; callers are {[c.actor_id for c in self.callers]}")

    @property
    def luna(self) -> Caller:
        return self.caller("luna-48291")

    @property
    def no_access(self) -> Caller:
        return self.caller("visitor-9000")

    @property
    def callers_by_id(self) -> dict[str, Caller]:
        return {c.actor_id: c for c in self.callers}


@lru_cache(maxsize=4)
def _load(path: Path) -> Lesson:
    chunks = tuple(load_chunks(path / "chunks.jsonl"))
    callers = tuple(load_callers(path / "callers.json"))
    cases = load_cases(
        path / "cases.jsonl",
        chunk_ids={c.chunk_id for c in chunks},
        caller_ids={c.actor_id for c in callers},
    )
    return Lesson(chunks, callers, load_vectors(path / "vectors.json"), tuple(cases), EVAL_DATE)


def lesson() -> Lesson:
    """The lesson's five chunks (spec order), two callers, 3-d vectors, cases and date."""
    return _load(fixtures_dir() / "lesson")
