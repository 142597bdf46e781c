"""A gate's verdict: PASS, FAIL, or NOT TESTED when there was nothing to replay.

A gate that saw no cases has measured nothing, so it must not say PASS (no
evidence) nor FAIL (a CI system reads FAIL as a regression). It says
``NOT TESTED`` with the reason and what case to add; whether that fails the run
is the config's ``require_cases``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from labsrc.gate.config import GateConfig

__all__ = ["NOT_TESTED", "GateResult", "not_tested", "plural"]

#: The status of a gate with no cases to replay: neither PASS nor FAIL.
NOT_TESTED = "NOT TESTED"

#: What to add when a gate family has no cases (the NOT TESTED reason's advice).
_ADD_CASES: Mapping[str, str] = MappingProxyType(
    {
        "recall": "add a positive case with the chunk id the caller must get",
        "hybrid": "add a positive case with the chunk id the caller must get",
        "restricted": "add a restricted case whose query matches a chunk the caller's ACL tags exclude",
        "superseded": "add a superseded case whose query matches an older version of a current rule",
        "not_yet_effective": "add a not_yet_effective case whose query matches a rule that takes effect after the date",
        "wrong_region": "add a wrong_region case: a caller from another region asking a matching query",
        "abstention": "add an absent case: a question no permitted chunk answers",
    }
)


@dataclass(frozen=True, repr=False)
class GateResult:
    """One gate's verdict. ``family`` is a key of :data:`GATE_TABLE`.

    A gate with no cases to replay is ``tested=False``: its :attr:`status` is
    ``NOT TESTED`` and ``detail`` says why. ``passed`` is whether the gate lets
    the run pass; an untested gate does unless the config sets ``require_cases``.
    ``findings`` are one line per problem found (the case, the chunk, its rank
    and the reason), printed under a failed gate and carried into every report.
    """

    name: str
    passed: bool
    detail: str
    failing_cases: tuple[str, ...] = ()
    family: str = ""
    failing_stages: tuple[str, ...] = ()
    tested: bool = True
    findings: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        """``PASS``, ``FAIL`` or ``NOT TESTED``: read this, not ``passed``, to know what the gate measured."""
        if not self.tested:
            return NOT_TESTED
        return "PASS" if self.passed else "FAIL"

    def __repr__(self) -> str:
        # The status first: ``passed=True`` alone would read as PASS for a gate that measured nothing.
        effect = "" if self.tested else f", fails the run: {not self.passed}"
        return f"GateResult({self.status} {self.name!r}: {self.detail!r}{effect})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "family": self.family,
            "status": self.status,
            "passed": self.passed,
            "detail": self.detail,
            "failing_cases": list(self.failing_cases),
            "failing_stages": list(self.failing_stages),
            "findings": list(self.findings),
        }


def plural(count: int, noun: str) -> str:
    """``1 case``, ``2 cases``: a count with its noun in the right number."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def not_tested(name: str, family: str, what: str, config: GateConfig, *, reason: str | None = None) -> GateResult:
    """A gate with nothing to replay: NOT TESTED, with the reason and what to add (or ``reason`` as given)."""
    detail = reason if reason is not None else f"no {what} to replay; {_ADD_CASES[family]}"
    return GateResult(name, not config.require_cases, detail, family=family, tested=False)
