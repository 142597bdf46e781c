"""A coursework submission folder: where each input comes from, its own file or the course's default."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from labsrc.datasets.lesson import fixtures_dir
from labsrc.errors import InvalidArgument

__all__ = ["Submission", "find_submission"]


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
