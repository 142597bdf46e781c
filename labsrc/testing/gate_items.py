"""One pytest item per gate: which gates a config will produce, and each gate's verdict as an item outcome.

Nothing here imports pytest; :mod:`labsrc.testing.pytest_gate` turns the
outcomes into ``pytest.fail`` and ``pytest.skip``. The rule is the one the
command line's exit status and its JUnit XML follow (:mod:`labsrc.reports.junit`):

========================================  ==========
the gate in ``labsrc gate``               the item
========================================  ==========
PASS                                      passed
FAIL                                      failed (the detail and every finding)
NOT TESTED that fails the run             failed (a gate that could not be measured never passes)
NOT TESTED that does not fail the run     skipped, with the reason and what case to add
not run, by the config (``"off"``, 0)     skipped, naming the setting
not made: a lane the retriever does not   skipped, with the reason (:mod:`~labsrc.gate.lane_rules`)
report (a fused-list-only retriever)
expected but absent from the run          failed (it was not measured, so it cannot pass)
========================================  ==========
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from labsrc.gate.config import GateConfig
from labsrc.gate.gate_rules import gate_names
from labsrc.gate.probe_rules import BUILD_ERRORS
from labsrc.gate.gates import GateRun

__all__ = [
    "ALL_GATES",
    "BUILD_ERRORS",
    "FAILED",
    "PASSED",
    "SEARCH_ERRORS",
    "SKIPPED",
    "ItemOutcome",
    "expected_gates",
    "gate_id",
    "gate_outcome",
]

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"

#: The last item: the whole run, passing exactly when ``labsrc gate`` exits 0.
ALL_GATES = "all gates"

#: Present in a run only when a search raised; its item passes when none did.
SEARCH_ERRORS = "search errors"

#: :data:`BUILD_ERRORS` (``"build errors"``) is present in a run only when a build after the main one failed;
#: its item passes when none did.

@dataclass(frozen=True)
class ItemOutcome:
    """What one item does: ``outcome`` is :data:`PASSED`, :data:`FAILED` or :data:`SKIPPED`; ``message`` says why."""

    outcome: str
    message: str = ""


def gate_id(name: str) -> str:
    """The item id of a gate: lower case, each run of other characters one ``-``.

    ``"recall@2 bm25"`` → ``recall-2-bm25``; ``"boundary on every returned id"`` →
    ``boundary-on-every-returned-id``; ``"hybrid >= each lane"`` → ``hybrid-each-lane``
    (ids that ``pytest -k`` can name, since it reads no spaces, ``@`` or ``>``).
    """
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def expected_gates(config: GateConfig) -> tuple[tuple[str, str | None], ...]:
    """Every gate a factory's run under ``config`` reports, in the printed table's order, then :data:`ALL_GATES`.

    Each comes with ``None``, or the reason the config turns it off (the item is then skipped).
    The list is the gate rules' own (:func:`~labsrc.gate.gate_rules.gate_names`): a new gate needs no
    edit here. :data:`SEARCH_ERRORS` and :data:`BUILD_ERRORS` are always listed: the run holds them only when
    a search raised or a build failed.
    """
    return (*gate_names(config), (ALL_GATES, None))


def _failing(gate_detail: str, failing_cases: tuple[str, ...], failing_stages: tuple[str, ...]) -> str:
    failing = failing_cases or failing_stages
    label = "cases" if failing_cases else "stages"
    return gate_detail + (f"; failing {label}: {', '.join(failing)}" if failing else "")


def _whole_run(run: GateRun) -> ItemOutcome:
    if run.passed:
        return ItemOutcome(PASSED, "all tested gates pass" if run.untested_gates else "all gates pass")
    lines = [f"the release gate fails on {len(run.failed_gates)} gate(s) (labsrc gate would exit 1):"]
    for gate in run.failed_gates:
        lines.append(f"  {gate.status} {gate.name!r}: {_failing(gate.detail, gate.failing_cases, gate.failing_stages)}")
    return ItemOutcome(FAILED, "\n".join(lines))


def gate_outcome(run: GateRun, name: str, skipped_by_config: str | None = None) -> ItemOutcome:
    """The item outcome of the gate called ``name`` in ``run`` (see the module's table)."""
    if name == ALL_GATES:
        return _whole_run(run)
    by_name = {g.name: g for g in run.gates}
    gate = by_name.get(name)
    if gate is None:
        if skipped_by_config is not None:
            return ItemOutcome(SKIPPED, f"{name}: not run, {skipped_by_config}")
        omitted = dict(run.omitted)
        if name in omitted:
            return ItemOutcome(SKIPPED, f"{name}: not made, {omitted[name]}")
        if run.unbuilt is not None:  # the main build failed: no case was asked, so nothing else can pass
            return ItemOutcome(FAILED, f"NOT TESTED {name}: the main build failed, so no case was asked "
                                       "(see 'build errors'); it cannot pass")
        if name == SEARCH_ERRORS:
            return ItemOutcome(PASSED, f"every search of the {len(run.outcomes)} cases answered")
        if name == BUILD_ERRORS:
            return ItemOutcome(PASSED, "every build the run made was built")
        why = " (no case answered, see 'search errors')" if name.startswith("latency") else ""
        return ItemOutcome(FAILED, f"NOT TESTED {name}: the run did not evaluate this gate{why}, so it cannot pass")
    if gate.tested and gate.passed:
        return ItemOutcome(PASSED, gate.detail)
    if not gate.tested:
        if gate.passed:
            return ItemOutcome(SKIPPED, f"NOT TESTED {name}: {gate.detail}")
        effect = ("require_cases is set in the gate config, so the run fails" if run.config.require_cases
                  else "a gate that could not be measured never passes, so the run fails")
        return ItemOutcome(FAILED, f"NOT TESTED {name}: {gate.detail}; {effect}")
    lines = [f"FAIL {name}: {_failing(gate.detail, gate.failing_cases, gate.failing_stages)}"]
    lines += [f"  {finding}" for finding in gate.findings]
    return ItemOutcome(FAILED, "\n".join(lines))
