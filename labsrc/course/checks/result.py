"""A check's verdict: what passed, what to fix, and the exception that lists it.

Problems of one kind (the same mistake on many candidates, say) are printed
together, the first few of each kind with a count of the rest, so a learner
reads one line per mistake instead of a hundred lines of the same one.
"""

from __future__ import annotations

from dataclasses import dataclass

from labsrc.errors import LabError

__all__ = ["NOT_VERIFIED", "SHOWN_PER_KIND", "CheckFailed", "CheckResult"]

#: How many problems of one kind the printed verdict shows before "... and N more".
SHOWN_PER_KIND = 3
#: How a note of what a check could not verify here starts (shown with "--", never counted as a pass).
NOT_VERIFIED = "not verified here: "


class CheckFailed(LabError):
    """A coursework check found problems; the message lists every kind of them."""

    def __init__(self, result: CheckResult) -> None:
        self.result = result
        super().__init__(str(result))


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one check: ``passes`` (what holds) and ``problems`` (what to fix).

    ``kinds`` labels each problem with its kind (same length as ``problems``);
    a problem without a label is a kind of its own.
    """

    name: str
    passes: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "passes", tuple(self.passes))
        object.__setattr__(self, "problems", tuple(self.problems))
        kinds = tuple(self.kinds) + tuple(self.problems[len(self.kinds):])
        object.__setattr__(self, "kinds", kinds[: len(self.problems)])

    @property
    def passed(self) -> bool:
        return not self.problems

    def require(self) -> CheckResult:
        """Return ``self`` when every check holds; raise :class:`CheckFailed` otherwise."""
        if self.problems:
            raise CheckFailed(self)
        return self

    def grouped(self) -> dict[str, list[str]]:
        """Problems by kind, kinds in order of first appearance."""
        groups: dict[str, list[str]] = {}
        for kind, problem in zip(self.kinds, self.problems):
            groups.setdefault(kind, []).append(problem)
        return groups

    def __str__(self) -> str:
        if self.problems:
            lines = [f"{self.name}: {len(self.problems)} problem(s) to fix"]
            for kind, problems in self.grouped().items():
                if len(problems) == 1:
                    lines.append(f"  - {problems[0]}")
                    continue
                lines.append(f"  - {len(problems)} {kind}, for example:")
                lines += [f"      {p}" for p in problems[:SHOWN_PER_KIND]]
                if len(problems) > SHOWN_PER_KIND:
                    lines.append(f"      ... and {len(problems) - SHOWN_PER_KIND} more like these")
            return "\n".join(lines)
        # A note of what was not verified here (a package not installed) rides with the passes, but is no pass.
        notes = [p for p in self.passes if p.startswith(NOT_VERIFIED)]
        head = f"{self.name}: all {len(self.passes) - len(notes)} checks pass"
        return "\n".join([head, *(f"  -- {p}" if p.startswith(NOT_VERIFIED) else f"  ok {p}" for p in self.passes)])


class Collector:
    def __init__(self, name: str) -> None:
        self.name = name
        self.passes: list[str] = []
        self.problems: list[str] = []
        self.kinds: list[str] = []

    def problem(self, message: str, kind: str | None = None) -> None:
        """Record a problem; problems sharing a ``kind`` are printed together."""
        self.problems.append(message)
        self.kinds.append(kind or message)

    def check(self, condition: bool, ok: str, problem: str) -> bool:
        if condition:
            self.passes.append(ok)
        else:
            self.problem(problem)
        return condition

    def result(self) -> CheckResult:
        kinds = self.kinds + self.problems[len(self.kinds):]
        return CheckResult(self.name, tuple(self.passes), tuple(self.problems), tuple(kinds))
