"""The test tiers: which modules the one-minute smoke tier (``pytest -m smoke``) runs.

The smoke tier is the data path end to end in memory and the gate on plug-in
retrievers, which is what a team gating its own retriever relies on: no notebooks,
no PostgreSQL, no model, no audited library. ``tests/test_smoke_tier.py`` checks that
every module named here exists and that ``-m smoke`` selects exactly these (it runs
in the full suite only: its subprocess would cost the tier a sixth of its minute).
"""

from __future__ import annotations

import pytest

SMOKE_MODULES = frozenset({
    "test_records.py", "test_loading.py", "test_cases.py", "test_case_rules.py", "test_config.py",
    "test_boundary.py", "test_sparse.py", "test_dense.py", "test_permitted.py", "test_fusion.py",
    "test_retriever.py", "test_trace.py", "test_noninterference.py",
    "test_gates.py", "test_subject.py", "test_gate_plugins.py", "test_gate_pytest.py",
    "test_report.py", "test_cli_misuse.py", "test_readme.py", "test_docs_links.py",
})


def smoke_only(config: pytest.Config) -> bool:
    """Whether this run selects the smoke tier alone (``-m smoke``), so nothing else need be collected."""
    return (config.getoption("markexpr", "") or "").strip() == "smoke"
