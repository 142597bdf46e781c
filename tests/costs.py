"""What the test suite spends, module by module: ``LABSRC_TEST_COSTS=FILE pytest``.

A pytest plugin (tests/conftest.py loads it when the variable is set) that charges each
test module with its wall time (setup, call and teardown of its items), the CPU time its
items used (the worker's and that of every child it waited for: subprocesses, forked
builds, kernels; not a PostgreSQL server's, which is not the worker's child), and with what
its tests start: subprocesses (``subprocess.Popen``, the CLI and pytest runs), forks
(``os.fork``: the gate's workers, multiprocessing), embedded PostgreSQL servers
(``EmbeddedServer``) and Jupyter kernels (nbval and the student-twin runs). At the end
of the session it writes the table as Markdown to FILE, most expensive module first;
docs/development.md keeps the one measured last. Under pytest-xdist each worker counts
what it runs and leaves its rows in ``FILE.<worker>.json``; the controller adds them up
into FILE and removes them.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

KINDS = ("subprocesses", "forks", "servers", "kernels")

_lock = threading.Lock()
_current: list[Ledger] = []  # the ledger charging now (at most one)
_patched = False


class Ledger:
    """Seconds and starts per module; :meth:`charging` says which module pays for what starts now."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(KINDS, 0))
        self.module: str | None = None
        _install()

    @contextlib.contextmanager
    def charging(self, module: str) -> Iterator[None]:
        with _lock:
            _current.append(self)
        self.module = module
        self.counts[module]  # a module that starts nothing is listed too
        try:
            yield
        finally:
            self.module = None
            with _lock:
                _current.remove(self)

    def count(self, kind: str) -> None:
        if self.module is not None:
            self.counts[self.module][kind] += 1

    def add_time(self, module: str, seconds: float) -> None:
        self.seconds[module] += seconds

    def add_cpu(self, module: str, seconds: float) -> None:
        self.cpu[module] += seconds

    def rows(self) -> list[dict]:
        modules = set(self.seconds) | set(self.counts)
        rows = [{"module": m, "seconds": round(self.seconds.get(m, 0.0), 1), "cpu": round(self.cpu.get(m, 0.0), 1),
                 **self.counts[m]} for m in modules]
        return sorted(rows, key=lambda r: (-r["seconds"], r["module"]))

    def merge(self, rows: list[dict]) -> None:
        """Add another process's :meth:`rows` (an xdist worker's) to this ledger."""
        for row in rows:
            self.seconds[row["module"]] += row["seconds"]
            self.cpu[row["module"]] += row.get("cpu", 0.0)
            for kind in KINDS:
                self.counts[row["module"]][kind] += row[kind]

    def markdown(self) -> str:
        head = "| module | seconds | cpu seconds | " + " | ".join(KINDS) + " |"
        lines = [head, "|---|---:|---:|" + "---:|" * len(KINDS)]
        for row in self.rows():
            lines.append(f"| {row['module']} | {row['seconds']} | {row['cpu']} | "
                         + " | ".join(str(row[k]) for k in KINDS) + " |")
        total = {k: sum(r[k] for r in self.rows()) for k in KINDS}
        seconds, cpu = round(sum(self.seconds.values()), 1), round(sum(self.cpu.values()), 1)
        lines.append(f"| **all** | **{seconds}** | **{cpu}** | " + " | ".join(f"**{total[k]}**" for k in KINDS) + " |")
        return "\n".join(lines) + "\n"


def _cpu_seconds() -> float:
    """User and system CPU seconds of this process and of every child it has waited for."""
    mine, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime


def _charge(kind: str) -> None:
    with _lock:
        ledgers = list(_current)
    for ledger in ledgers:
        ledger.count(kind)


def _wrap(owner: object, name: str, kind: str) -> None:
    original = getattr(owner, name)

    def counted(*args, **kwargs):
        _charge(kind)
        return original(*args, **kwargs)

    counted.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(owner, name, counted)


def _install() -> None:
    """Count every start, once per process (the wrappers charge only while a ledger is charging)."""
    global _patched
    with _lock:
        if _patched:
            return
        _patched = True
    _wrap(subprocess.Popen, "__init__", "subprocesses")
    _wrap(os, "fork", "forks")
    with contextlib.suppress(ImportError):
        from labsrc.engines.server import EmbeddedServer

        _wrap(EmbeddedServer, "__init__", "servers")
    with contextlib.suppress(ImportError):
        from jupyter_client.manager import AsyncKernelManager, KernelManager

        _wrap(KernelManager, "start_kernel", "kernels")  # nbval
        _wrap(AsyncKernelManager, "start_kernel", "kernels")  # nbclient (the student twins)


class CostPlugin:
    """The pytest side: each item's phases are charged to its file."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.ledger = Ledger()

    @staticmethod
    def _module(item: pytest.Item) -> str:
        return item.path.relative_to(item.config.rootpath).as_posix()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        module = self._module(item)
        before = _cpu_seconds()
        try:
            with self.ledger.charging(module):
                return (yield)
        finally:
            self.ledger.add_cpu(module, _cpu_seconds() - before)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = report.nodeid.split("::", 1)[0]
        self.ledger.add_time(module, report.duration)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if worker := os.environ.get("PYTEST_XDIST_WORKER"):
            Path(f"{self.out}.{worker}.json").write_text(json.dumps(self.ledger.rows()), encoding="utf-8")
            return
        for part in sorted(self.out.parent.glob(f"{self.out.name}.gw*.json")):
            self.ledger.merge(json.loads(part.read_text(encoding="utf-8")))
            part.unlink()
        self.out.write_text(self.ledger.markdown(), encoding="utf-8")
