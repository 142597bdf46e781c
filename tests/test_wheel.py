"""A wheel install runs `labsrc report` from any directory (issue 22: it only worked from the repository)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from labsrc.testing.starter import starter_files

ROOT = Path(__file__).resolve().parents[1]


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)
    assert proc.returncode == 0, f"{command}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.mark.slow
def test_labsrc_report_runs_from_a_wheel_in_a_fresh_venv_from_any_directory(tmp_path):
    # The build copies what the wheel is made from (never writing build/ into the repository).
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "labsrc", src / "labsrc", ignore=shutil.ignore_patterns("__pycache__", "_fixtures"))
    shutil.copytree(ROOT / "fixtures", src / "fixtures", ignore=shutil.ignore_patterns("coursework"))
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(src)])
    wheel = next((tmp_path / "dist").glob("hybrid_retrieval_lab-*.whl"))
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
    # The wheel carries the starter folder `labsrc init` writes (package data), byte for byte.
    run([str(labsrc), "init", "starter"], cwd=elsewhere, env=env)
    starter = elsewhere / "starter"
    assert {p.relative_to(starter).as_posix(): p.read_bytes() for p in starter.rglob("*") if p.is_file()} == starter_files()
