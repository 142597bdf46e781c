"""The rubric's records: the four levels, a criterion's evidence, and a submission's grade."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from labsrc.errors import InvalidArgument
from labsrc.gate.gates import GateRun

__all__ = ["LEVELS", "Evidence", "Grade", "LevelVerdict", "parse_level"]

LEVELS = ("Foundational", "Applied", "Strong", "Production-ready")


def parse_level(name: str) -> str:
    """The canonical level name for ``name`` (case, spaces, ``_`` and ``-`` ignored)."""
    key = "".join(ch for ch in name.casefold() if ch.isalnum())
    for level in LEVELS:
        if "".join(ch for ch in level.casefold() if ch.isalnum()) == key:
            return level
    raise InvalidArgument(f"unknown rubric level {name!r}; valid levels are {list(LEVELS)}")


@dataclass(frozen=True)
class Evidence:
    """One criterion of a level: whether the submission meets it, and the facts that say so.

    A criterion with nothing to judge (no case failed, so there is no trace to
    check) is not ``applicable``: it never ticks, and it does not block its level.
    A criterion that *needs* evidence the submission lacks is simply not met.
    """

    criterion: str
    met: bool
    detail: str
    applicable: bool = True

    def __post_init__(self) -> None:
        if not self.applicable:
            object.__setattr__(self, "met", False)

    @property
    def mark(self) -> str:
        return "-" if not self.applicable else ("x" if self.met else " ")


@dataclass(frozen=True)
class LevelVerdict:
    level: str
    evidence: tuple[Evidence, ...]

    @property
    def met(self) -> bool:
        judged = [e for e in self.evidence if e.applicable]
        return bool(judged) and all(e.met for e in judged)


@dataclass(frozen=True)
class Grade:
    """The result of :func:`grade`: per-level evidence and the highest level reached."""

    submission: str
    inputs: tuple[str, ...]
    levels: tuple[LevelVerdict, ...]
    run: GateRun | None = field(default=None, compare=False, repr=False)
    #: A load error that stops grading (printed alone, without knock-on criteria).
    error: str | None = None

    @property
    def level(self) -> str | None:
        """The highest level reached (every level up to it met), or None: below Foundational."""
        reached = None
        for verdict in self.levels:
            if not verdict.met:
                break
            reached = verdict.level
        return reached

    def reaches(self, level: str) -> bool:
        level = parse_level(level)
        return self.level is not None and LEVELS.index(self.level) >= LEVELS.index(level)

    def to_dict(self) -> dict[str, Any]:
        return {
            "submission": self.submission,
            "level": self.level,
            "inputs": list(self.inputs),
            "error": self.error,
            "levels": [
                {
                    "level": v.level,
                    "met": v.met,
                    "evidence": [{"criterion": e.criterion, "met": e.met, "applicable": e.applicable, "detail": e.detail}
                                 for e in v.evidence],
                }
                for v in self.levels
            ],
        }

    def to_text(self) -> str:
        lines = [f"Rubric for {self.submission}", *(f"  {line}" for line in self.inputs), ""]
        if self.error is not None:
            lines += [f"Cannot grade: {self.error}", "Fix this first; nothing else is judged until the cases load.", ""]
            lines.append("Highest level reached: below Foundational")
            return "\n".join(lines)
        below = False
        for verdict in self.levels:
            status = "reached" if verdict.met and not below else ("met, but a lower level is not" if verdict.met else "not reached")
            below = below or not verdict.met
            lines.append(f"{verdict.level}: {status}")
            for e in verdict.evidence:
                lines.append(f"  [{e.mark}] {e.criterion}: {e.detail}")
            lines.append("")
        lines.append(f"Highest level reached: {self.level or 'below Foundational'}")
        return "\n".join(lines)
