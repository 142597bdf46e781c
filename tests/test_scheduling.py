"""tests/scheduling.py: the heaviest files start first, a notebook's cells stay together and in order."""

from __future__ import annotations

import pytest

pytest.importorskip("xdist")

import scheduling  # noqa: E402


def test_the_queue_puts_heavy_files_first_and_keeps_order_among_the_rest():
    queue = scheduling._HeavyFirst()
    for scope in ("tests/test_a.py", "notebooks/05-attacking-the-boundary.ipynb", "tests/test_b.py",
                  "tests/test_gate_properties.py::test_x", "tests/test_audit_lancedb.py"):
        queue[scope] = {}
    assert list(queue) == ["tests/test_audit_lancedb.py", "tests/test_gate_properties.py::test_x",
                           "notebooks/05-attacking-the-boundary.ipynb", "tests/test_a.py", "tests/test_b.py"]
    assert queue.popitem(last=False)[0] == "tests/test_audit_lancedb.py"


def test_scopes_are_files_except_the_per_test_files():
    sched = object.__new__(scheduling.SuiteScheduling)
    assert sched._split_scope("notebooks/05-attacking-the-boundary.ipynb::Cell 3") == (
        "notebooks/05-attacking-the-boundary.ipynb")
    assert sched._split_scope("tests/test_cli.py::test_x[a::b]") == "tests/test_cli.py"
    assert sched._split_scope("notebooks/05-attacking-the-boundary.ipynb::student twin: every check stops with its hint") == (
        "notebooks/05-attacking-the-boundary.ipynb")  # the twin's checks run in the lesson's kernel
    prop = "tests/test_gate_properties.py::test_the_gates_never_flag_the_labs_retriever"
    assert sched._split_scope(prop) == prop
    assert all(path in scheduling.HEAVY_FIRST for path in scheduling.PER_TEST)
