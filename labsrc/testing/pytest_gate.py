"""The release gate inside a team's own pytest suite: one test item per gate, the same verdicts as ``labsrc gate``.

Write this in your test folder (``tests/test_release_gate.py``)::

    from labsrc.testing import gate_tests

    test_release_gate = gate_tests(
        chunks="data/chunks.jsonl",
        callers="data/callers.json",
        cases="data/cases.jsonl",
        retriever="my_retriever:build",  # MODULE:FACTORY, a path.py:FACTORY, or the factory itself
        vectors=None,                    # a fixture .json or a vectors/<model>/ folder
        config="data/gate.json",         # or None for the defaults, or a GateConfig
    )

``pytest`` then collects ``test_release_gate[recall-2-hybrid]``,
``test_release_gate[boundary-on-every-returned-id]`` and so on, one item per gate
(ids: :func:`~labsrc.testing.gate_items.gate_id`), then
``test_release_gate[all-gates]``, which passes exactly when ``labsrc gate`` would
exit 0. ``pytest -k boundary`` runs one gate; ``pytest --junitxml`` reports them.

* Relative paths, and a ``path.py:FACTORY`` retriever, are read from the folder
  of the test file that calls :func:`gate_tests` (``base=`` changes it), so the
  suite gives the same result from any working directory. A ``module:FACTORY``
  retriever is imported as your tests import your code; if that fails, it is
  looked for in the test file's folder, then each parent up to the project's
  root (the first holding ``pyproject.toml``, ``pytest.ini``, ``tox.ini``,
  ``setup.cfg`` or ``.git``), and the folder that holds it is put on ``sys.path``.
* The gate runs once, when the first selected item runs, inside the pytest
  process (each build in a forked worker, as in ``labsrc gate``); the other
  items read the cached run. Under pytest-xdist each worker runs it once.
* The config is read at collection, since the gate names depend on it (``top_k``
  is in the recall gates' names). Every other input is read when the gate runs.
* Bad input (a malformed file, a case that cannot test its kind, a factory that
  cannot be imported or built) fails every item with the message ``labsrc gate``
  prints for it, naming the file, line, field and value, with no traceback, in
  pytest's words: ``release gate input: gate_tests retriever: ...`` where the
  command line says ``labsrc gate: error: --retriever: ...``.

How each gate's verdict becomes an item outcome: :mod:`labsrc.testing.gate_items`.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from labsrc.audit.gate_files import as_gate_config, gate_from_files
from labsrc.audit.plugin import worker_factory
from labsrc.errors import LabError
from labsrc.evaluation.subject import Factory
from labsrc.gate.config import GateConfig
from labsrc.gate.gates import GateRun
from labsrc.testing.gate_items import FAILED, SKIPPED, expected_gates, gate_id, gate_outcome

__all__ = ["GateSuite", "gate_tests"]

_INPUT_ERRORS = (LabError, OSError, UnicodeError)

#: How messages name the ``retriever`` argument (the command line says ``--retriever``).
OPTION = "gate_tests retriever"

#: What starts every bad-input message (the command line's ``labsrc gate: error:``).
INPUT_PREFIX = "release gate input: "

#: Files that mark a project's root, where the search for a ``module:FACTORY`` module stops.
ROOT_MARKERS = ("pyproject.toml", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", ".git")


def _message(exc: BaseException) -> str:
    """One message for bad input, what ``labsrc gate`` prints for it (exit status 2), in pytest's words."""
    if isinstance(exc, OSError) and not isinstance(exc, LabError):
        where = f": {exc.filename}" if exc.filename else ""
        return f"{INPUT_PREFIX}{exc.strerror or exc}{where}"
    return f"{INPUT_PREFIX}{exc}"


def module_folders(start: Path) -> tuple[Path, ...]:
    """``start`` and its parents up to the first that marks a project's root (:data:`ROOT_MARKERS`), inclusive."""
    folders = []
    for folder in (start, *start.parents):
        folders.append(folder)
        if any((folder / marker).exists() for marker in ROOT_MARKERS):
            break
    return tuple(folders)


def _resolve(path: str | Path | None, base: Path) -> str | None:
    if path is None or path == "":
        return None
    path = Path(path)
    return str(path if path.is_absolute() else base / path)


