"""The package's shape: the layers contract holds, nothing imports in a circle, modules stay small."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

import labsrc

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "labsrc"
MAX_MODULE_LINES = 400
MAX_TOP_LEVEL_NAMES = 60


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"]
    env = {"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"}
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env, check=False)


def test_layers_contract_is_kept():
    proc = lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 kept, 0 broken" in proc.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    # A copy of the package in which the sparse lane imports the CLI (a lane may not see the top floor).
    shutil.copytree(PACKAGE, tmp_path / "labsrc", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    sparse = tmp_path / "labsrc" / "lanes" / "sparse.py"
    sparse.write_text(sparse.read_text() + "\n\ndef _upward():\n    from labsrc.cli import main\n\n    return main\n")
    proc = lint_imports(tmp_path)
    assert proc.returncode == 1
    assert "labsrc.lanes.sparse -> labsrc.cli" in proc.stdout


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph.find_modules_directly_imported_by(module)):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycles_even_inside_functions():
    # grimp reads every import statement, including those inside functions.
    graph = grimp.build_graph("labsrc")
    assert _cycles(graph) == []


def test_a_cycle_would_be_found():
    graph = grimp.ImportGraph()
    for module in ("a", "b", "c"):
        graph.add_module(module)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="a")
    graph.add_import(importer="b", imported="c")
    assert _cycles(graph) == [["a", "b"]]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_is_small(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)} has {lines} lines; split it along its seams"


def test_top_level_api_is_curated():
    assert len(labsrc.__all__) <= MAX_TOP_LEVEL_NAMES
    assert len(set(labsrc.__all__)) == len(labsrc.__all__)
    for name in labsrc.__all__:
        assert hasattr(labsrc, name), name


@pytest.mark.parametrize(
    "package",
    ["records", "lanes", "fusion", "retriever", "datasets", "evaluation", "audit", "patterns", "course", "testing"],
)
def test_subpackage_reexports_its_modules(package):
    module = __import__(f"labsrc.{package}", fromlist=["__all__"])
    assert module.__doc__ and "\n" in module.__doc__.strip()
    exported = set(module.__all__)
    for path in sorted((PACKAGE / package).glob("*.py")):
        if path.name == "__init__.py":
            continue
        child = __import__(f"labsrc.{package}.{path.stem}", fromlist=["__all__"])
        missing = sorted(set(getattr(child, "__all__", ())) - exported)
        assert missing == [], f"labsrc.{package} does not re-export {missing} from {path.name}"
