"""A wheel install runs `labsrc report` from any directory (issue 22: it only worked from the repository), and
`labsrc init`'s starter with every command it prints, as printed (issue 59: a bare `pytest` was another Python's)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from labsrc.gate.config import load_gate_config
from labsrc.testing import expected_gates
from labsrc.testing.starter import STARTER_FILES, STARTER_GATE_COMMAND, starter_files

ROOT = Path(__file__).resolve().parents[1]


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)
    assert proc.returncode == 0, f"{command}\n{proc.stdout}\n{proc.stderr}"
    return proc


# Slow (about 25 s alone, longer under load) by what it proves: a wheel built and installed in a fresh venv,
# `labsrc report`, then the starter's printed commands (its gate and pytest) run as printed in two shells.
@pytest.mark.slow
def test_labsrc_report_runs_from_a_wheel_in_a_fresh_venv_from_any_directory(tmp_path):
    # The build copies what the wheel is made from (never writing build/ into the repository).
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(ROOT / name, src / name)
    # symlinks=True: the starter's pages are git symbolic links into docs/, which the build must copy as files.
    shutil.copytree(ROOT / "labsrc", src / "labsrc", symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "_fixtures"))
    pages = [name for name in STARTER_FILES if name.startswith("docs/")]
    (src / "docs").mkdir()
    for name in pages:
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "fixtures", src / "fixtures", ignore=shutil.ignore_patterns("coursework"))
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(src)])
    wheel = next((tmp_path / "dist").glob("hybrid_retrieval_lab-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        for name in pages:
            info = archive.getinfo(f"labsrc/testing/starter/{name}")
            assert not stat.S_ISLNK(info.external_attr >> 16) and archive.read(info) == (ROOT / name).read_bytes()
        [metadata] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        assert re.search(r"^Requires-Dist: pytest>=7\.4; extra == .testing.$", archive.read(metadata).decode(), re.M)
    # A fresh venv that sees this environment's dependencies (numpy, pandas, ...) but not its labsrc:
    # a plain path in a .pth file adds the folder without running the editable install's own .pth.
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    Path(purelib, "dev-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LABSRC_FIXTURES")}
    where = run([str(python), "-c", "import labsrc.datasets as d; print(d.__file__); print(d.fixtures_dir())"],
                cwd=elsewhere, env=env).stdout.split()  # fmt: skip
    assert where[0].startswith(purelib) and where[1] == str(Path(purelib, "labsrc", "_fixtures"))
    labsrc = venv / ("Scripts/labsrc.exe" if os.name == "nt" else "bin/labsrc")
    report = run([str(labsrc), "report", "--no-progress", "--out", "r"], cwd=elsewhere, env=env)
    assert report.stdout.startswith("Release gate") and (elsewhere / "r" / "report.html").is_file()
    assert "Traceback" not in report.stderr
    # The starter, as a user runs it: `labsrc init` in a shell, then every command it printed, as printed. Plugins a
    # team's environment would not have (this one's nbval, hypothesis, ...: seconds of imports) stay out of pytest.
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    for shell in ("activated", "not activated"):
        if shell == "activated":  # bin/ first on PATH, as `. venv/bin/activate` leaves it
            here = {**env, "PATH": f"{labsrc.parent}{os.pathsep}{env['PATH']}", "VIRTUAL_ENV": str(venv)}
            init = run(["bash", "-c", "labsrc init starter"], cwd=elsewhere, env=here)
        else:  # PATH as this test found it: `python` there is another interpreter, which has no labsrc (issue 59)
            here = env
            init = run(["bash", "-c", f"{labsrc} init other-starter"], cwd=elsewhere, env=here)
        lines = init.stdout.splitlines()
        commands = [line.strip() for line in lines[lines.index("next:") + 1:]]
        starter = elsewhere / commands[0].removeprefix("cd ")
        # The wheel carries the starter folder `labsrc init` writes (package data), byte for byte.
        assert {p.relative_to(starter).as_posix(): p.read_bytes() for p in starter.rglob("*") if p.is_file()} == starter_files()
        items = len(expected_gates(load_gate_config(starter / "data" / "gate.json")))
        if shell == "activated":
            assert commands[1:] == [STARTER_GATE_COMMAND, "python -m pytest"]
        else:
            assert commands[1:] == [f"{shlex.quote(str(python))} -m labsrc.cli {STARTER_GATE_COMMAND.removeprefix('labsrc ')}",
                                    f"{shlex.quote(str(python))} -m pytest"]
        ran = run(["bash", "-c", "set -e\n" + "\n".join(commands)], cwd=elsewhere, env=here)
        assert ran.stdout.count("all gates pass") == 1 and re.search(rf"= {items} passed\b", ran.stdout), ran.stdout
        runs = [init, ran]
        if shell == "activated":  # pytest from tests/ too (the full-path form runs the same from any folder)
            runs.append(run(["bash", "-c", commands[-1]], cwd=starter / "tests", env=here))
            assert re.search(rf"= {items} passed\b", runs[-1].stdout), runs[-1].stdout
        for proc in runs:  # the repository's labsrc took no part: no path into it, no traceback
            assert str(ROOT / "labsrc") not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
