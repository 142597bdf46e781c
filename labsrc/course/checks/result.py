"""A check's verdict: what passed, what to fix, and the exception that lists it."""

from __future__ import annotations

from dataclasses import dataclass

from labsrc.errors import LabError

__all__ = ["CheckFailed", "CheckResult"]

class CheckFailed(LabError):
    """A coursework check found problems; the message lists every one of them."""

    def __init__(self, result: CheckResult) -> None:
        self.result = result
        super().__init__(str(result))


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one check: ``passes`` (what holds) and ``problems`` (what to fix)."""

    name: str
    passes: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "passes", tuple(self.passes))
        object.__setattr__(self, "problems", tuple(self.problems))

    @property
    def passed(self) -> bool:
        return not self.problems

    def require(self) -> CheckResult:
        """Return ``self`` when every check holds; raise :class:`CheckFailed` otherwise."""
        if self.problems:
            raise CheckFailed(self)
        return self

    def __str__(self) -> str:
        if self.problems:
            head = f"{self.name}: {len(self.problems)} problem(s) to fix"
            return "\n".join([head, *(f"  - {p}" for p in self.problems)])
        head = f"{self.name}: all {len(self.passes)} checks pass"
        return "\n".join([head, *(f"  ok {p}" for p in self.passes)])


class Collector:
    def __init__(self, name: str) -> None:
        self.name = name
        self.passes: list[str] = []
        self.problems: list[str] = []

    def check(self, condition: bool, ok: str, problem: str) -> bool:
        (self.passes if condition else self.problems).append(ok if condition else problem)
        return condition

    def result(self) -> CheckResult:
        return CheckResult(self.name, tuple(self.passes), tuple(self.problems))
