"""A coursework submission folder: where each input comes from, its own file or the course's default."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from labsrc.datasets.course_links import CourseLink, course_link
from labsrc.datasets.lesson import fixtures_dir
from labsrc.errors import InvalidArgument, InvalidRecord
from labsrc.lanes.broken_vectors import shell_path
from labsrc.records.cases import Case, case_format_problems, load_cases
from labsrc.records.files import atomic_write_bytes, fsync_dir, write_durable, writing

__all__ = [
    "MODEL_FOLDER",
    "SUBMISSION_ENV",
    "SUBMISSION_NAME",
    "Submission",
    "find_submission",
    "my_submission",
    "read_my_cases",
    "save_my_cases",
    "save_my_records",
    "shell_path",
]

#: The learner's submission folder, at the repository root, where the commands in docs/coursework.md look.
SUBMISSION_NAME = "my-submission"
#: Set to a folder to move the submission elsewhere (the exercise tests point it at a temporary copy).
SUBMISSION_ENV = "LABSRC_SUBMISSION"

#: The vector folder ``labsrc embed`` writes for the course model, inside a submission's ``vectors/``.
MODEL_FOLDER = "all-MiniLM-L6-v2"


@dataclass(frozen=True)
class Submission:
    """Where each input of a submission comes from (the submission's own file or the course default)."""

    root: Path
    cases: Path
    callers: Path
    chunks: Path
    config: Path
    vectors: Path | None
    report: Path | None
    course: Path

    @property
    def vectors_out(self) -> Path:
        """Where ``labsrc embed`` writes this submission's vectors (the folder it has, or the course's layout)."""
        return self.vectors if self.vectors is not None else self.root / "vectors" / MODEL_FOLDER

    def course_links(self) -> list[CourseLink]:
        """The symbolic links on the paths the printed commands write to that lead into the course's files.

        ``vectors -> ../fixtures/policies/vectors`` makes the course's vectors this
        submission's; ``labsrc embed --out`` and ``labsrc gate --out`` refuse to write
        through such a link (:func:`~labsrc.datasets.course_links.course_link`).
        """
        found = (course_link(path) for path in (self.vectors_out, self.root / "report"))
        unique = {str(link.link): link for link in found if link is not None and link.link is not None}
        return [unique[key] for key in sorted(unique)]

    def replaceable(self, link: CourseLink) -> bool:
        """Whether ``link`` lies inside the submission folder, so removing it leaves a place for the learner's own.

        A link above it (the submission folder itself linked into the course) cannot be replaced so.
        """
        return link.link is not None and Path(os.path.abspath(self.root)) in Path(os.path.abspath(link.link)).parents

    def _replace_link(self, path: Path) -> str:
        """``rm LINK && `` when ``path`` leads through a replaceable link into the course, else ``""``.

        Removing the link (never what it points to) lets the command make a folder of the learner's own in its place.
        """
        found = course_link(path)
        return f"rm {shell_path(found.link)} && " if found is not None and self.replaceable(found) else ""

    def embed_command(self) -> str:
        """The ``labsrc embed`` command for this submission, runnable as printed from the current directory.

        When its ``--out`` leads through a link into the course, the command removes the link first.
        """
        return (f"{self._replace_link(self.vectors_out)}labsrc embed --chunks {shell_path(self.chunks)} "
                f"--queries {shell_path(self.cases)} --out {shell_path(self.vectors_out)}")

    def gate_command(self) -> str:
        """The ``labsrc gate`` command that writes this submission's ``report/``, runnable as printed.

        It reads the vectors :meth:`embed_command` writes; a ``report`` linked into the course is removed first.
        """
        report = self.root / "report"
        return (f"{self._replace_link(report)}labsrc gate --chunks {shell_path(self.chunks)} "
                f"--callers {shell_path(self.callers)} --cases {shell_path(self.cases)} "
                f"--vectors {shell_path(self.vectors_out)} --config {shell_path(self.course / 'gate.json')} "
                f"--out {shell_path(report)}")

    def describe(self, path: Path | None) -> str:
        if path is None:
            return "none"
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            pass
        try:  # relative to the repository, so the text reads the same on every machine
            return f"course default ({path.resolve().relative_to(fixtures_dir().resolve().parent)})"
        except ValueError:
            return f"course default ({path})"


def my_submission() -> Path:
    """The learner's submission folder, ``my-submission`` at the repository root, created if missing.

    Every exercise defines ``SUBMISSION = my_submission()``, so all six read and
    write one folder, the one ``labsrc embed``, ``labsrc gate`` and ``labsrc rubric``
    are pointed at in docs/coursework.md; running a cell again is harmless (``exist_ok``).
    ``$LABSRC_SUBMISSION`` moves it (the exercise tests use a temporary copy).
    """
    override = os.environ.get(SUBMISSION_ENV)
    path = Path(override) if override else fixtures_dir().resolve().parent / SUBMISSION_NAME
    path.mkdir(parents=True, exist_ok=True)
    return path


def read_my_cases(
    submission: Path, *, chunk_ids: Collection[str] | None = None, caller_ids: Collection[str] | None = None
) -> list[Case]:
    """The learner's own ``cases.jsonl`` from ``submission`` (exercises 1 and 2 save it); a missing file says which to run."""
    path = Path(submission) / "cases.jsonl"
    if not path.is_file():
        raise InvalidArgument(
            f"no cases.jsonl in {path.parent.name}/ yet: run exercise 1 (positive cases) and exercise 2 "
            "(adversarial cases) to the end; their last cells save your cases there"
        )
    return load_cases(path, chunk_ids=chunk_ids, caller_ids=caller_ids)


#: The two parts of a submission's cases.jsonl: exercise 1 writes the positive cases, exercise 2 the others.
_PARTS = MappingProxyType({
    "positive": lambda case: case.kind == "positive",
    "adversarial": lambda case: case.kind != "positive",
})


def save_my_cases(
    submission: Path,
    cases: Sequence[Case],
    check: Callable[[Sequence[Case]], Any],
    *,
    part: str,
    chunk_ids: Collection[str] | None = None,
    caller_ids: Collection[str] | None = None,
) -> list[Case]:
    """Check ``cases``, then save them as ``part`` of ``submission/cases.jsonl``; returns the file's cases, read back.

    ``check(cases)`` runs first (the exercise's own check, for example
    ``lambda cs: checks.check_positive_cases(cs, chunks, callers, EVAL_DATE)``); the
    :class:`~labsrc.course.checks.result.CheckFailed` its ``require()`` raises propagates, so a
    file is never written with cases the exercise refuses. ``part`` (``"positive"`` for
    exercise 1, ``"adversarial"`` for exercise 2) says which saved cases these replace;
    the saved cases of the other part are kept (unless one of ``cases`` has their name).
    Saving the adversarial part needs exercise 1's file (:func:`read_my_cases` says so).

    The merged file is validated as :func:`~labsrc.records.cases.load_cases` would
    (``chunk_ids`` / ``caller_ids`` as there), written beside, read back, and only
    then renamed over the old one (:func:`os.replace`): a failure at any step leaves
    the previous file as it was and no temporary file behind.
    """
    if part not in _PARTS:
        raise InvalidArgument(f"part {part!r} is not a part of cases.jsonl; parts are {list(_PARTS)}")
    path = Path(submission) / "cases.jsonl"
    ids = {"chunk_ids": chunk_ids, "caller_ids": caller_ids}
    result = check(cases)
    if not callable(getattr(result, "require", None)):
        raise InvalidArgument(f"check must return a CheckResult (a checks.check_... call), got {type(result).__name__}")
    result.require()
    if part == "adversarial" or path.is_file():
        saved = read_my_cases(submission, **ids)
    else:
        saved = []
    mine = {c.name for c in cases}
    kept = [c for c in saved if not _PARTS[part](c) and c.name not in mine]
    merged = [*kept, *cases] if part == "adversarial" else [*cases, *kept]
    earlier: dict[str, str] = {}
    for number, case in enumerate(merged, start=1):
        problems = case_format_problems(case, earlier=earlier, **ids)
        if problems:
            field, message = problems[0]
            raise InvalidRecord(f"case {case.name!r}: {message}; nothing was saved", path=path, line=number, field=field)
        earlier[case.name] = f"line {number}"
    data = "".join(json.dumps(c.to_dict(), ensure_ascii=False) + "\n" for c in merged).encode("utf-8")
    beside = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with writing(beside):
            write_durable(beside, lambda handle: handle.write(data))
        written = load_cases(beside, **ids)  # what the next exercise will read, before it replaces anything
        if written != merged:
            raise InvalidRecord("the cases read back differ from the cases written; nothing was saved", path=path)
        with writing(path):
            os.replace(beside, path)
    finally:
        beside.unlink(missing_ok=True)
    fsync_dir(path.parent)
    return written


def save_my_records(
    submission: Path, name: str, records: Sequence[Any], check: Callable[[Sequence[Any]], Any]
) -> Path:
    """Check ``records``, then save them to ``submission/name`` as JSONL, one object per line; returns the path.

    Exercises 5 and 6 save their traces and candidates this way
    (``labsrc.course.replays.EXERCISE_ARTIFACTS`` names the files). ``check(records)``
    runs first, and the :class:`~labsrc.course.checks.result.CheckFailed` its
    ``require()`` raises propagates, so nothing the exercise refuses is written; a
    record JSON cannot hold (NaN, an object) is refused too. The file is replaced
    atomically (:func:`~labsrc.records.files.atomic_write_bytes`): a failure leaves
    the previous one as it was.
    """
    result = check(records)
    if not callable(getattr(result, "require", None)):
        raise InvalidArgument(f"check must return a CheckResult (a checks.check_... call), got {type(result).__name__}")
    result.require()
    lines = []
    for number, record in enumerate(records, start=1):
        try:
            lines.append(json.dumps(record, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n")
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"record #{number} cannot be written as JSON ({exc}); nothing was saved") from None
    return atomic_write_bytes(Path(submission) / name, "".join(lines).encode("utf-8"))


def _vector_dir(root: Path) -> Path | None:
    base = root / "vectors"
    if not base.is_dir():
        return None
    if (base / "MODEL.json").is_file():
        return base
    found = sorted(p for p in base.iterdir() if (p / "MODEL.json").is_file())
    if len(found) != 1:
        raise InvalidArgument(
            f"{base}: expected MODEL.json there or in exactly one subfolder, found {[p.name for p in found]}"
        )
    return found[0]


def find_submission(path: str | Path, course: str | Path | None = None) -> Submission:
    """Resolve a submission folder's inputs, falling back to the course's files (``fixtures/policies``)."""
    root = Path(path)
    if not root.is_dir():
        raise InvalidArgument(f"submission folder {root} does not exist")
    course_dir = Path(course) if course is not None else fixtures_dir() / "policies"

    def pick(name: str) -> Path:
        own = root / name
        return own if own.is_file() else course_dir / name

    report = root / "report"
    return Submission(
        root=root,
        cases=root / "cases.jsonl",
        callers=pick("callers.json"),
        chunks=pick("chunks.jsonl"),
        config=pick("gate.json"),
        vectors=_vector_dir(root),
        report=report if report.is_dir() else None,
        course=course_dir,
    )
