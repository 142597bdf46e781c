"""What a gate run got: every answer filed under its request's key, and what kept the others from being asked.

:func:`~labsrc.gate.run.run_plan` fills an :class:`Answers` in as it goes;
:func:`~labsrc.gate.judge.judge` reads it with the plan. It holds answers, never findings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from labsrc.evaluation.latency import LatencyReport
from labsrc.evaluation.subject import Observation

__all__ = ["Answers"]


@dataclass
class Answers:
    """What a run got, filled in as it goes: the input of the judge.

    ``made`` names every build tried, in order; ``got`` maps each asked request's key to its answer (a request not asked has none);
    ``failed`` maps a build (or a build's phase, ``"main: concurrency at once"``) to why it
    gave no answers; ``skipped`` a build not made to the rule that kept it; ``withheld``
    a build to ``(case position, chunk id)`` it left out. ``info``, ``versions`` and
    ``restarts`` are the main build's; ``leftovers`` (``None`` without ``/proc``) and
    ``output`` what every build left running and printed; ``containment`` what held their processes.
    """

    made: list[str] = field(default_factory=list)
    got: dict[str, Observation] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    withheld: dict[str, tuple[int, str]] = field(default_factory=dict)
    latency: LatencyReport | None = None
    info: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    restarts: int = 0
    leftovers: tuple[str, ...] | None = ()
    output: tuple[tuple[str, str], ...] = ()
    containment: str | None = None

    @property
    def builds(self) -> int:
        """Builds tried (each in its own worker process), failed ones included."""
        return len(self.made)
