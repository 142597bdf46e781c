"""``labsrc init DIR``: the starter folder passes every gate, as ``labsrc gate`` and as pytest, and its gate can fail.

``labsrc init`` and the leaky gate run in this process (the process boundary is
not what they test); the README's gate command and pytest run in subprocesses,
from the folders a team runs them from.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from labsrc.cli import init as init_command
from labsrc.cli.main import main
from labsrc.gate.config import load_gate_config
from labsrc.testing import expected_gates
from labsrc.testing.starter import (
    _SOURCE,
    _STORED_AS,
    STARTER_FILES,
    STARTER_GATE_COMMAND,
    starter_files,
    starter_page,
    write_starter,
)
from test_docs_links import broken_links, links

ROOT = Path(__file__).resolve().parents[1]

#: One line per gate in ``labsrc gate``'s table: its verdict, two spaces, the gate's name.
GATE_LINE = re.compile(r"^(PASS|FAIL|NOT TESTED)  (\S.*?)  ")

#: The one line of my_retriever.py that keeps a caller out of chunks whose ACL tag they lack.
ACL_FILTER = "        and chunk.acl_tag in caller.acl_tags\n"


def init(folder: Path) -> None:
    assert main(["init", str(folder)]) == 0


@pytest.fixture
def activated(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shell in this environment's activated venv: ``python`` and ``labsrc`` on PATH are this environment's."""
    here = os.path.dirname(sys.executable)
    monkeypatch.setattr(init_command.shutil, "which", lambda name: sys.executable if name == "python" else os.path.join(here, name))


@pytest.fixture(scope="module")
def starter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("init") / "my-gate"
    init(folder)
    return folder


def verdicts(out: str) -> dict[str, str]:
    """Each gate's verdict in ``labsrc gate``'s table, by gate name."""
    return {m.group(2): m.group(1) for m in map(GATE_LINE.match, out.splitlines()) if m}


