from __future__ import annotations

import compileall
import contextlib
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

import labsrc

from tiers import SMOKE_MODULES, smoke_only


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER") and sys.dont_write_bytecode:
        # PYTHONDONTWRITEBYTECODE (set on this machine and its CI) would make every process the suite starts
        # (hundreds of CLI calls, every notebook's kernel) compile labsrc from source again: 0.35 s of a 2 s
        # `labsrc gate` on the lesson. Compile it once, where Python itself would put it (labsrc/__pycache__,
        # ignored by git); the processes still write nothing, they only read it.
        compileall.compile_dir(Path(labsrc.__file__).parent, quiet=1, rx=re.compile(r"[/\\]starter[/\\]"))
    # Under pytest-xdist each worker gets a temporary folder of its own (for itself and every process it starts),
    # so a test that checks it left no labsrc-* folder behind does not see another worker's live ones.
    if worker := os.environ.get("PYTEST_XDIST_WORKER"):
        # And a process group of its own: a test that signals "the gate's group" (a factory that stops it,
        # tests/test_gate_containment.py) must reach this worker, not the other workers and the controller.
        with contextlib.suppress(OSError):  # already a group's leader
            os.setpgid(0, 0)
        own = tempfile.mkdtemp(prefix=f"labsrc-tests-{worker}-")
        os.environ["TMPDIR"] = tempfile.tempdir = own
        config.add_cleanup(lambda: shutil.rmtree(own, ignore_errors=True))
    # LABSRC_TEST_COSTS=FILE pytest: seconds, subprocesses, forks, servers and kernels per module (tests/costs.py).
    if out := os.environ.get("LABSRC_TEST_COSTS"):
        from costs import CostPlugin

        config.pluginmanager.register(CostPlugin(Path(out).resolve()), "labsrc-test-costs")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers more than the cores. Much of the suite waits on processes it started (a kernel,
    a server, a gate's forked builds), so on this 2-core machine 3 workers ran it in 10 min 45 s against
    12 min 53 s for 2 (docs/development.md)."""
    return (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1) + 2


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``loadfile``, with the heaviest files first and the gate's properties one test at a time (tests/scheduling.py)."""
    if config.getvalue("dist") != "loadfile":  # another --dist given on the command line is left to xdist
        return None
    from scheduling import SuiteScheduling

    return SuiteScheduling(config, log)


def pytest_ignore_collect(collection_path, config: pytest.Config) -> bool | None:
    # The smoke tier does not even import the other modules: collecting every one costs a minute.
    if smoke_only(config) and collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        return collection_path.name not in SMOKE_MODULES
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in SMOKE_MODULES and item.path.parent.name == "tests":
            item.add_marker(pytest.mark.smoke)


@pytest.fixture(scope="session")
def data() -> labsrc.Lesson:
    return labsrc.lesson()


@pytest.fixture(scope="session")
def permitted(data: labsrc.Lesson) -> list[labsrc.PolicyChunk]:
    return labsrc.permitted_chunks(data.luna, data.chunks, data.eval_date)


@pytest.fixture(scope="session")
def server():
    """One embedded PostgreSQL server for every engine test that can share it (one per xdist worker).

    Each test module loads its own store (a schema and a reader role of its own) into it. Modules
    that stop, kill or clean the server define a module-scoped ``server`` of their own, saying why.
    """
    from pg_support import start_server

    yield from start_server()


@pytest.fixture(scope="module")
def monkeypatch_module():
    """A monkeypatch that hypothesis tests can use (function-scoped fixtures are reset per example)."""
    with pytest.MonkeyPatch.context() as patch:
        yield patch
