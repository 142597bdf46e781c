"""How pytest-xdist shares the suite between its workers (``pytest_xdist_make_scheduler`` in tests/conftest.py).

xdist's ``--dist loadfile`` keeps each file on one worker: a notebook's cells must run in
order in one kernel, and a module's fixtures (a server, a gate run) are made once. Two
things make that slow here, and this scheduler changes only them:

* a few files hold minutes of independent work (the gate's properties, each a hundred
  gate runs); their tests are scheduled one by one (:data:`PER_TEST`);
* files are handed out in collection order, so the heaviest could start last and leave
  one worker running alone at the end; :data:`HEAVY_FIRST` (the costliest files in
  the measured table of docs/development.md) go first, in that order.

Everything else is ``loadfile``. Outside xdist nothing here runs.
"""

from __future__ import annotations

from collections import OrderedDict

from xdist.scheduler import LoadScopeScheduling

#: Files whose tests share no costly fixture: each test is a unit of its own.
PER_TEST = frozenset({"tests/test_gate_properties.py"})

#: The costliest files, started first (measured: tests/costs.py, docs/development.md).
HEAVY_FIRST = (
    "tests/test_gate_field.py",
    "tests/test_gate_advice.py",
    "tests/test_audit_lancedb.py",
    "tests/test_gate_properties.py",
    "tests/test_audit.py",
    "tests/test_rubric_round5.py",
    "tests/test_policy_fixtures.py",
    "tests/test_gate_generated.py",
    "notebooks/12-into-a-real-database.ipynb",
    "tests/test_engine_postgres_properties.py",
    "tests/test_engine_cleanup.py",
    "tests/test_cli_engines.py",
    "notebooks/13-auditing-a-retriever.ipynb",
    "tests/test_init.py",
    "tests/test_rubric.py",
    "tests/test_engine_concurrency.py",
    "notebooks/05-attacking-the-boundary.ipynb",
)


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def priority(scope: str) -> int:
    """Where a work unit goes in the queue: the heavy files' order, then everything else (stable)."""
    path = file_of(scope)
    return HEAVY_FIRST.index(path) if path in HEAVY_FIRST else len(HEAVY_FIRST)


class _HeavyFirst(OrderedDict):
    """A work queue that keeps its units sorted by :func:`priority`, insertion order among equals."""

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        for unit in sorted(self, key=priority):
            self.move_to_end(unit)


class SuiteScheduling(LoadScopeScheduling):
    """``loadfile``, with :data:`PER_TEST` files split into their tests and :data:`HEAVY_FIRST` first."""

    def __init__(self, config, log=None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False  # the order is this queue's, not "most tests first"
        self.workqueue = _HeavyFirst()

    def _split_scope(self, nodeid: str) -> str:
        path = file_of(nodeid)
        return nodeid if path in PER_TEST else path
