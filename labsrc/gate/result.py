"""A gate run's result: every verdict, with the findings and measurements behind them (:class:`GateRun`).

:func:`~labsrc.gate.judge.judge` makes it; every report (:mod:`labsrc.reports`),
the pytest items (:mod:`labsrc.testing`) and the course's grader read it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from labsrc.evaluation.latency import LatencyReport
from labsrc.gate.config import GateConfig
from labsrc.gate.outcomes import CaseOutcome
from labsrc.gate.probes import Probes
from labsrc.gate.recall_curve import RecallCurve
from labsrc.gate.verdicts import GateResult

__all__ = ["GateRun"]


@dataclass(frozen=True)
class GateRun:
    """Everything one release-gate run produced: the input of every report.

    ``subject`` names what was judged (``"memory"``, ``"postgres"``, or a
    plug-in's ``module:factory``); ``noninterference`` is the comparison mode the
    rebuild and bait gates used, or ``None`` when they did not run; ``probes``
    holds what the canary, repeat and concurrency probes found (a factory's run only);
    ``omitted`` the lane gates not made, with the reason; ``recall_curve`` Recall@k at each k asked for.
    """

    config: GateConfig
    on_date: dt.date
    outcomes: tuple[CaseOutcome, ...]
    gates: tuple[GateResult, ...]
    recall: Mapping[str, float]
    versions: Mapping[str, str]
    dense_model: Mapping[str, Any]
    latency: LatencyReport | None = None
    subject: str = ""
    noninterference: str | None = None
    probes: Probes | None = None
    #: Lane gates the run did not make (a fused-list-only retriever), each with the reason: :mod:`~labsrc.gate.lane_rules`.
    omitted: tuple[tuple[str, str], ...] = ()
    #: Recall@k at every k the run was asked for (``recall_at``), or None: :mod:`~labsrc.gate.recall_curve`.
    recall_curve: RecallCurve | None = None
    #: The main build's error when it failed (the run then holds only 'build errors' and cleanup), else None.
    unbuilt: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "outcomes", tuple(self.outcomes))
        object.__setattr__(self, "gates", tuple(self.gates))
        object.__setattr__(self, "omitted", tuple((str(n), str(r)) for n, r in self.omitted))
        object.__setattr__(self, "recall", MappingProxyType(dict(self.recall)))
        object.__setattr__(self, "versions", MappingProxyType(dict(self.versions)))
        object.__setattr__(self, "dense_model", MappingProxyType(dict(self.dense_model)))

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)

    @property
    def failed_gates(self) -> tuple[GateResult, ...]:
        """Gates that fail the run (an untested gate only under ``require_cases``)."""
        return tuple(g for g in self.gates if not g.passed)

    @property
    def untested_gates(self) -> tuple[GateResult, ...]:
        """Gates with no cases to replay (status ``NOT TESTED``)."""
        return tuple(g for g in self.gates if not g.tested)

    @property
    def failed_outcomes(self) -> tuple[CaseOutcome, ...]:
        """Cases whose own check failed (see :attr:`CaseOutcome.passed`), in case order."""
        return tuple(o for o in self.outcomes if not o.passed)
