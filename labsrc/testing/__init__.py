"""Testing: the release gate as pytest items, so a team gates its retriever in its own test suite.

:func:`gate_tests` returns a test function with one item per gate (ids from
:func:`gate_id`), whose verdicts are those of ``labsrc gate`` on the same files
(both run :func:`labsrc.audit.gate_from_files`). pytest is imported only when
:func:`gate_tests` is called, so ``labsrc`` needs it only in a test suite.
See ``docs/gate-in-pytest.md``. :func:`write_starter` writes the starter folder
``labsrc init`` makes: a corpus, a retriever of a team's own and the gate in both forms.
"""

from labsrc.testing.gate_items import (
    ALL_GATES,
    BUILD_ERRORS,
    expected_gates,
    FAILED,
    gate_id,
    gate_outcome,
    ItemOutcome,
    PASSED,
    SEARCH_ERRORS,
    SKIPPED,
)
from labsrc.testing.pytest_gate import GateSuite, gate_tests
from labsrc.testing.starter import STARTER_FILES, STARTER_GATE_COMMAND, starter_files, starter_page, write_starter

__all__ = [
    "ALL_GATES",
    "BUILD_ERRORS",
    "expected_gates",
    "FAILED",
    "gate_id",
    "gate_outcome",
    "gate_tests",
    "GateSuite",
    "ItemOutcome",
    "PASSED",
    "SEARCH_ERRORS",
    "SKIPPED",
    "STARTER_FILES",
    "STARTER_GATE_COMMAND",
    "starter_files",
    "starter_page",
    "write_starter",
]
