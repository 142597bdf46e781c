from __future__ import annotations

import os
from pathlib import Path

import pytest

import labsrc

from tiers import SMOKE_MODULES, smoke_only


def pytest_configure(config: pytest.Config) -> None:
    # LABSRC_TEST_COSTS=FILE pytest -n 0: seconds, subprocesses, forks, servers and kernels per module (tests/costs.py).
    if out := os.environ.get("LABSRC_TEST_COSTS"):
        from costs import CostPlugin

        config.pluginmanager.register(CostPlugin(Path(out).resolve()), "labsrc-test-costs")


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
