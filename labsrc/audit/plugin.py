"""``MODULE:FACTORY``: find a user's retriever factory, the way uvicorn finds ``module:app``.

``MODULE`` is either an importable module name (the current directory is
importable, as with ``python -m``) or a path to a ``.py`` file; ``FACTORY`` is
an attribute of it, dotted for a nested one (``mymodule:Builder.create``). An
import that fails raises :class:`~labsrc.evaluation.subject.SubjectError` with
the user's own error and file:line, never a traceback through the lab.

The gate never imports a team's module in its own process: code at module level
(a helper process started, a line printed, a global patched) would run outside
every clock and every capture. :func:`worker_factory` checks the spec without
importing anything and returns a :class:`SpecFactory`, which imports the module
when it is called, inside each build's worker process.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from labsrc.evaluation.subject import Factory, SubjectError, describe_exception

__all__ = ["CLI_OPTION", "SpecFactory", "load_factory", "parse_spec", "worker_factory"]


#: How the command line names the spec in its messages; the pytest form passes its own name.
CLI_OPTION = "--retriever"


def parse_spec(spec: str, *, option: str = CLI_OPTION) -> tuple[str, str]:
    """``"pkg.mod:make"`` → ``("pkg.mod", "make")``; a Windows drive letter is not a separator."""
    if not isinstance(spec, str) or ":" not in spec.lstrip(":"):
        raise SubjectError(f"{option} must be MODULE:FACTORY (e.g. my_retriever:build or ./my_retriever.py:build), not {spec!r}")
    module, _, attribute = spec.rpartition(":")
    if not module or not attribute or not all(part.isidentifier() for part in attribute.split(".")):
        raise SubjectError(f"{option} must be MODULE:FACTORY with FACTORY a Python name, not {spec!r}")
    return module, attribute


def _import_path(path: Path, option: str) -> ModuleType:
    if not path.is_file():
        raise SubjectError(f"{option}: no such file {str(path)!r}")
    name = f"labsrc_plugin_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SubjectError(f"{option}: {str(path)!r} is not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look their module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(name, None)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise SubjectError(f"{option}: importing {str(path)!r} failed: {describe_exception(exc)}") from exc
    return module


def _holds_module(folder: Path, top: str) -> bool:
    return (folder / f"{top}.py").is_file() or (folder / top).is_dir()


def _import_name(name: str, option: str, folders: tuple[Path, ...]) -> ModuleType:
    if not folders and "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, "")  # the current directory is importable, as with `python -m`
    top = name.partition(".")[0]
    if folders and importlib.util.find_spec(top) is None:
        # Not importable as the tests import code: the first of ``folders`` that holds it becomes importable,
        # as pytest's rootdir does with ``pythonpath = ["."]``.
        holder = next((folder for folder in folders if _holds_module(folder, top)), None)
        if holder is not None and str(holder) not in sys.path:
            sys.path.insert(0, str(holder))
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            if folders:
                where = ", ".join(str(folder) for folder in folders)
                hint = (f"looked on sys.path and in {where}: put {exc.name.partition('.')[0]}.py in one of them, "
                        "or name the file, relative to the test file (path/to/file.py:FACTORY)")
            else:
                hint = "run from the folder that holds it, or give a path to the .py file"
            raise SubjectError(f"{option}: no module named {exc.name!r} ({hint})") from exc
        raise SubjectError(f"{option}: importing {name!r} failed: {describe_exception(exc)}") from exc
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise SubjectError(f"{option}: importing {name!r} failed: {describe_exception(exc)}") from exc


def load_factory(spec: str, *, option: str = CLI_OPTION, folders: tuple[Path, ...] = ()) -> Factory:
    """The callable ``spec`` names; see the module docstring for the two forms of ``MODULE``.

    ``option`` is how messages name the spec (the command line's ``--retriever``). With
    ``folders`` (the pytest form: the test file's folder and its parents up to the
    project's root), a module name that is not importable is looked for there and its
    folder put on ``sys.path``; without, the current directory is importable.
    """
    module_part, attribute = parse_spec(spec, option=option)
    looks_like_path = module_part.endswith(".py") or "/" in module_part or "\\" in module_part
    module = _import_path(Path(module_part), option) if looks_like_path else _import_name(module_part, option, folders)
    target: object = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            where = getattr(module, "__file__", module_part)
            available = sorted(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n)))
            raise SubjectError(f"{option}: {where} has no {attribute!r}; callables there: {available[:12]}")
        target = getattr(target, part)
    if not callable(target):
        raise SubjectError(f"{option}: {spec!r} is a {type(target).__name__}, not a callable factory(chunks, vectors)")
    return target  # type: ignore[return-value]


def _is_path(module_part: str) -> bool:
    return module_part.endswith(".py") or "/" in module_part or "\\" in module_part


def _check_without_import(spec: str, option: str, folders: tuple[Path, ...]) -> None:
    """What can be told of ``spec`` without running any of its code: the file exists, the top module is findable."""
    module_part, _ = parse_spec(spec, option=option)
    if _is_path(module_part):
        if not Path(module_part).is_file():
            raise SubjectError(f"{option}: no such file {module_part!r}")
        return
    top = module_part.partition(".")[0]
    places = [Path.cwd(), *folders, *(Path(p) for p in sys.path if p)]
    if top in sys.modules or any(_holds_module(place, top) for place in places):
        return
    try:  # a namespace package, a zip, an installed module sys.path's folders do not show directly
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        hint = (f"looked on sys.path and in {', '.join(str(f) for f in folders)}" if folders
                else "run from the folder that holds it, or give a path to the .py file")
        raise SubjectError(f"{option}: no module named {top!r} ({hint})")


class SpecFactory:
    """``MODULE:FACTORY``, imported only when called: in the gate's worker processes, never in the gate's own.

    Calling it imports the module (once per process) and calls the factory it names; an import
    that fails raises the :class:`~labsrc.evaluation.subject.SubjectError` :func:`load_factory`
    raises, which the worker hands back as it is (``labsrc gate`` exits 2 with that one line).
    """

    def __init__(self, spec: str, *, option: str = CLI_OPTION, folders: tuple[Path, ...] = ()) -> None:
        _check_without_import(spec, option, folders)
        self.spec, self.option = spec, option
        self.folders = tuple(Path(f).resolve() for f in folders)
        self.cwd = Path.cwd()
        module_part, _, attribute = spec.rpartition(":")
        # How messages and reports name it (subject_name), as factory_name names a loaded factory: a file by its name.
        self.labsrc_display_name = f"{Path(module_part).name}:{attribute}" if _is_path(module_part) else spec

    def load(self) -> Factory:
        """The factory itself: imports the module in *this* process."""
        module_part, _, attribute = self.spec.rpartition(":")
        if _is_path(module_part) and not Path(module_part).is_absolute():
            module_part = str(self.cwd / module_part)  # relative to where the gate was started
        return load_factory(f"{module_part}:{attribute}", option=self.option, folders=self.folders)

    def __call__(self, chunks: tuple[Any, ...], vectors: Any) -> Any:
        return self.load()(chunks, vectors)

    def __repr__(self) -> str:
        return f"SpecFactory({self.spec!r})"


def worker_factory(spec: str, *, option: str = CLI_OPTION, folders: tuple[Path, ...] = ()) -> Factory:
    """A :class:`SpecFactory` for ``spec``, checked as far as it can be without importing it."""
    return SpecFactory(spec, option=option, folders=folders)
