"""`import labsrc` and `labsrc --version` load nothing heavy; every exported name still resolves.

What a command costs to start is paid by every CLI call, every subprocess a test spawns and
every `import labsrc` in a notebook. The check is on the modules loaded, not on a time: a
time depends on the machine, the modules do not.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import labsrc

HEAVY = ("matplotlib", "pandas", "numpy", "psycopg", "scipy", "tqdm")


def _loaded_after(code: str) -> set[str]:
    """Top-level packages in sys.modules after running ``code`` in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_labsrc_loads_nothing_heavy():
    loaded = _loaded_after("import labsrc")
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_version_loads_no_command():
    code = "import sys\nfrom labsrc.cli.main import main\ntry:\n    main(['--version'])\nexcept SystemExit:\n    pass"
    loaded = _loaded_after(code)
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_one_command_does_not_import_the_others():
    probe = (
        "import sys\nfrom labsrc.cli.main import main\ntry:\n    main(['rubric', '--help'])\nexcept SystemExit:\n    pass\n"
        "print('\\n' + ' '.join(sorted(m for m in sys.modules if m.startswith('labsrc.cli.'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    commands = set(out.stdout.strip().splitlines()[-1].split())
    assert "labsrc.cli.rubric" in commands
    assert not commands & {"labsrc.cli.gate", "labsrc.cli.audit", "labsrc.cli.engines", "labsrc.cli.embed"}, commands


def test_a_chart_loads_matplotlib_only_when_drawn():
    loaded = _loaded_after("import labsrc.reports")
    assert "matplotlib" not in loaded


@pytest.mark.parametrize("name", labsrc.__all__)
def test_every_exported_name_resolves(name):
    value = getattr(labsrc, name)
    assert value is not None
    assert name in dir(labsrc)


def test_stages_resolve_as_attributes_and_unknown_names_do_not():
    assert labsrc.lanes.BM25Index is labsrc.BM25Index
    with pytest.raises(AttributeError, match="no attribute 'no_such_stage'"):
        labsrc.no_such_stage  # noqa: B018
    with pytest.raises(AttributeError):
        labsrc._private  # noqa: B018


def test_the_lazy_table_the_type_checking_imports_and_all_name_the_same_names():
    """Three lists must agree: ``_EXPORTS`` (what resolves at run time), the ``TYPE_CHECKING`` imports (what
    editors and type checkers see) and the literal ``__all__`` (what ``from labsrc import *`` and ruff read)."""
    import ast
    import inspect

    lazy = {name for names in labsrc._EXPORTS.values() for name in names}
    tree = ast.parse(inspect.getsource(labsrc))
    checked = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for statement in node.body
        if isinstance(statement, ast.ImportFrom)
        for alias in statement.names
    }
    assert len(labsrc.__all__) == len(set(labsrc.__all__))  # no name twice
    assert set(labsrc.__all__) == lazy, (sorted(set(labsrc.__all__) - lazy), sorted(lazy - set(labsrc.__all__)))
    assert checked == lazy, (sorted(checked - lazy), sorted(lazy - checked))