def _resolve_spec(retriever: str | Factory, base: Path) -> str | Factory:
    """A ``path.py:FACTORY`` spec read from ``base``; a module name or a callable as given."""
    if not isinstance(retriever, str) or ":" not in retriever:
        return retriever
    module, _, attribute = retriever.rpartition(":")
    if module.endswith(".py") or "/" in module or "\\" in module:
        return f"{_resolve(module, base)}:{attribute}"
    return retriever


class GateSuite:
    """The inputs of one :func:`gate_tests` call, and its gate run, made once and kept."""

    def __init__(self, chunks: str, callers: str, cases: str, retriever: str | Factory,
                 vectors: str | None, config: GateConfig, *,
                 load: Callable[[str], Factory] = partial(worker_factory, option=OPTION),
                 recall_at: Sequence[int] = ()) -> None:
        self.chunks, self.callers, self.cases, self.load = chunks, callers, cases, load
        self.recall_at = tuple(recall_at)
        self.retriever, self.vectors, self.config = retriever, vectors, config
        self._run: GateRun | None = None
        self._error: BaseException | None = None

    def run(self) -> GateRun:
        """The gate run (made at the first call); bad input raises the same error at each call."""
        if self._error is not None:
            raise self._error
        if self._run is None:
            try:
                self._run = gate_from_files(
                    self.chunks, self.callers, self.cases, self.retriever, vectors=self.vectors, config=self.config,
                    warn=lambda note: warnings.warn(f"labsrc gate: {note}", UserWarning, stacklevel=2), load=self.load,
                    recall_at=self.recall_at,
                )
            except Exception as exc:  # kept, so the other items do not run a failing gate again
                self._error = exc
                raise
        return self._run


def _caller_folder(depth: int) -> Path:
    caller = sys._getframe(depth).f_globals.get("__file__")
    return Path(caller).resolve().parent if caller else Path.cwd()


def gate_tests(
    chunks: str | Path,
    callers: str | Path,
    cases: str | Path,
    retriever: str | Factory,
    *,
    vectors: str | Path | None = None,
    config: str | Path | GateConfig | None = None,
    base: str | Path | None = None,
    recall_at: Sequence[int] = (),
) -> Callable[..., None]:
    """A pytest test function with one item per gate; assign it to a ``test_*`` name in a test module.

    ``retriever`` is ``MODULE:FACTORY``, ``path/to/file.py:FACTORY`` or a factory
    ``factory(chunks, vectors)`` (:mod:`~labsrc.evaluation.subject`). Relative
    paths are read from ``base``, by default the folder of the calling test file.
    The returned function's ``gate_run()`` gives the :class:`~labsrc.gate.gates.GateRun`
    (say, to write a report from a fixture: ``labsrc.reports.write_report(test_release_gate.gate_run(), "reports/gate")``).
    ``recall_at`` (e.g. ``(1, 2, 5, 10)``) measures each lane's Recall@k at those k too: the run's
    ``recall_curve``, drawn in that report (``recall_curve.png``).
    """
    import pytest  # a test tool, not a runtime dependency: only a test suite calling this needs it

    folder = Path(base).resolve() if base is not None else _caller_folder(2)
    problem: str | None = None
    try:
        gate_config = as_gate_config(config if isinstance(config, GateConfig) else _resolve(config, folder))
    except _INPUT_ERRORS as exc:
        gate_config, problem = GateConfig(), _message(exc)
    suite = GateSuite(_resolve(chunks, folder) or "", _resolve(callers, folder) or "", _resolve(cases, folder) or "",
                      _resolve_spec(retriever, folder), _resolve(vectors, folder), gate_config,
                      load=partial(worker_factory, option=OPTION, folders=module_folders(folder)), recall_at=recall_at)
    gates = expected_gates(gate_config)
    reasons = dict(gates)

    @pytest.mark.parametrize("gate", [name for name, _ in gates], ids=[gate_id(name) for name, _ in gates])
    def test_gate(gate: str) -> None:
        if problem is not None:
            pytest.fail(problem, pytrace=False)
        try:
            run = suite.run()
        except _INPUT_ERRORS as exc:
            pytest.fail(_message(exc), pytrace=False)
        item = gate_outcome(run, gate, reasons[gate])
        if item.outcome == FAILED:
            pytest.fail(item.message, pytrace=False)
        if item.outcome == SKIPPED:
            pytest.skip(item.message)

    test_gate.__doc__ = "One gate of the labsrc release gate (labsrc.testing.gate_tests)."
    test_gate.gate_run = suite.run  # type: ignore[attr-defined]
    return test_gate