def written(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def environment(**extra: str) -> dict[str, str]:
    """This process's environment without PYTHONPATH: the starter's own settings must make my_retriever importable."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(extra)
    return env


def test_the_package_holds_exactly_the_starter_files_and_the_docs_show_its_test_file():
    stored = {p.relative_to(_SOURCE).as_posix() for p in _SOURCE.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert stored == {_STORED_AS.get(name, name) for name in STARTER_FILES}
    # The pages are links to the lab's docs/, not second copies to keep in step; the starter's are derived from them.
    pages = [name for name in STARTER_FILES if name.startswith("docs/")]
    assert pages == ["docs/gating.md", "docs/gate-in-pytest.md", "docs/records.md", "docs/gates.md"]
    for name in pages:
        assert (_SOURCE / name).is_symlink() and (_SOURCE / name).resolve() == ROOT / name
        assert starter_files()[name] == starter_page(name, (ROOT / name).read_text(encoding="utf-8")).encode("utf-8")
    page = (ROOT / "docs" / "gate-in-pytest.md").read_text(encoding="utf-8")
    assert starter_files()["tests/test_release_gate.py"].decode("utf-8") in page


def test_init_writes_the_same_bytes_every_time_and_prints_the_next_two_commands(tmp_path, capsys, activated):
    init(tmp_path / "a")
    out = capsys.readouterr().out
    init(tmp_path / "b")
    assert written(tmp_path / "a") == written(tmp_path / "b") == starter_files()
    assert list(starter_files()) == list(STARTER_FILES)
    lines = out.splitlines()
    shown = shlex.quote(str(tmp_path / "a"))
    assert lines[0] == f"wrote {len(STARTER_FILES)} files into {shown}:"
    assert lines[1:-4] == [f"  {name}" for name in STARTER_FILES]
    assert lines[-4:] == ["next:", f"  cd {shown}", f"  {STARTER_GATE_COMMAND}", "  python -m pytest"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]  # no staging folder left beside them


def test_init_into_an_empty_folder_keeps_it(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "empty"
    folder.mkdir()
    inode = folder.stat().st_ino
    monkeypatch.chdir(folder)
    assert main(["init", "."]) == 0
    assert written(folder) == starter_files() and folder.stat().st_ino == inode
    assert "cd " not in capsys.readouterr().out  # already there
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


@pytest.mark.parametrize("what", ["a file in it", "a file"])
def test_init_refuses_what_is_there_in_one_line_and_writes_nothing(tmp_path, capsys, what):
    target = tmp_path / "taken"
    if what == "a file":
        target.write_text("mine\n", encoding="utf-8")
    else:
        target.mkdir()
        (target / "notes.txt").write_text("mine\n", encoding="utf-8")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert main(["init", str(target)]) == 2
    captured = capsys.readouterr()
    reason = "is not a folder" if what == "a file" else "is not empty"
    assert captured.out == "" and captured.err.startswith(f"labsrc: error: {target} exists and {reason}")
    assert captured.err.count("\n") == 1 and captured.err.endswith("\n")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert (target if what == "a file" else target / "notes.txt").read_text(encoding="utf-8") == "mine\n"


@pytest.mark.parametrize("existing", [False, True], ids=["new folder", "empty folder"])
def test_an_interrupted_init_leaves_no_half_folder(tmp_path, monkeypatch, existing):
    folder = tmp_path / "my-gate"
    if existing:
        folder.mkdir()
    # A new folder is one rename (the staging folder into place); an empty one gets its entries one by one.
    interrupted_at = 3 if existing else 1
    calls = []
    real_rename = os.rename

    def rename(source, target):
        calls.append(target)
        if len(calls) == interrupted_at:
            raise KeyboardInterrupt
        real_rename(source, target)

    monkeypatch.setattr("labsrc.testing.starter.os.rename", rename)
    with pytest.raises(KeyboardInterrupt):
        write_starter(folder)
    assert len(calls) == interrupted_at
    assert [p.name for p in tmp_path.iterdir()] == (["my-gate"] if existing else [])  # no staging folder either
    assert not existing or list(folder.iterdir()) == []


def fake_environments(root: Path) -> dict[str, Path]:
    """A base Python and a venv made from it, as ``python -m venv`` lays them out: the venv's python links to the base's."""
    base, venv, other = root / "base python" / "bin", root / "my venv" / "bin", root / "other venv" / "bin"
    for folder in (base, venv, other):
        folder.mkdir(parents=True)
    (base / "python3.11").write_bytes(b"")
    (base / "python2.7").write_bytes(b"")
    (base / "python").symlink_to("python3.11")
    (venv / "python").symlink_to(base / "python3.11")
    (venv / "python3").symlink_to(base / "python3.11")
    (venv / "labsrc").write_bytes(b"")
    (other / "labsrc").write_bytes(b"")
    return {"base": base, "venv": venv, "other": other}


# Where `python` and `labsrc` typed in the shell lead (None: not on PATH), and what init must print for them. The venv
# is the environment labsrc runs in; its python resolves to the same file as the base's, which cannot import labsrc.
SHELLS = {
    "the venv activated": ({"python": "venv/python", "labsrc": "venv/labsrc"}, "python", True),
    "nothing on PATH": ({}, "full path", False),
    "the base python first (issue 59)": ({"python": "base/python", "labsrc": None}, "full path", False),
    "a python 2 beside this one": ({"python": "venv/python2", "labsrc": "venv/labsrc"}, "full path", True),
    "another venv's labsrc": ({"python": "venv/python", "labsrc": "other/labsrc"}, "python", False),
}


@pytest.mark.parametrize("shell", list(SHELLS))
def test_the_next_commands_name_this_environment_as_the_shell_finds_it(tmp_path, monkeypatch, shell):
    found, python_shown, labsrc_shown = SHELLS[shell]
    where = fake_environments(tmp_path)
    (where["venv"] / "python2").symlink_to(where["base"] / "python2.7")
    monkeypatch.setattr(init_command.sys, "executable", str(where["venv"] / "python3"))
    monkeypatch.setattr(init_command.sysconfig, "get_path", lambda name: str(where["venv"]))

    def which(name):
        folder, _, file = (found.get(name) or "/").partition("/")
        return str(where[folder] / file) if folder else None

    monkeypatch.setattr(init_command.shutil, "which", which)
    python = "python" if python_shown == "python" else shlex.quote(str(where["venv"] / "python3"))
    assert " " not in python or python.startswith("'")  # the full path has a space: quoted, so it runs as printed
    gate = STARTER_GATE_COMMAND if labsrc_shown else f"{python} -m labsrc.cli {STARTER_GATE_COMMAND[len('labsrc '):]}"
    assert init_command.next_commands() == [gate, f"{python} -m pytest"]


def test_without_pytest_init_still_writes_and_prints_the_one_line_that_installs_it(tmp_path, monkeypatch, capsys, activated):
    monkeypatch.setattr(init_command, "find_spec", lambda name: None if name == "pytest" else importlib.util.find_spec(name))
    assert main(["init", str(tmp_path / "starter")]) == 0
    assert written(tmp_path / "starter") == starter_files()
    lines = capsys.readouterr().out.splitlines()
    assert lines[-3:] == [
        f"  {STARTER_GATE_COMMAND}",
        "  python -m pip install 'hybrid-retrieval-lab[testing]'  # pytest is not installed for this Python; the extra brings it",
        "  python -m pytest",
    ]
    assert shlex.split(lines[-2], comments=True) == ["python", "-m", "pip", "install", "hybrid-retrieval-lab[testing]"]
    # The extra it names is this project's, and holds pytest.
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == init_command.DISTRIBUTION
    assert [r for r in project["optional-dependencies"]["testing"] if r.startswith("pytest")] == ["pytest>=7.4"]


def test_every_link_in_the_starter_resolves_inside_it(starter):
    pages = sorted(starter.rglob("*.md"))
    assert [p.relative_to(starter).as_posix() for p in pages] == sorted(n for n in STARTER_FILES if n.endswith(".md"))
    for page in pages:
        assert broken_links(page, root=starter) == [], page  # a file under the starter folder, a heading that is there
    readme = set(links(starter / "README.md"))
    assert {"docs/gating.md", "docs/gate-in-pytest.md", "docs/records.md"} <= readme
    # The lab's page links to its source; the starter's keeps the path as text, and every link between the pages.
    lab = links(ROOT / "docs" / "gating.md")
    assert "../labsrc/gate/plan.py" in lab and "../labsrc/gate/plan.py" not in links(starter / "docs" / "gating.md")
    assert "`labsrc/gate/plan.py`" in (starter / "docs" / "gating.md").read_text(encoding="utf-8")
    kept = [t for t in lab if not t.startswith("../")]
    assert kept and [t for t in links(starter / "docs" / "gating.md")] == kept


def test_a_starter_page_keeps_links_that_resolve_and_turns_the_others_into_their_text():
    text = (
        "# Title\n\nSee [records](records.md#record-schemas), [below](#title), [the web](https://example.org/x),\n"
        "[`labsrc/gate/plan.py`](../labsrc/gate/plan.py), ![a plot](../benchmarks/plot.png) and [up](../README.md).\n"
        "```text\n[in a fence](../kept.md)\n```\n"
    )
    assert starter_page("docs/gating.md", text) == (
        "# Title\n\n> The lab's `docs/gating.md`, as `labsrc init` copied it. A path under `labsrc/` is a module of the "
        "installed package (`python -c \"import labsrc; print(labsrc.__path__[0])\"` prints its folder); `tests/` and "
        "`benchmarks/` are in the lab's repository.\n"
        "\nSee [records](records.md#record-schemas), [below](#title), [the web](https://example.org/x),\n"
        "`labsrc/gate/plan.py`, a plot and up.\n"
        "```text\n[in a fence](../kept.md)\n```\n"
    )


def readme_commands(folder: Path) -> list[str]:
    """The commands of the starter README's first code block, continuation lines joined."""
    text = (folder / "README.md").read_text(encoding="utf-8")
    block = text.split("```bash\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    return [" ".join(line.split()) for line in block.splitlines()]


def test_the_readme_shows_what_init_prints_in_an_activated_venv(starter, activated):
    assert readme_commands(starter) == init_command.next_commands() == [STARTER_GATE_COMMAND, "python -m pytest"]


def readme_gate_command(folder: Path) -> str:
    """The ``labsrc gate`` command of the starter's README, its continuation lines joined."""
    text = (folder / "README.md").read_text(encoding="utf-8").replace("\\\n", " ")
    [line] = [line for line in text.splitlines() if line.startswith("labsrc gate ")]
    return " ".join(line.split())


def test_the_readme_gate_command_passes_every_gate(starter):
    command = readme_gate_command(starter)
    assert command == STARTER_GATE_COMMAND
    argv = [sys.executable, "-m", "labsrc.cli", *shlex.split(command)[1:], "--no-progress"]
    proc = subprocess.run(argv, check=False, cwd=starter, env=environment(), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdict = verdicts(proc.stdout)
    expected = {name for name, _ in expected_gates(load_gate_config(starter / "data" / "gate.json"))}
    # The CLI lists build and search errors only when a build failed or a search raised.
    assert set(verdict) == expected - {"build errors", "search errors", "all gates"}
    assert set(verdict.values()) == {"PASS"}, proc.stdout
    assert "NOT TESTED" not in proc.stdout and "FAIL" not in proc.stdout and proc.stdout.rstrip().endswith("all gates pass")


# The lab's environment autoloads nbval's, hypothesis's and langsmith's pytest plugins (about 8 s of imports a
# process here); the run from the folder keeps them, as a team's environment has plugins of its own, the others
# leave them out (PYTEST_DISABLE_PLUGIN_AUTOLOAD), which changes nothing the starter relies on.
@pytest.mark.parametrize("where", ["the folder", "its tests folder", "elsewhere, naming the file"])
def test_pytest_passes_every_gate_from_any_folder(starter, tmp_path, where):
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    env = environment() if where == "the folder" else environment(PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    cwd = {"the folder": starter, "its tests folder": starter / "tests", "elsewhere, naming the file": tmp_path}[where]
    if where.startswith("elsewhere"):
        argv.append(str(starter / "tests" / "test_release_gate.py"))
    proc = subprocess.run(argv, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    items = len(expected_gates(load_gate_config(starter / "data" / "gate.json")))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(rf"^{items} passed in ", proc.stdout, re.MULTILINE), proc.stdout
    assert "skipped" not in proc.stdout and "failed" not in proc.stdout


def test_a_one_line_leak_in_the_retriever_fails_the_gate(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "leaky"
    init(folder)
    retriever = folder / "my_retriever.py"
    source = retriever.read_text(encoding="utf-8")
    assert source.count(ACL_FILTER) == 1
    retriever.write_text(source.replace(ACL_FILTER, ""), encoding="utf-8")  # the ACL filter dropped
    capsys.readouterr()
    monkeypatch.delitem(sys.modules, "labsrc_plugin_my_retriever", raising=False)  # a path import's module, removed after
    data = folder / "data"
    status = main(["gate", "--chunks", str(data / "chunks.jsonl"), "--callers", str(data / "callers.json"),
                   "--cases", str(data / "cases.jsonl"), "--retriever", f"{retriever}:build",
                   "--config", str(data / "gate.json"), "--no-progress"])
    out = capsys.readouterr().out
    assert status == 1, out
    verdict = verdicts(out)
    assert verdict["restricted exclusion"] == "FAIL" and verdict["boundary on every returned id"] == "FAIL"
    assert verdict["superseded exclusion"] == verdict["wrong_region exclusion"] == "PASS"  # the other filters hold
    assert "'emea-admin-rights'" in out and "GATES FAILED" in out
